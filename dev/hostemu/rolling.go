package hostemu

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"
)

// RollingUpdate is a site update under the Flex Consumption plan's
// rolling strategy ("Site update strategies in Flex Consumption", preview):
// instances are drained and replaced in batches, in-progress executions
// complete, so old and new instances of a group run together.
type RollingUpdate struct {
	// Settings are the app settings the update changes; the handlers of
	// every instance started from then on get them over the old ones.
	Settings map[string]string
	// Batch is how many instances of a group are replaced at once.
	// Default 1: Microsoft documents batches but not their size (an
	// assumption).
	Batch int
	// Overlap is how long a batch's new instances run beside the old ones
	// before those are drained; the drain itself, waiting for the
	// invocations in flight, adds to it. Default 0. Microsoft documents no
	// figure: any value is an assumption.
	Overlap time.Duration
}

// RollingUpdate deploys u (with Options.Flex): the settings change for
// every instance started from now on, then, group by group and batch by
// batch, a new instance starts for each old one, and once the new ones'
// handlers answer and Overlap has passed the old ones are stopped the
// platform's way (listeners stopped, in-flight work finished, the handler
// killed). The old instances no longer count as the group's while they
// drain, so a scale decision meanwhile counts only the new ones (whether
// the platform counts them is not documented: an assumption). It returns
// when every old instance has ended or ctx ends.
func (h *Host) RollingUpdate(ctx context.Context, u RollingUpdate) error {
	if h.opts.Flex == nil {
		return errNotFlex
	}
	batch := max(u.Batch, 1)
	h.depMu.Lock()
	next := maps.Clone(h.settings)
	maps.Copy(next, h.deployed)
	maps.Copy(next, u.Settings)
	h.deployed = next
	h.depMu.Unlock()

	h.mu.Lock()
	groups := append([]*group(nil), h.groups...)
	h.mu.Unlock()
	for _, g := range groups {
		g.mu.Lock()
		old := append([]*Instance(nil), g.live...)
		g.mu.Unlock()
		for len(old) > 0 {
			n := min(batch, len(old))
			if err := h.replace(ctx, g, old[:n], u.Overlap); err != nil {
				return err
			}
			old = old[n:]
		}
	}
	return nil
}

// replace starts one new instance of g for each of old, waits for their
// handlers and overlap, then stops old and waits for them to end.
func (h *Host) replace(ctx context.Context, g *group, old []*Instance, overlap time.Duration) error {
	var readies []chan error
	g.mu.Lock()
	if h.stopping() {
		g.mu.Unlock()
		return errors.New("hostemu: the host is stopping")
	}
	// Once out of the group the old instances are stopped whatever
	// happens: when ctx ends early, at once; stopAll stops those still
	// retiring.
	defer func() {
		for _, in := range old {
			in.stopRun()
		}
	}()
	for _, in := range old {
		i := indexOf(g.live, in)
		if i < 0 {
			continue // ended meanwhile
		}
		g.retiring = append(g.retiring, in)
		ready := make(chan error, 1)
		readies = append(readies, ready)
		g.live[i] = h.startInstance(g, h.opts.Flex.StartDelay, ready)
		h.log.Info("hostemu: rolling update replaces an instance", "instance", in.index, "by", g.live[i].index, "group", g.fn.Name)
	}
	g.mu.Unlock()
	for _, r := range readies {
		select {
		case err := <-r:
			if err != nil {
				return fmt.Errorf("hostemu: rolling update: a new instance did not start: %w", err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if !sleepCtx(ctx, overlap) {
		return ctx.Err()
	}
	for _, in := range old {
		in.stopRun()
	}
	h.stats.replaced.Add(int64(len(readies)))
	defer func() {
		g.mu.Lock()
		for _, in := range old {
			if i := indexOf(g.retiring, in); i >= 0 {
				g.retiring = append(g.retiring[:i], g.retiring[i+1:]...)
			}
		}
		g.mu.Unlock()
	}()
	for _, in := range old {
		select {
		case <-in.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func indexOf(list []*Instance, in *Instance) int {
	for i, l := range list {
		if l == in {
			return i
		}
	}
	return -1
}

// deployment returns the settings new instances' handlers get.
func (h *Host) deployment() map[string]string {
	h.depMu.Lock()
	defer h.depMu.Unlock()
	if h.deployed != nil {
		return h.deployed
	}
	return h.settings
}
