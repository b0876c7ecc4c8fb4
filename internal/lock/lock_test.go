package lock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/database"
	"github.com/opstatus/opstatus/internal/database/databasetesting"
	"github.com/opstatus/opstatus/internal/lock"
	"github.com/opstatus/opstatus/internal/testenv"
)

// env is a lock store plus a way for a rival to overwrite the lock item
// without If-Match, as a frontend that missed its expiry would.
type env struct {
	store database.LockStore
	ttl   time.Duration
	steal func(t *testing.T, id, owner string)
	// failRenew makes every renewal fail with a transient error.
	failRenew func(t *testing.T)
}

func memoryEnv(t *testing.T) env { return memoryEnvTTL(lock.MinTTL)(t) }

// memoryEnvTTL returns environments of an in-memory store of their own whose
// lock TTL is ttl.
func memoryEnvTTL(ttl time.Duration) func(t *testing.T) env {
	return func(t *testing.T) env { return newMemoryEnv(ttl) }
}

func newMemoryEnv(ttl time.Duration) env {
	m := databasetesting.NewMemoryClient(ttl)
	var fail atomic.Bool
	m.Hook = func(call databasetesting.Op) error {
		if call == databasetesting.OpLockRenew && fail.Load() {
			return database.ErrUnavailable
		}
		return nil
	}
	return env{
		store: m.Locks(),
		ttl:   ttl,
		steal: func(t *testing.T, id, owner string) { m.HoldLock(id, owner, 10*time.Second) },
		failRenew: func(t *testing.T) {
			fail.Store(true)
		},
	}
}

func TestLockMemory(t *testing.T) {
	t.Parallel()
	runLockTests(t, memoryEnv)
}

// lostCreateAnswers writes the lock item on Create and then reports 409, as
// a create whose answer was lost and that the SDK sent again would.
type lostCreateAnswers struct{ database.LockStore }

func (s lostCreateAnswers) Create(ctx context.Context, id, owner string, ttl time.Duration) (azcore.ETag, error) {
	if _, err := s.LockStore.Create(ctx, id, owner, ttl); err != nil {
		return "", err
	}
	return "", fmt.Errorf("create lock %s: %w", id, database.ErrConflict)
}

// unknownCreates writes the lock item on Create and then fails with fail's
// error, as a create whose answer never came would. The item is the caller's
// unless writeAs names another owner, whose item is there instead.
type unknownCreates struct {
	database.LockStore
	writeAs string
	fail    func() error
}

func (s unknownCreates) Create(ctx context.Context, id, owner string, ttl time.Duration) (azcore.ETag, error) {
	if s.writeAs != "" {
		owner = s.writeAs
	}
	if _, err := s.LockStore.Create(ctx, id, owner, ttl); err != nil {
		return "", err
	}
	return "", fmt.Errorf("create lock %s: %w", id, s.fail())
}

// remove deletes the lock item id as an operator would, or as an early
// expiry does.
func remove(t *testing.T, store database.LockStore, id string) {
	t.Helper()
	_, etag, err := store.Get(context.Background(), id)
	require.NoError(t, err)
	require.NoError(t, store.Delete(context.Background(), id, etag))
}

// awaitCancel waits for the work's context to end, for up to d.
func awaitCancel(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(d):
		return errors.New("work was not canceled")
	}
}

