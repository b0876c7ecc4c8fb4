package budget

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/opstatus/opstatus/internal/telemetry"
)

// process is what a member needs of its gate.
type process interface {
	// local is what the process does at now.
	local(now Instant) local
	// settle runs decide on what the process does at now and takes the
	// grant it returns, with no permit taken in between.
	settle(now Instant, decide func(local) grant)
}

// member is the process's entry in the ledger: it reads the ledger, plans
// (plan.go) and writes, and grants its gate what the ledger lets it use.
type member struct {
	cfg  Config
	gate process
	wake chan struct{} // a tick is wanted now

	mu sync.Mutex
	s  state
}

func newMember(cfg Config, gate process) *member {
	return &member{cfg: cfg, gate: gate, wake: make(chan struct{}, 1),
		s: state{owner: cfg.NewID(), observed: map[string]observation{}}}
}

// poke asks run for a tick now.
func (m *member) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// figures are the member's share and owner id.
func (m *member) figures() (target int, owner string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.s.target, m.s.owner
}

// run keeps the process's entry until ctx ends: a tick every ReadEvery
// (half that while below target with demand), and at once when work
// arrives or a give-back has drained.
func (m *member) run(ctx context.Context) {
	failing := false
	for {
		err := m.tick(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			m.cfg.Logger.Warn("budget ledger not read or written; permits last until the lease ends", "error", err)
		case err == nil && failing:
			failing = false
			m.cfg.Logger.Info("budget ledger written again")
		}
		every := m.cfg.ReadEvery
		demand := m.gate.local(m.cfg.Clock.Now()).demand
		m.mu.Lock()
		if demand > 0 && m.s.committed < min(m.s.target, demand) {
			every /= 2
		}
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-m.cfg.Clock.After(every):
		case <-m.wake:
		}
	}
}

// tick reads the ledger and writes the process's entry when it must: to
// join, grow, give back, drop dead entries or renew. A 412 reads again, up
// to WriteTries times. A failed read changes nothing (the cap stays and
// never grows); a failed write leaves the lease to run out.
func (m *member) tick(ctx context.Context) error {
	var err error
	for try := range m.cfg.WriteTries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return err
			case <-m.cfg.Clock.After(time.Duration(rand.Int64N(int64(50 * time.Millisecond)))):
			}
		}
		var again bool
		if again, err = m.once(ctx); !again {
			return err
		}
	}
	return err
}

// once is one read and at most one write; again says that the write met
// a newer ledger.
func (m *member) once(ctx context.Context) (again bool, err error) {
	l, etag, err := m.read(ctx)
	if errors.Is(err, ErrNotFound) {
		return m.fence(ctx, "", "")
	}
	if errors.Is(err, ErrUnreadable) && etag != "" {
		return m.fence(ctx, etag, err.Error())
	}
	if err != nil {
		return false, fmt.Errorf("read the budget ledger: %w", err)
	}
	if why := l.impossible(); why != "" {
		return m.fence(ctx, etag, why)
	}
	var d decision
	m.mu.Lock()
	if m.s.spare == "" {
		m.s.spare = m.cfg.NewID()
	}
	now := m.cfg.Clock.Now()
	m.gate.settle(now, func(in local) grant {
		d = plan(m.s, l, in, now, m.cfg)
		m.s = d.state
		return m.s.grant()
	})
	m.mu.Unlock()
	m.log(d)
	if !d.write {
		return false, nil
	}
	send := m.cfg.Clock.Now()
	if _, err = m.replace(ctx, d.ledger, etag); err != nil {
		return errors.Is(err, ErrPreconditionFailed), fmt.Errorf("write the budget ledger: %w", err)
	}
	m.written(d.ledger, send)
	return false, nil
}

// log reports what plan found.
func (m *member) log(d decision) {
	if d.newEpoch != "" {
		m.cfg.Logger.Warn("budget ledger replaced under a new epoch; holding no permits for the expiry time",
			"epoch", d.newEpoch)
	}
	if d.reclaimed != "" {
		m.cfg.Logger.Warn("own budget entry reclaimed by another process; rejoining", "owner", d.reclaimed)
	}
	for o, why := range d.invalid {
		m.cfg.Logger.Error("budget ledger entry invalid; dropping it as expired", "owner", o, "problem", why)
	}
}

// read reads the ledger within CallTimeout.
func (m *member) read(ctx context.Context) (Ledger, string, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	return m.cfg.Store.Read(ctx)
}

// replace writes l with If-Match etag within CallTimeout.
func (m *member) replace(ctx context.Context, l Ledger, etag string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
	defer cancel()
	return m.cfg.Store.Replace(ctx, l, etag)
}

// fence makes the ledger anew under a new epoch, its own entry holding the
// whole budget as a fence: holders of the one before may still be
// running, so nobody takes permits for ExpireAfter, the creator included.
// Without etag the ledger is missing and is created (on 409 another member
// created it first: read again); with it, the ledger read at etag is
// unreadable or impossible (why) and is replaced with If-Match (on 412
// another member replaced or changed it first: read again).
func (m *member) fence(ctx context.Context, etag, why string) (again bool, err error) {
	m.mu.Lock()
	switch {
	case etag != "":
		m.cfg.Logger.Error("budget ledger unreadable or impossible; replacing it under a new epoch, holding no permits for the expiry time",
			"problem", why)
	case m.s.joined || m.s.leased:
		m.cfg.Logger.Warn("budget ledger missing; holding no permits until it is created again")
	}
	var l Ledger
	now := m.cfg.Clock.Now()
	m.gate.settle(now, func(in local) grant {
		m.s = m.s.reset(m.cfg.NewID()).wait(now)
		l = Ledger{ID: ID, Epoch: m.cfg.NewID(), Budget: m.cfg.Budget, Holders: map[string]Entry{
			m.s.owner: m.s.entry(m.cfg.Budget, in, m.cfg),
		}}
		m.s.seq = l.Holders[m.s.owner].Seq
		return m.s.grant()
	})
	m.mu.Unlock()
	send := m.cfg.Clock.Now()
	if etag == "" {
		cctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
		_, err = m.cfg.Store.Create(cctx, l)
		cancel()
	} else {
		_, err = m.replace(ctx, l, etag)
		if err == nil {
			telemetry.LedgerReplaced(ctx)
		}
	}
	switch {
	case err == nil:
		m.mu.Lock()
		m.s.epoch, m.s.epochSeen = l.Epoch, send
		clear(m.s.observed)
		m.mu.Unlock()
		m.written(l, send)
		return false, nil
	case errors.Is(err, ErrConflict), errors.Is(err, ErrPreconditionFailed), etag != "" && errors.Is(err, ErrNotFound):
		return true, nil
	case etag != "":
		return false, fmt.Errorf("replace the budget ledger: %w", err)
	default:
		return false, fmt.Errorf("create the budget ledger: %w", err)
	}
}

// written records the successful write of l sent at send: only now may
// the process use what it grew, until send + Validity.
func (m *member) written(l Ledger, send Instant) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gate.settle(m.cfg.Clock.Now(), func(local) grant {
		m.s = m.s.written(l, send)
		return m.s.grant()
	})
}
