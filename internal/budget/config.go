package budget

import (
	crand "crypto/rand"
	"encoding/hex"
	"log/slog"
	"time"
)

// Defaults of Config (docs/design.md, "The Cluster Service budget"): read
// every 2 s, renew every 4 s, a lease valid 15 s from the send of its
// write, an entry reclaimed after 30 s without a change on the observer's
// clock (twice the validity, so clocks may run at rates up to 2× apart),
// a request started only with 2 s of lease left and ended 0.5 s before
// it, each ledger call given at most 2 s (its read interval), and a
// request the client gave up on counted for 15 s more: E − V, so that the
// permits of a process whose entry is reclaimed come back no sooner. The
// four exported ones are the protocol's timing that the harnesses in dev/
// wait on.
const (
	DefaultReadEvery      = 2 * time.Second
	DefaultRenewEvery     = 4 * time.Second
	DefaultValidity       = 15 * time.Second
	DefaultExpireAfter    = 30 * time.Second
	defaultIdleAfter      = 2 * time.Second
	defaultStartMargin    = 2 * time.Second
	defaultDeadlineMargin = 500 * time.Millisecond
	defaultFloor          = 8
	defaultWriteTries     = 3
	defaultCallTimeout    = 2 * time.Second
	defaultGrace          = 15 * time.Second
)

// Config configures a Gate. Zero durations and counts take the defaults.
type Config struct {
	// Store keeps the ledger; nil means no ledger (CLUSTER_SERVICE_BUDGET
	// unset): the process has only its Ceiling, with no lease.
	Store Store
	// Budget is B, the bound on Cluster Service requests in flight across
	// every process.
	Budget int
	// Ceiling bounds the process's own requests in flight, whatever
	// permits it holds (CLUSTER_SERVICE_MAX_IN_FLIGHT).
	Ceiling int
	// Floor is the permits kept for a pickup process while it runs.
	Floor int

	ReadEvery      time.Duration // T
	RenewEvery     time.Duration // R
	Validity       time.Duration // V
	ExpireAfter    time.Duration // E, at least 2V and V + Grace
	IdleAfter      time.Duration // demand 0 this long: permits 0
	StartMargin    time.Duration // lease left needed to start a request
	DeadlineMargin time.Duration // a request ends this long before the lease
	WriteTries     int           // reads and writes a tick tries on 412
	CallTimeout    time.Duration // each ledger read or write
	// Grace keeps the permit of a request the client gave up on (timed
	// out or canceled) counted this long after, while Cluster Service may
	// still work on it (CLUSTER_SERVICE_ABANDONED_GRACE).
	Grace time.Duration

	Clock  Clock
	Logger *slog.Logger
	// NewID makes owner ids and epochs; default 16 random bytes in hex.
	NewID func() string
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ReadEvery, DefaultReadEvery)
	def(&c.RenewEvery, DefaultRenewEvery)
	def(&c.Validity, DefaultValidity)
	def(&c.ExpireAfter, DefaultExpireAfter)
	def(&c.IdleAfter, defaultIdleAfter)
	def(&c.StartMargin, defaultStartMargin)
	def(&c.DeadlineMargin, defaultDeadlineMargin)
	def(&c.CallTimeout, defaultCallTimeout)
	def(&c.Grace, defaultGrace)
	c.ExpireAfter = max(c.ExpireAfter, 2*c.Validity, c.Validity+c.Grace)
	if c.Floor <= 0 {
		c.Floor = defaultFloor
	}
	if c.WriteTries <= 0 {
		c.WriteTries = defaultWriteTries
	}
	if c.Ceiling <= 0 {
		c.Ceiling = 1
	}
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.NewID == nil {
		c.NewID = randomID
	}
	return c
}

func randomID() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // never fails
	return hex.EncodeToString(b[:])
}