func runLockTests(t *testing.T, newEnv func(t *testing.T) env) {
	ctx := context.Background()
	opts := func(wait time.Duration) lock.Options {
		return lock.Options{Wait: wait, RetryInterval: 50 * time.Millisecond}
	}

	t.Run("ttl is read from the store", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		ttl, err := lock.New(e.store, opts(time.Second)).TTL(ctx)
		require.NoError(t, err)
		require.Equal(t, e.ttl, ttl)
	})

	t.Run("second owner waits, then gives up with ErrHeld", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		_, err := e.store.Create(ctx, "sub-held", "frontend", time.Minute)
		require.NoError(t, err)
		ran := false
		err = lock.New(e.store, opts(300*time.Millisecond)).Do(ctx, "SUB-HELD", "opstatus", func(context.Context) error {
			ran = true
			return nil
		})
		require.ErrorIs(t, err, lock.ErrHeld)
		require.False(t, ran)
	})

	t.Run("expiry frees the lock of a dead holder", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		_, err := e.store.Create(ctx, "sub-dead", "dead-frontend", e.ttl)
		require.NoError(t, err)
		ran := false
		err = lock.New(e.store, opts(e.ttl*10)).Do(ctx, "sub-dead", "opstatus", func(context.Context) error {
			ran = true
			return nil
		})
		require.NoError(t, err)
		require.True(t, ran)
	})

	t.Run("renewal keeps the lock through long work, release frees it", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		l := lock.New(e.store, opts(time.Second))
		rivalWon := false
		err := l.Do(ctx, "sub-long", "opstatus", func(ctx context.Context) error {
			deadline := time.Now().Add(e.ttl + e.ttl/2)
			for time.Now().Before(deadline) {
				if _, err := e.store.Create(ctx, "sub-long", "rival", e.ttl); err == nil {
					rivalWon = true
				}
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-time.After(e.ttl / 6):
				}
			}
			return nil
		})
		require.NoError(t, err)
		require.False(t, rivalWon, "a rival acquired the lock while it was renewed")
		_, err = e.store.Create(ctx, "sub-long", "next", e.ttl)
		require.NoError(t, err, "the lock was not released")
	})

	t.Run("release is attempted when the work fails", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		boom := errors.New("boom")
		err := lock.New(e.store, opts(time.Second)).Do(ctx, "sub-fail", "opstatus", func(context.Context) error { return boom })
		require.ErrorIs(t, err, boom)
		_, err = e.store.Create(ctx, "sub-fail", "next", e.ttl)
		require.NoError(t, err)
	})

	t.Run("a stale etag loses the lock and cancels the work", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		err := lock.New(e.store, opts(time.Second)).Do(ctx, "sub-stolen", "opstatus", func(ctx context.Context) error {
			e.steal(t, "sub-stolen", "thief")
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(10 * e.ttl):
				return errors.New("work was not canceled")
			}
		})
		require.ErrorIs(t, err, lock.ErrLost)
		// The thief's lock survives our release attempt.
		_, err = e.store.Create(ctx, "sub-stolen", "other", e.ttl)
		require.ErrorIs(t, err, database.ErrConflict)
	})

	t.Run("renewals that keep failing cancel the work before the ttl runs out", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		var canceledAfter time.Duration
		start := time.Now()
		err := lock.New(e.store, opts(time.Second)).Do(ctx, "sub-flaky", "opstatus", func(ctx context.Context) error {
			e.failRenew(t)
			select {
			case <-ctx.Done():
				canceledAfter = time.Since(start)
				return context.Cause(ctx)
			case <-time.After(10 * e.ttl):
				return errors.New("work was not canceled")
			}
		})
		require.ErrorIs(t, err, lock.ErrLost)
		require.NotZero(t, canceledAfter)
	})

	t.Run("a lock item deleted under the work is lost at the next renewal", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		err := lock.New(e.store, opts(time.Second)).Do(ctx, "sub-deleted", "opstatus", func(wctx context.Context) error {
			remove(t, e.store, "sub-deleted")
			return awaitCancel(wctx, e.ttl)
		})
		require.ErrorIs(t, err, lock.ErrLost)
		require.ErrorIs(t, err, database.ErrNotFound, "lost by the renewal that found the item gone")
	})

	t.Run("a lock taken and released by a rival meanwhile is lost at the next renewal", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		err := lock.New(e.store, opts(time.Second)).Do(ctx, "sub-between", "opstatus", func(wctx context.Context) error {
			remove(t, e.store, "sub-between")
			etag, err := e.store.Create(ctx, "sub-between", "rival", e.ttl)
			require.NoError(t, err)
			require.NoError(t, e.store.Delete(ctx, "sub-between", etag))
			return awaitCancel(wctx, e.ttl)
		})
		require.ErrorIs(t, err, lock.ErrLost)
		require.ErrorIs(t, err, database.ErrNotFound, "lost by the renewal that found the item gone")
	})

	t.Run("a create that met its own item adopts it", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		const owner = "opstatus/host/1"
		l := lock.New(lostCreateAnswers{e.store}, lock.Options{Wait: 5 * time.Second, RetryInterval: time.Second})
		start := time.Now()
		var ran time.Duration
		err := l.Do(ctx, "sub-own", owner, func(wctx context.Context) error {
			ran = time.Since(start)
			// Held and renewed for longer than a lease.
			select {
			case <-wctx.Done():
				return context.Cause(wctx)
			case <-time.After(e.ttl):
			}
			_, err := e.store.Create(ctx, "sub-own", "rival", e.ttl)
			require.ErrorIs(t, err, database.ErrConflict)
			got, _, err := e.store.Get(ctx, "sub-own")
			require.NoError(t, err)
			require.Equal(t, owner, got)
			return nil
		})
		require.NoError(t, err)
		require.NotZero(t, ran)
		require.Less(t, ran, 500*time.Millisecond, "waited on its own lock")
		_, _, err = e.store.Get(ctx, "sub-own")
		require.ErrorIs(t, err, database.ErrNotFound, "the adopted lock was not released")
	})

	t.Run("a create that met another owner's item waits", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		_, err := e.store.Create(ctx, "sub-other", "opstatus/host/12", time.Minute)
		require.NoError(t, err)
		ran := false
		err = lock.New(lostCreateAnswers{e.store}, opts(300*time.Millisecond)).Do(ctx, "sub-other", "opstatus/host/1",
			func(context.Context) error {
				ran = true
				return nil
			})
		require.ErrorIs(t, err, lock.ErrHeld)
		require.False(t, ran)
		got, _, err := e.store.Get(ctx, "sub-other")
		require.NoError(t, err)
		require.Equal(t, "opstatus/host/12", got)
	})

	t.Run("a create whose outcome is unknown deletes the item it wrote", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		for i, tc := range []struct {
			name         string
			err          error
			cancelCaller bool
		}{
			{"timeout", fmt.Errorf("%w: %w", database.ErrUnavailable, os.ErrDeadlineExceeded), false},
			{"dropped connection", fmt.Errorf("%w: %w", database.ErrUnavailable, syscall.ECONNRESET), false},
			{"the caller's context ended", context.Canceled, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				id := fmt.Sprint("sub-unknown-", i)
				cctx, cancel := context.WithCancel(ctx)
				defer cancel()
				store := unknownCreates{LockStore: e.store, fail: func() error {
					if tc.cancelCaller {
						cancel()
					}
					return tc.err
				}}
				ran := false
				err := lock.New(store, opts(time.Second)).Do(cctx, id, "opstatus/host/1", func(context.Context) error {
					ran = true
					return nil
				})
				require.ErrorIs(t, err, tc.err)
				require.NotErrorIs(t, err, lock.ErrHeld)
				require.False(t, ran)
				_, _, err = e.store.Get(ctx, id)
				require.ErrorIs(t, err, database.ErrNotFound, "the item the create wrote was left behind")
				_, err = e.store.Create(ctx, id, "frontend", e.ttl)
				require.NoError(t, err, "the frontend is locked out")
			})
		}
	})

	t.Run("a create whose outcome is unknown leaves another owner's item", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		store := unknownCreates{LockStore: e.store, writeAs: "frontend", fail: func() error {
			return fmt.Errorf("%w: %w", database.ErrUnavailable, syscall.ECONNRESET)
		}}
		err := lock.New(store, opts(time.Second)).Do(ctx, "sub-unknown-other", "opstatus/host/1", func(context.Context) error {
			return errors.New("work ran without the lock")
		})
		require.ErrorIs(t, err, syscall.ECONNRESET)
		got, _, err := e.store.Get(ctx, "sub-unknown-other")
		require.NoError(t, err, "another owner's item was deleted")
		require.Equal(t, "frontend", got)
	})

	t.Run("canceled caller stops waiting", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		_, err := e.store.Create(ctx, "sub-cancel", "frontend", time.Minute)
		require.NoError(t, err)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		err = lock.New(e.store, opts(time.Minute)).Do(cctx, "sub-cancel", "opstatus", func(context.Context) error { return nil })
		require.ErrorIs(t, err, context.Canceled)
	})
}

