package clustersim

import (
	"encoding/json"
	"fmt"
	"time"
)

// Cluster and node pool states the simulator produces on its own. SetState
// accepts any other state string too.
const (
	StatePending      = "pending"
	StateValidating   = "validating"
	StateInstalling   = "installing"
	StateReady        = "ready"
	StateError        = "error"
	StateUpdating     = "updating"
	StateUninstalling = "uninstalling"
)

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

// Script is the lifecycle of one simulated cluster or node pool.
//
// A create goes pending -> validating -> installing -> ready over Pending,
// Validating and Installing; with Fail it ends in error instead, carrying
// ErrorCode and ErrorMessage (clusters) or ErrorMessage as the status
// message (node pools). A zero duration skips its stage. Uninstalling and
// Updating are the durations a later delete or update uses unless that
// request names its own.
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
	// under aro_hcp/v1alpha1 whenever their cluster is.
	API string `json:"api"`
}

func (sc Script) validate() error {
	for name, d := range map[string]Duration{
		"pending": sc.Pending, "validating": sc.Validating, "installing": sc.Installing,
		"uninstalling": sc.Uninstalling, "updating": sc.Updating,
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
	return nil
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
	PhaseSet    = "set" // state fixed by SetState or ReadyAll
)

// lifecycle is the state machine of one resource. Its state is a pure
// function of (script, phase, start, now).
type lifecycle struct {
	script Script
	phase  string
	start  time.Time
	fixed  string // the state while phase is PhaseSet
}

// at returns the state at now, when that state began, and whether the
// resource is gone (a finished delete).
func (l *lifecycle) at(now time.Time) (state string, since time.Time, gone bool) {
	t := now.Sub(l.start)
	sc := l.script
	switch l.phase {
	case PhaseCreate:
		p := sc.Pending.D()
		v := p + sc.Validating.D()
		i := v + sc.Installing.D()
		switch {
		case t < p:
			return StatePending, l.start, false
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
