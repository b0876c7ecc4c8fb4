package clustersim

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"
)

// Cluster, node pool and external auth states the simulator produces on its
// own. SetState accepts any other state string too.
const (
	StatePending      = "pending"
	StateValidating   = "validating"
	StateInstalling   = "installing"
	StateReady        = "ready"
	StateError        = "error"
	StateUpdating     = "updating"
	StateUninstalling = "uninstalling"
)

// Break-glass credential statuses, as Cluster Service sends them.
const (
	CredentialCreated            = "created"
	CredentialIssued             = "issued"
	CredentialFailed             = "failed"
	CredentialAwaitingRevocation = "awaiting_revocation"
	CredentialRevoked            = "revoked"
	CredentialExpired            = "expired"
)

// DefaultCredentialLifetime is a credential's lifetime when its script's
// ExpiresIn is zero: a credential that never expires is not one Cluster
// Service issues.
const DefaultCredentialLifetime = 24 * time.Hour

// Inflight check states, as Cluster Service sends them.
const (
	InflightPassed  = "passed"
	InflightFailed  = "failed"
	InflightPending = "pending"
	InflightRunning = "running"
)

// InflightCheck is one inflight check of a simulated cluster, as a Script
// holds it and GET {cluster}/inflight_checks lists it.
type InflightCheck struct {
	// ID is the check's id in the list; empty means its position, from 1.
	ID string `json:"id,omitempty"`
	// Name names the check, such as "egress".
	Name string `json:"name"`
	// State is InflightPassed, InflightFailed, InflightPending or
	// InflightRunning.
	State string `json:"state"`
	// Details is sent as the check's details; Cluster Service puts a failed
	// check's message in its "error" string.
	Details map[string]any `json:"details,omitempty"`
}

// API values for Script.API: which Cluster Service API serves a cluster.
const (
	APIBoth         = "both"
	APIClustersMgmt = "clusters_mgmt/v1"
	APIAROHCP       = "aro_hcp/v1alpha1"
)

// Duration is a time.Duration written in JSON as a Go duration string
// ("1.5s", "250ms").
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string such as "2s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"2s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// Script is the lifecycle of one simulated cluster, node pool, external
// auth or break-glass credential. Each kind reads the fields that apply to
// it and ignores the others, except NoStatus and NoStatusFor, which only
// external auths accept.
//
// A create goes pending -> validating -> installing -> ready over Pending,
// Validating and Installing; with Fail it ends in error instead, carrying
// ErrorCode and ErrorMessage (clusters) or ErrorMessage as the status
// message (node pools, external auths). A zero duration skips its stage.
// Uninstalling and Updating are the durations a later delete or update uses
// unless that request names its own.
//
// A cluster that failed its inflight checks, as Cluster Service reports it,
// has Fail, ErrorCode "OCM4001" and the checks in InflightChecks.
//
// A credential is created for Issuing, then issued (failed with Fail); it
// expires ExpiresIn after it was created. A revocation makes it
// awaiting_revocation for Revoking, then revoked (failed with RevokeFail).
type Script struct {
	Pending      Duration `json:"pending"`
	Validating   Duration `json:"validating"`
	Installing   Duration `json:"installing"`
	Fail         bool     `json:"fail"`
	ErrorCode    string   `json:"errorCode"`
	ErrorMessage string   `json:"errorMessage"`
	Description  string   `json:"description"`
	Uninstalling Duration `json:"uninstalling"`
	Updating     Duration `json:"updating"`
	// API chooses where a cluster is served: APIClustersMgmt, APIAROHCP,
	// or both (APIBoth or empty). Node pools ignore it: they are served
	// under each API their cluster is.
	API string `json:"api"`
	// InflightChecks are the checks GET {cluster}/inflight_checks lists, in
	// every state of the cluster. Node pools ignore them.
	InflightChecks []InflightCheck `json:"inflightChecks,omitempty"`
	// ManagedResourceGroup is the cluster's azure.managed_resource_group_name;
	// empty means "{id}-managed". Other kinds ignore it.
	ManagedResourceGroup string `json:"managedResourceGroup,omitempty"`

	// NoStatus serves an external auth without a status for its whole life,
	// as Cluster Service did before external auths had states.
	NoStatus bool `json:"noStatus,omitempty"`
	// NoStatusFor is how long an external auth's create has no status at
	// all before its Pending stage begins.
	NoStatusFor Duration `json:"noStatusFor,omitempty"`

	// Issuing is how long a credential stays created before it is issued.
	Issuing Duration `json:"issuing,omitempty"`
	// Revoking is how long a revoked credential stays awaiting_revocation,
	// unless the revocation names its own.
	Revoking Duration `json:"revoking,omitempty"`
	// RevokeFail ends a credential's revocation in failed.
	RevokeFail bool `json:"revokeFail,omitempty"`
	// ExpiresIn is a credential's lifetime from its creation; zero means
	// DefaultCredentialLifetime.
	ExpiresIn Duration `json:"expiresIn,omitempty"`
	// Username is a credential's username; empty means "break-glass-{id}".
	Username string `json:"username,omitempty"`
}

