package clustersim

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Faults configures what goes wrong on Cluster Service calls. The fields
// that speak of status calls apply to every Cluster Service call (cluster
// objects, inflight checks, external auths, credentials and their list
// too); the others say what they apply to. The zero value injects nothing.
// Admin calls are never affected.
type Faults struct {
	// Latency delays every status call; LatencyJitter spreads it uniformly
	// over [Latency-LatencyJitter, Latency+LatencyJitter] (never below 0).
	Latency       Duration `json:"latency"`
	LatencyJitter Duration `json:"latencyJitter"`
	// ErrorRate is the fraction of status calls answered 503.
	ErrorRate float64 `json:"errorRate"`
	// TimeoutRate is the fraction of status calls that hang for Timeout
	// (30s when zero) or until the client goes away, then answer 504.
	TimeoutRate float64  `json:"timeoutRate"`
	Timeout     Duration `json:"timeout"`
	// SpikeRate is the fraction of status calls delayed by Spike on top of
	// the latency.
	SpikeRate float64  `json:"spikeRate"`
	Spike     Duration `json:"spike"`
	// Outage answers every status call 503 at once.
	Outage bool `json:"outage"`
	// WorkAfterClientLeaves keeps a call's latency, spike and timeout
	// running after its client went away, as a server that does not stop
	// work on a disconnect: the call stays in flight at the server.
	WorkAfterClientLeaves bool `json:"workAfterClientLeaves,omitempty"`
	// InflightChecksStatus, when not zero, is the HTTP status (400 to 599)
	// every inflight checks call is answered, with an OCM error, after the
	// faults above; status calls are not affected.
	InflightChecksStatus int `json:"inflightChecksStatus,omitempty"`
	// EndlessCredentialList makes every page of a cluster's credential list
	// full (filled with revoked, unexpired credentials after the real ones)
	// and its total always promise one more page.
	EndlessCredentialList bool `json:"endlessCredentialList,omitempty"`
	// ExternalAuthNoStatus serves every external auth without a status.
	ExternalAuthNoStatus bool `json:"externalAuthNoStatus,omitempty"`
	// UnknownState, when not empty, replaces the state of every external
	// auth and the status of every credential served (list items too):
	// meant for a value Cluster Service never sends.
	UnknownState string `json:"unknownState,omitempty"`
	// CredentialNoExpiration serves every credential (list items too)
	// without its expiration_timestamp.
	CredentialNoExpiration bool `json:"credentialNoExpiration,omitempty"`
	// EmptyCredentialPageNoItems serves a page of a credential list that
	// holds no credential without its items, as a server that leaves out
	// an empty list does.
	EmptyCredentialPageNoItems bool `json:"emptyCredentialPageNoItems,omitempty"`
}

// Fault kinds counted in Stats.Faults.
const (
	FaultLatency = "latency"
	FaultSpike   = "spike"
	FaultError   = "error"
	FaultTimeout = "timeout"
	FaultOutage  = "outage"
	// FaultInflightChecks counts inflight checks calls answered with
	// Faults.InflightChecksStatus.
	FaultInflightChecks = "inflightChecks"
	// The faults that change bodies count once per answer they apply to.
	FaultEndlessCredentialList      = "endlessCredentialList"
	FaultExternalAuthNoStatus       = "externalAuthNoStatus"
	FaultUnknownState               = "unknownState"
	FaultCredentialNoExpiration     = "credentialNoExpiration"
	FaultEmptyCredentialPageNoItems = "emptyCredentialPageNoItems"
)

const defaultFaultTimeout = 30 * time.Second

