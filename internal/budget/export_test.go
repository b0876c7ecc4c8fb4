package budget

// What the tests of package budget_test read of a gate that production
// has no use for.

// Defaults the tests wait on.
const (
	DefaultIdleAfter   = defaultIdleAfter
	DefaultStartMargin = defaultStartMargin
	DefaultWriteTries  = defaultWriteTries
)

// TryAcquire takes a permit if one is usable now, as a check would.
func (g *Gate) TryAcquire() (release func(), ok bool) { return g.tryAcquire() }

// Held is the permits the process may use now.
func (g *Gate) Held() int { return g.held() }

// InFlight is the permits in use now, abandoned ones within the grace too.
func (g *Gate) InFlight() int { return g.inFlightNow() }