func (sc Script) validate() error {
	for name, d := range map[string]Duration{
		"pending": sc.Pending, "validating": sc.Validating, "installing": sc.Installing,
		"uninstalling": sc.Uninstalling, "updating": sc.Updating, "noStatusFor": sc.NoStatusFor,
		"issuing": sc.Issuing, "revoking": sc.Revoking, "expiresIn": sc.ExpiresIn,
	} {
		if d < 0 {
			return fmt.Errorf("%w: %s is negative", ErrInvalid, name)
		}
	}
	switch sc.API {
	case "", APIBoth, APIClustersMgmt, APIAROHCP:
	default:
		return fmt.Errorf("%w: api %q (want %q, %q or %q)", ErrInvalid, sc.API, APIClustersMgmt, APIAROHCP, APIBoth)
	}
	for i, c := range sc.InflightChecks {
		if c.Name == "" {
			return fmt.Errorf("%w: inflight check %d has no name", ErrInvalid, i+1)
		}
		if c.ID != "" {
			if err := validID(c.ID); err != nil {
				return fmt.Errorf("inflight check %q: %w", c.Name, err)
			}
		}
		switch c.State {
		case InflightPassed, InflightFailed, InflightPending, InflightRunning:
		default:
			return fmt.Errorf("%w: inflight check %q: state %q (want %q, %q, %q or %q)", ErrInvalid, c.Name, c.State,
				InflightPassed, InflightFailed, InflightPending, InflightRunning)
		}
	}
	return nil
}

// clone returns a copy of sc that shares no slice or map with it, so that
// neither a caller's later changes nor a JSON decode over the copy reach sc.
func (sc Script) clone() Script {
	if sc.InflightChecks == nil {
		return sc
	}
	checks := make([]InflightCheck, len(sc.InflightChecks))
	for i, c := range sc.InflightChecks {
		c.Details = maps.Clone(c.Details)
		checks[i] = c
	}
	sc.InflightChecks = checks
	return sc
}

// serves reports whether a cluster with this script is served under api.
func (sc Script) serves(api string) bool {
	return sc.API == "" || sc.API == APIBoth || sc.API == api
}

// Phase names the step of a resource's lifecycle.
const (
	PhaseCreate = "create"
	PhaseUpdate = "update"
	PhaseDelete = "delete"
	PhaseRevoke = "revoke" // a credential's revocation
	PhaseSet    = "set"    // state fixed by SetState or ReadyAll
)

// lifecycle is the state machine of one resource. Its state is a pure
// function of (script, phase, start, now).
type lifecycle struct {
	script Script
	phase  string
	start  time.Time
	fixed  string // the state while phase is PhaseSet
}

// begin starts phase at now.
func (l *lifecycle) begin(phase string, now time.Time) {
	l.phase, l.start, l.fixed = phase, now, ""
}

// set fixes the state from now until the next phase begins.
func (l *lifecycle) set(state string, now time.Time) {
	l.phase, l.start, l.fixed = PhaseSet, now, state
}

// at returns the state at now, when that state began, and whether the
// resource is gone (a finished delete). The state is empty while an
// external auth's create has no status yet.
func (l *lifecycle) at(now time.Time) (state string, since time.Time, gone bool) {
	t := now.Sub(l.start)
	sc := l.script
	switch l.phase {
	case PhaseCreate:
		if t < sc.NoStatusFor.D() {
			return "", l.start, false
		}
		p := sc.NoStatusFor.D() + sc.Pending.D()
		v := p + sc.Validating.D()
		i := v + sc.Installing.D()
		switch {
		case t < p:
			return StatePending, l.start.Add(sc.NoStatusFor.D()), false
		case t < v:
			return StateValidating, l.start.Add(p), false
		case t < i:
			return StateInstalling, l.start.Add(v), false
		case sc.Fail:
			return StateError, l.start.Add(i), false
		default:
			return StateReady, l.start.Add(i), false
		}
	case PhaseUpdate:
		if t < sc.Updating.D() {
			return StateUpdating, l.start, false
		}
		return StateReady, l.start.Add(sc.Updating.D()), false
	case PhaseDelete:
		if t < sc.Uninstalling.D() {
			return StateUninstalling, l.start, false
		}
		return "", l.start.Add(sc.Uninstalling.D()), true
	default:
		return l.fixed, l.start, false
	}
}