// hangingRenewals never answers a renewal until its context ends, as a
// partitioned store would; it records when the lock was created.
type hangingRenewals struct {
	database.LockStore
	created time.Time
}

func (h *hangingRenewals) Create(ctx context.Context, id, owner string, ttl time.Duration) (azcore.ETag, error) {
	h.created = time.Now()
	return h.LockStore.Create(ctx, id, owner, ttl)
}

func (h *hangingRenewals) Renew(ctx context.Context, _, _ string, _ time.Duration, _ azcore.ETag) (azcore.ETag, error) {
	<-ctx.Done()
	return "", ctx.Err()
}

// A renewal that hangs must not keep the work going past the lease: the work
// is canceled before the lock item can expire and someone else take it.
func TestHangingRenewalsCancelTheWorkBeforeTheLeaseEnds(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	store := &hangingRenewals{LockStore: databasetesting.NewMemoryClient(ttl).Locks()}
	var canceled time.Time
	err := lock.New(store, lock.Options{Wait: time.Second}).Do(context.Background(), "sub", "opstatus", func(ctx context.Context) error {
		<-ctx.Done()
		canceled = time.Now()
		return context.Cause(ctx)
	})
	require.ErrorIs(t, err, lock.ErrLost)
	// The item may expire a TTL after the whole second of its creation.
	expires := store.created.Truncate(time.Second).Add(ttl)
	require.True(t, canceled.Before(expires),
		"work canceled %s after the lock was created, at or past its earliest expiry %s after", canceled.Sub(store.created), expires.Sub(store.created))
}