// Validate reports a rate outside [0, 1], a negative duration or an
// InflightChecksStatus that is not an error status.
func (f Faults) Validate() error {
	for name, r := range map[string]float64{"errorRate": f.ErrorRate, "timeoutRate": f.TimeoutRate, "spikeRate": f.SpikeRate} {
		if !(r >= 0 && r <= 1) {
			return fmt.Errorf("%w: %s %v is not in [0, 1]", ErrInvalid, name, r)
		}
	}
	for name, d := range map[string]Duration{"latency": f.Latency, "latencyJitter": f.LatencyJitter, "timeout": f.Timeout, "spike": f.Spike} {
		if d < 0 {
			return fmt.Errorf("%w: %s is negative", ErrInvalid, name)
		}
	}
	if f.InflightChecksStatus != 0 && (f.InflightChecksStatus < 400 || f.InflightChecksStatus > 599) {
		return fmt.Errorf("%w: inflightChecksStatus %d is not 0 or an HTTP status from 400 to 599", ErrInvalid, f.InflightChecksStatus)
	}
	return nil
}

// SetFaults replaces the fault configuration.
func (s *Sim) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	s.faultMu.Lock()
	s.faults = f
	s.faultMu.Unlock()
	s.log.Info("faults set", "faults", fmt.Sprintf("%+v", f))
	return nil
}

// Faults returns the fault configuration.
func (s *Sim) Faults() Faults {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	return s.faults
}

// faultPlan is what happens to one status call, drawn all at once so that
// every call consumes the same amount of randomness.
type faultPlan struct {
	outage  bool
	timeout time.Duration // > 0: hang this long, then 504
	delay   time.Duration
	latency bool
	spike   bool
	fail    bool
	workOn  bool // WorkAfterClientLeaves
}

func (s *Sim) planFaults() faultPlan {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	f := s.faults
	rTimeout, rSpike, rJitter, rError := s.rng.Float64(), s.rng.Float64(), s.rng.Float64(), s.rng.Float64()
	p := faultPlan{outage: f.Outage, workOn: f.WorkAfterClientLeaves}
	if rTimeout < f.TimeoutRate {
		p.timeout = f.Timeout.D()
		if p.timeout == 0 {
			p.timeout = defaultFaultTimeout
		}
	}
	p.delay = f.Latency.D() + time.Duration((2*rJitter-1)*float64(f.LatencyJitter))
	if p.delay < 0 {
		p.delay = 0
	}
	p.latency = p.delay > 0
	if rSpike < f.SpikeRate && f.Spike > 0 {
		p.spike = true
		p.delay += f.Spike.D()
	}
	p.fail = rError < f.ErrorRate
	return p
}

// injectFaults applies the fault plan of one status call. It returns 0 when
// the call should be answered normally, an HTTP status for an injected
// failure, or statusClientClosed when the client went away.
func (s *Sim) injectFaults(ctx context.Context) (status int, reason string) {
	p := s.planFaults()
	if p.outage {
		s.stats.fault(FaultOutage)
		return http.StatusServiceUnavailable, "Service unavailable (simulated outage)"
	}
	if p.workOn {
		ctx = context.WithoutCancel(ctx)
	}
	if p.timeout > 0 {
		s.stats.fault(FaultTimeout)
		if !s.wait(ctx, p.timeout) {
			return s.aborted(ctx)
		}
		return http.StatusGatewayTimeout, "Gateway timeout (simulated)"
	}
	if p.latency {
		s.stats.fault(FaultLatency)
	}
	if p.spike {
		s.stats.fault(FaultSpike)
	}
	if p.delay > 0 && !s.wait(ctx, p.delay) {
		return s.aborted(ctx)
	}
	if p.fail {
		s.stats.fault(FaultError)
		return http.StatusServiceUnavailable, "Service unavailable (simulated error)"
	}
	return 0, ""
}

func (s *Sim) aborted(ctx context.Context) (int, string) {
	if ctx.Err() != nil {
		return statusClientClosed, ""
	}
	return http.StatusServiceUnavailable, "Service unavailable (simulator closing)"
}

// wait sleeps for d in real time; false means the client went away or the
// Sim was closed first.
func (s *Sim) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.closed:
		return false
	}
}
