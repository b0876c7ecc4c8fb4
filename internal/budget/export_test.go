package budget

import "sync"

// What the tests of package budget_test read of a gate that production
// has no use for.

// Defaults the tests wait on.
const (
	DefaultIdleAfter   = defaultIdleAfter
	DefaultStartMargin = defaultStartMargin
	DefaultWriteTries  = defaultWriteTries
)

// TryAcquire takes a permit if one is usable now, as a check would.
func (g *Gate) TryAcquire() (release func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.take() {
		return nil, false
	}
	return sync.OnceFunc(g.release), true
}

// Held is the permits the process may use now: 0 once its lease has run
// out.
func (g *Gate) Held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.usable(g.cfg.Clock.Now())
}

// InFlight is the permits taken and not released, and those of requests
// abandoned less than Grace ago.
func (g *Gate) InFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inUse(g.cfg.Clock.Now())
}