// Callers in one process take turns locally: none of them meets a 409 and
// sleeps a retry interval, and the work never overlaps.
func TestCallersInOneProcessTakeTurns(t *testing.T) {
	t.Parallel()
	m := databasetesting.NewMemoryClient(5 * time.Second)
	var creates atomic.Int64
	m.Hook = func(call databasetesting.Op) error {
		if call == databasetesting.OpLockCreate {
			creates.Add(1)
		}
		return nil
	}
	l := lock.New(m.Locks(), lock.Options{Wait: 10 * time.Second, RetryInterval: time.Second})
	var inside, overlaps atomic.Int64
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := l.Do(context.Background(), "sub", fmt.Sprint("owner-", i), func(context.Context) error {
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				time.Sleep(5 * time.Millisecond)
				inside.Add(-1)
				return nil
			})
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	require.Zero(t, overlaps.Load())
	require.Equal(t, int64(20), creates.Load(), "every caller created the lock item once, none met a 409")
}

// A lock TTL the lease margin cannot cover is refused with a clear error.
func TestShortTTLIsRefused(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{0, time.Second, lock.MinTTL - time.Millisecond} {
		_, err := lock.New(databasetesting.NewMemoryClient(ttl).Locks(), lock.Options{}).TTL(context.Background())
		require.ErrorIs(t, err, lock.ErrBadTTL, "ttl %s", ttl)
		require.ErrorContains(t, err, "DefaultTimeToLive")
		require.ErrorContains(t, err, "at least "+lock.MinTTL.String())
	}
	ttl, err := lock.New(databasetesting.NewMemoryClient(lock.MinTTL).Locks(), lock.Options{}).TTL(context.Background())
	require.NoError(t, err)
	require.Equal(t, lock.MinTTL, ttl)
}

// Wait returns only once every Do has finished its release, even a slow
// release after the work was canceled, and fails when its bound passes
// first.
func TestWaitCoversTheRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := databasetesting.NewMemoryClient(lock.MinTTL)
	unblock := make(chan struct{})
	m.Hook = func(call databasetesting.Op) error {
		if call == databasetesting.OpLockDelete {
			<-unblock
		}
		return nil
	}
	l := lock.New(m.Locks(), lock.Options{Wait: time.Second})
	require.NoError(t, l.Wait(ctx), "nothing in progress")

	workCtx, cancel := context.WithCancel(ctx)
	holding := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- l.Do(workCtx, "sub", "opstatus", func(ctx context.Context) error {
			close(holding)
			<-ctx.Done()
			return context.Cause(ctx)
		})
	}()
	<-holding
	cancel()

	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	require.ErrorIs(t, l.Wait(short), context.DeadlineExceeded, "returned before the release")

	time.AfterFunc(200*time.Millisecond, func() { close(unblock) })
	bounded, cancelBounded := context.WithTimeout(ctx, 5*time.Second)
	defer cancelBounded()
	require.NoError(t, l.Wait(bounded))
	_, _, err := m.Locks().Get(ctx, "sub")
	require.ErrorIs(t, err, database.ErrNotFound, "Wait returned before the release was done")
	require.ErrorIs(t, <-done, context.Canceled)
}

// Wait covers the deletion of the item a create with an unknown outcome
// wrote: shutdown does not leave it behind.
func TestWaitCoversTheUnknownCreateCleanup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := databasetesting.NewMemoryClient(lock.MinTTL)
	deleting, unblock := make(chan struct{}), make(chan struct{})
	m.Hook = func(call databasetesting.Op) error {
		if call == databasetesting.OpLockDelete {
			close(deleting)
			<-unblock
		}
		return nil
	}
	store := unknownCreates{LockStore: m.Locks(), fail: func() error {
		return fmt.Errorf("%w: %w", database.ErrUnavailable, syscall.ECONNRESET)
	}}
	l := lock.New(store, lock.Options{Wait: time.Second})
	done := make(chan error, 1)
	go func() {
		done <- l.Do(ctx, "sub", "opstatus", func(context.Context) error { return nil })
	}()
	select {
	case <-deleting:
	case err := <-done:
		require.FailNow(t, "Do returned without deleting the item its create wrote", "%v", err)
	}

	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	require.ErrorIs(t, l.Wait(short), context.DeadlineExceeded, "returned before the deletion")

	close(unblock)
	bounded, cancelBounded := context.WithTimeout(ctx, 5*time.Second)
	defer cancelBounded()
	require.NoError(t, l.Wait(bounded))
	_, _, err := m.Locks().Get(ctx, "sub")
	require.ErrorIs(t, err, database.ErrNotFound, "Wait returned before the deletion was done")
	require.ErrorIs(t, <-done, syscall.ECONNRESET)
}

// panickingRenewals panics on every renewal, as a bug under it would.
type panickingRenewals struct{ database.LockStore }

func (panickingRenewals) Renew(context.Context, string, string, time.Duration, azcore.ETag) (azcore.ETag, error) {
	panic("kaboom in Renew")
}

// A panic while keeping the lock loses it as a failed renewal does: the
// work is canceled with ErrLost, the panic is logged with its stack, the
// lock is released, and the process lives on.
func TestPanicKeepingTheLockCancelsTheWork(t *testing.T) {
	t.Parallel()
	m := databasetesting.NewMemoryClient(lock.MinTTL)
	var logs testenv.SyncBuffer
	l := lock.New(panickingRenewals{m.Locks()}, lock.Options{Wait: time.Second, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	var cause error
	err := l.Do(context.Background(), "sub", "opstatus", func(ctx context.Context) error {
		<-ctx.Done()
		cause = context.Cause(ctx)
		return cause
	})
	require.ErrorIs(t, cause, lock.ErrLost)
	require.ErrorIs(t, err, lock.ErrLost)
	require.ErrorContains(t, err, "panicked: kaboom in Renew")
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(logs.String()), &rec), logs.String())
	require.Equal(t, "ERROR", rec["level"])
	require.Equal(t, "keeping the subscription lock panicked; canceling the work under it", rec["msg"])
	require.Equal(t, "sub", rec["subscription_id"])
	require.Equal(t, "kaboom in Renew", rec["panic"])
	require.Contains(t, rec["stack"], "internal/lock/lock_test.go", "the stack reaches the panic")
	_, _, err = m.Locks().Get(context.Background(), "sub")
	require.ErrorIs(t, err, database.ErrNotFound, "the lock was released")
}
