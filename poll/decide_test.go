package poll

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/arm"
	"github.com/opstatus/opstatus/internal/clusterservice"
	"github.com/opstatus/opstatus/internal/opkind"
)

// The expected values below are written from the tables of docs/design.md
// ("State mapping") as data, one row each,
// independently of decide's switch statements.

const (
	accepted     = arm.ProvisioningStateAccepted
	provisioning = arm.ProvisioningStateProvisioning
	updating     = arm.ProvisioningStateUpdating
	deleting     = arm.ProvisioningStateDeleting
	succeeded    = arm.ProvisioningStateSucceeded
	failed       = arm.ProvisioningStateFailed
	canceled     = arm.ProvisioningStateCanceled

	create  = arm.RequestCreate
	update  = arm.RequestUpdate
	del     = arm.RequestDelete
	reqCred = arm.RequestRequestCredential
	revoke  = arm.RequestRevokeCredentials
)

var unfinished = []arm.ProvisioningState{accepted, provisioning, updating, deleting}

func ise(msg string) *arm.CloudErrorBody {
	return &arm.CloudErrorBody{Code: arm.CodeInternalServerError, Message: msg}
}

// tableRow is one row of a kind's state table: what the state leads to.
type tableRow struct {
	goesTo    arm.ProvisioningState // the status the row names
	err       *arm.CloudErrorBody   // with Failed
	readyRule bool                  // Succeeded, but unchanged during a Delete
	waiting   bool                  // unchanged; expected only while Accepted or in its request's status
	keep      bool                  // unchanged, nothing logged
}

// outcome is an expected decision, the problem given as a keyword.
type outcome struct {
	state   arm.ProvisioningState
	err     *arm.CloudErrorBody
	problem string
}

// expect turns a row into the decision for request and current.
func expect(row tableRow, known bool, request arm.Request, current arm.ProvisioningState) outcome {
	switch {
	case !known:
		return outcome{state: current, problem: "unhandled"}
	case row.keep:
		return outcome{state: current}
	case row.waiting:
		ok := current == accepted || current == provisioning && request == create ||
			current == updating && request == update || current == deleting && request == del
		if !ok {
			return outcome{state: current, problem: "inconsistent"}
		}
		return outcome{state: current}
	case row.readyRule && request == del:
		return outcome{state: current}
	case row.readyRule:
		return outcome{state: succeeded}
	}
	return outcome{state: row.goesTo, err: row.err}
}

func requireOutcome(t *testing.T, want outcome, op facts, got decision) {
	t.Helper()
	require.Equal(t, want.state, got.State, "State")
	if want.problem == "" {
		require.Empty(t, got.Problem, "Problem")
	} else {
		require.Contains(t, got.Problem, want.problem, "Problem")
	}
	change := want.problem == "" && want.state != op.current
	require.Equal(t, change, got.Change, "Change")
	if change {
		require.Equal(t, want.err, got.Error, "Error")
	} else {
		require.Nil(t, got.Error, "Error without a change")
	}
	require.Zero(t, got.Overdue)
}

var clusterTable = map[string]tableRow{
	"error":        {goesTo: failed, err: &arm.CloudErrorBody{Code: "OCM3001", Message: "m"}},
	"installing":   {goesTo: provisioning},
	"updating":     {goesTo: updating},
	"ready":        {readyRule: true},
	"uninstalling": {goesTo: deleting},
	"pending":      {waiting: true},
	"validating":   {waiting: true},
}

var nodePoolTable = map[string]tableRow{
	"error":             {goesTo: failed, err: ise("m")},
	"recoverable_error": {goesTo: failed, err: ise("m")},
	"installing":        {goesTo: provisioning},
	"updating":          {goesTo: updating},
	"ready":             {readyRule: true},
	"uninstalling":      {goesTo: deleting},
	"pending":           {waiting: true},
	"validating":        {waiting: true},
	"pending_update":    {waiting: true},
	"validating_update": {waiting: true},
}

var externalAuthTable = map[string]tableRow{
	"ready":        {readyRule: true},
	"error":        {goesTo: failed, err: ise("m")},
	"uninstalling": {goesTo: deleting},
}

// superseded is the error of a credential request a revocation overtook,
// as ARO-HCP's frontend cancels one.
var superseded = &arm.CloudErrorBody{Code: "Canceled", Message: "This operation was superseded by another"}

var credentialTable = map[string]tableRow{
	"created":             {goesTo: provisioning},
	"issued":              {goesTo: succeeded},
	"failed":              {goesTo: failed, err: ise("Failed to provision cluster credential")},
	"awaiting_revocation": {goesTo: canceled, err: superseded},
	"revoked":             {goesTo: canceled, err: superseded},
	"expired":             {goesTo: canceled, err: superseded},
}

// Every state of each table, and states in no table, for every request of
// the kind and every unfinished status.
func TestDecideTables(t *testing.T) {
	others := []string{"hibernating", "READY", "Error", "", "unknown"}
	for _, tc := range []struct {
		kind     opkind.Kind
		table    map[string]tableRow
		requests []arm.Request
		said     func(state string) said
	}{
		{opkind.Cluster, clusterTable, []arm.Request{create, update, del}, func(s string) said {
			return said{status: clusterservice.Status{State: s, ErrorCode: "OCM3001", ErrorMessage: "m", Description: "d"}}
		}},
		{opkind.NodePool, nodePoolTable, []arm.Request{create, update, del}, func(s string) said {
			return said{status: clusterservice.Status{State: s, ErrorMessage: "m"}}
		}},
		{opkind.ExternalAuth, externalAuthTable, []arm.Request{create, update, del}, func(s string) said {
			return said{auth: clusterservice.ExternalAuth{HasState: true, State: s, Message: "m"}}
		}},
		{opkind.CredentialRequest, credentialTable, []arm.Request{reqCred}, func(s string) said {
			return said{credential: clusterservice.Credential{Status: s, Expiration: time.Now().Add(time.Hour)}}
		}},
	} {
		states := append([]string{}, others...)
		for s := range tc.table {
			states = append(states, s)
		}
		for _, state := range states {
			row, known := tc.table[state]
			for _, request := range tc.requests {
				for _, current := range unfinished {
					op := facts{request: request, current: current, now: time.Now()}
					t.Run(fmt.Sprintf("%s/%q/%s/%s", tc.kind, state, request, current), func(t *testing.T) {
						requireOutcome(t, expect(row, known, request, current), op, decide(tc.kind, op, tc.said(state)))
					})
				}
			}
		}
	}
}

func TestDecideNotable(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	later, earlier := now.Add(time.Hour), now.Add(-time.Minute)
	cred := func(status string, exp time.Time) clusterservice.Credential {
		return clusterservice.Credential{Status: status, Expiration: exp}
	}
	egress := clusterservice.InflightCheck{Name: "egress", State: "failed", Error: "egress blocked"}
	dns := clusterservice.InflightCheck{Name: "dns", State: "failed", Error: "no DNS"}
	ocm4001 := clusterservice.Status{State: "error", ErrorCode: "OCM4001", ErrorMessage: "inflight checks failed"}
	for _, tc := range []struct {
		name    string
		kind    opkind.Kind
		op      facts
		said    said
		want    decision
		problem string
	}{
		// Clusters.
		{name: "cluster error without code or message uses the description", kind: opkind.Cluster,
			op:   facts{request: create, current: accepted},
			said: said{status: clusterservice.Status{State: "error", Description: "d"}},
			want: decision{State: failed, Error: ise("d"), Change: true}},
		{name: "cluster error with nothing", kind: opkind.Cluster,
			op:   facts{request: update, current: updating},
			said: said{status: clusterservice.Status{State: "error"}},
			want: decision{State: failed, Error: ise("Internal server error."), Change: true}},
		{name: "cluster error with a code alone", kind: opkind.Cluster,
			op:   facts{request: create, current: provisioning},
			said: said{status: clusterservice.Status{State: "error", ErrorCode: "OCM3001"}},
			want: decision{State: failed, Error: &arm.CloudErrorBody{Code: "OCM3001", Message: "Internal server error."}, Change: true}},
		{name: "OCM4001: a check failed without details, the provision error without a message", kind: opkind.Cluster,
			op:   facts{request: create, current: provisioning},
			said: said{status: clusterservice.Status{State: "error", ErrorCode: "OCM4001"}, checks: []clusterservice.InflightCheck{{Name: "egress", State: "failed"}}},
			want: decision{State: failed, Error: ise(`Inflight check "egress" failed.`), Change: true}},
		{name: "OCM4001: none failed and no provision message", kind: opkind.Cluster,
			op:   facts{request: create, current: provisioning},
			said: said{status: clusterservice.Status{State: "error", ErrorCode: "OCM4001"}, checks: []clusterservice.InflightCheck{}},
			want: decision{State: failed, Error: ise("Internal server error."), Change: true}},
		{name: "OCM4001: one failed check", kind: opkind.Cluster,
			op:   facts{request: create, current: provisioning},
			said: said{status: ocm4001, checks: []clusterservice.InflightCheck{{Name: "ok", State: "passed"}, egress}},
			want: decision{State: failed, Error: ise("egress blocked"), Change: true}},
		{name: "OCM4001: several failed checks", kind: opkind.Cluster,
			op:   facts{request: create, current: provisioning},
			said: said{status: ocm4001, checks: []clusterservice.InflightCheck{dns, egress}},
			want: decision{State: failed, Change: true, Error: &arm.CloudErrorBody{Code: "MultipleErrorsOccurred",
				Message: "Cluster provisioning failed due to multiple errors",
				Details: []arm.CloudErrorBody{*ise("no DNS"), *ise("egress blocked")}}}},
		{name: "OCM4001: none failed keeps the provision message", kind: opkind.Cluster,
			op:   facts{request: create, current: provisioning},
			said: said{status: ocm4001, checks: []clusterservice.InflightCheck{{Name: "ok", State: "passed"}}},
			want: decision{State: failed, Error: ise("inflight checks failed"), Change: true}},
		{name: "OCM4001: checks unreadable for good end it with the provision error", kind: opkind.Cluster,
			op:   facts{request: update, current: updating},
			said: said{status: ocm4001, checksErr: errors.New("403")},
			want: decision{State: failed, Error: &arm.CloudErrorBody{Code: "OCM4001", Message: "inflight checks failed"}, Change: true}},
		{name: "cluster Create that succeeds opens its billing", kind: opkind.Cluster,
			op:   facts{request: create, current: provisioning},
			said: said{status: clusterservice.Status{State: "ready"}},
			want: decision{State: succeeded, Change: true, Billing: billingOpen}},
		{name: "cluster Update that succeeds bills nothing", kind: opkind.Cluster,
			op:   facts{request: update, current: updating},
			said: said{status: clusterservice.Status{State: "ready"}},
			want: decision{State: succeeded, Change: true}},
		{name: "cluster gone finishes a Delete and closes its billing", kind: opkind.Cluster,
			op:   facts{request: del, current: deleting},
			said: said{gone: true},
			want: decision{State: succeeded, Change: true, DeleteResources: true, Billing: billingClose}},
		{name: "cluster gone during a Create writes nothing", kind: opkind.Cluster,
			op:   facts{request: create, current: provisioning},
			said: said{gone: true},
			want: decision{State: provisioning}, problem: "does not know"},
		// Node pools.
		{name: "node pool error without a message", kind: opkind.NodePool,
			op:   facts{request: create, current: provisioning},
			said: said{status: clusterservice.Status{State: "error"}},
			want: decision{State: failed, Error: ise("Internal server error."), Change: true}},
		{name: "node pool gone finishes a Delete, no billing", kind: opkind.NodePool,
			op:   facts{request: del, current: accepted},
			said: said{gone: true},
			want: decision{State: succeeded, Change: true, DeleteResources: true}},
		// External auths.
		{name: "external auth without a state ends a Create", kind: opkind.ExternalAuth,
			op:   facts{request: create, current: accepted},
			said: said{auth: clusterservice.ExternalAuth{}},
			want: decision{State: succeeded, Change: true}},
		{name: "external auth without a state ends an Update", kind: opkind.ExternalAuth,
			op:   facts{request: update, current: updating},
			said: said{auth: clusterservice.ExternalAuth{}},
			want: decision{State: succeeded, Change: true}},
		{name: "external auth without a state during a Delete waits", kind: opkind.ExternalAuth,
			op:   facts{request: del, current: deleting},
			said: said{auth: clusterservice.ExternalAuth{}},
			want: decision{State: deleting}},
		{name: "external auth gone finishes a Delete", kind: opkind.ExternalAuth,
			op:   facts{request: del, current: deleting},
			said: said{gone: true},
			want: decision{State: succeeded, Change: true, DeleteResources: true}},
		{name: "external auth gone during an Update writes nothing", kind: opkind.ExternalAuth,
			op:   facts{request: update, current: accepted},
			said: said{gone: true},
			want: decision{State: accepted}, problem: "does not know"},
		{name: "external auth error without a message", kind: opkind.ExternalAuth,
			op:   facts{request: update, current: updating},
			said: said{auth: clusterservice.ExternalAuth{HasState: true, State: "error"}},
			want: decision{State: failed, Error: ise("Internal server error."), Change: true}},
		// Credential requests.
		{name: "credential gone writes nothing", kind: opkind.CredentialRequest,
			op:   facts{request: reqCred, current: accepted},
			said: said{gone: true},
			want: decision{State: accepted}, problem: "does not know"},
		// Revocations: first match wins over the unexpired credentials.
		{name: "revocation: none at all", kind: opkind.CredentialRevocation,
			op: facts{request: revoke, current: accepted, now: now}, said: said{credentials: []clusterservice.Credential{}},
			want: decision{State: succeeded, Change: true}},
		{name: "revocation: all revoked or expired", kind: opkind.CredentialRevocation,
			op:   facts{request: revoke, current: deleting, now: now},
			said: said{credentials: []clusterservice.Credential{cred("revoked", later), cred("expired", later), cred("issued", earlier)}},
			want: decision{State: succeeded, Change: true}},
		{name: "revocation: an expired one counts as revoked whatever its status", kind: opkind.CredentialRevocation,
			op:   facts{request: revoke, current: deleting, now: now},
			said: said{credentials: []clusterservice.Credential{cred("failed", earlier), cred("awaiting_revocation", now)}},
			want: decision{State: succeeded, Change: true}},
		{name: "revocation: awaiting_revocation wins over failed", kind: opkind.CredentialRevocation,
			op:   facts{request: revoke, current: accepted, now: now},
			said: said{credentials: []clusterservice.Credential{cred("failed", later), cred("awaiting_revocation", later)}},
			want: decision{State: deleting, Change: true}},
		{name: "revocation: failed wins over issued", kind: opkind.CredentialRevocation,
			op:   facts{request: revoke, current: deleting, now: now},
			said: said{credentials: []clusterservice.Credential{cred("issued", later), cred("failed", later)}},
			want: decision{State: failed, Change: true, Error: ise("Failed to revoke cluster credential")}},
		{name: "revocation: an unexpired issued credential is not done", kind: opkind.CredentialRevocation,
			op:   facts{request: revoke, current: accepted, now: now},
			said: said{credentials: []clusterservice.Credential{cred("revoked", later), cred("issued", later)}},
			want: decision{State: deleting, Change: true}},
		{name: "revocation: created is not done either", kind: opkind.CredentialRevocation,
			op:   facts{request: revoke, current: deleting, now: now},
			said: said{credentials: []clusterservice.Credential{cred("created", later)}},
			want: decision{State: deleting}},
		{name: "revocation: no expiry counts as unexpired", kind: opkind.CredentialRevocation,
			op:   facts{request: revoke, current: accepted, now: now},
			said: said{credentials: []clusterservice.Credential{cred("issued", time.Time{})}},
			want: decision{State: deleting, Change: true}},
		{name: "revocation: an unknown status is not Succeeded", kind: opkind.CredentialRevocation,
			op:   facts{request: revoke, current: deleting, now: now},
			said: said{credentials: []clusterservice.Credential{cred("revoked", later), cred("melting", later)}},
			want: decision{State: deleting}, problem: "unhandled credential status"},
		{name: "revocation: the cluster gone", kind: opkind.CredentialRevocation,
			op: facts{request: revoke, current: deleting, now: now}, said: said{gone: true},
			want: decision{State: succeeded, Change: true}},
		// What every kind shares.
		{name: "a finished operation never changes", kind: opkind.Cluster,
			op:   facts{request: create, current: succeeded},
			said: said{status: clusterservice.Status{State: "installing"}},
			want: decision{State: succeeded}},
		{name: "an unknown current status is a problem", kind: opkind.Cluster,
			op:   facts{request: create, current: "Running"},
			said: said{status: clusterservice.Status{State: "ready"}},
			want: decision{State: "Running"}, problem: "unknown current status"},
		{name: "an unknown kind is a problem", kind: "volume",
			op:   facts{request: create, current: accepted},
			want: decision{State: accepted}, problem: "unknown kind"},
		{name: "past its deadline, a state that does not end it fails it", kind: opkind.Cluster,
			op:   facts{request: create, current: provisioning, overdue: time.Hour},
			said: said{status: clusterservice.Status{State: "installing", Description: "still installing"}},
			want: decision{State: failed, Change: true, Overdue: time.Hour,
				Error: ise("The operation did not complete within its deadline of 1h0m0s. Cluster Service: still installing")}},
		{name: "past its deadline, an unhandled state fails it", kind: opkind.ExternalAuth,
			op:   facts{request: update, current: updating, overdue: time.Minute},
			said: said{auth: clusterservice.ExternalAuth{HasState: true, State: "weird", Message: "hm"}},
			want: decision{State: failed, Change: true, Overdue: time.Minute,
				Error: ise("The operation did not complete within its deadline of 1m0s. Cluster Service: hm")}},
		{name: "past its deadline, Cluster Service's end wins", kind: opkind.CredentialRequest,
			op:   facts{request: reqCred, current: provisioning, overdue: time.Minute},
			said: said{credential: clusterservice.Credential{Status: "issued"}},
			want: decision{State: succeeded, Change: true}},
		{name: "Cluster Service failed for good: nothing is known", kind: opkind.CredentialRevocation,
			op:   facts{request: revoke, current: deleting, now: now},
			said: said{failure: errors.New("HTTP 403")},
			want: decision{State: deleting}, problem: "Cluster Service failed: HTTP 403"},
		{name: "past its deadline, Cluster Service failed for good: Failed", kind: opkind.CredentialRevocation,
			op:   facts{request: revoke, current: deleting, overdue: time.Hour, now: now},
			said: said{failure: errors.New("HTTP 403")},
			want: decision{State: failed, Change: true, Overdue: time.Hour,
				Error: ise("The operation did not complete within its deadline of 1h0m0s.")}},
		{name: "past its deadline, a failure wins over what else was said", kind: opkind.Cluster,
			op:   facts{request: create, current: provisioning, overdue: time.Hour},
			said: said{status: clusterservice.Status{State: "ready"}, failure: errors.New("HTTP 403")},
			want: decision{State: failed, Change: true, Overdue: time.Hour,
				Error: ise("The operation did not complete within its deadline of 1h0m0s.")}},
		{name: "past its deadline, a 404 for a Create fails it", kind: opkind.NodePool,
			op:   facts{request: create, current: accepted, overdue: time.Hour},
			said: said{gone: true},
			want: decision{State: failed, Change: true, Overdue: time.Hour,
				Error: ise("The operation did not complete within its deadline of 1h0m0s.")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := decide(tc.kind, tc.op, tc.said)
			problem := got.Problem
			got.Problem = ""
			require.Equal(t, tc.want, got)
			if tc.problem == "" {
				require.Empty(t, problem)
			} else {
				require.Contains(t, problem, tc.problem)
			}
		})
	}
}

func TestInflightProblem(t *testing.T) {
	st := clusterservice.Status{State: "error", ErrorCode: "OCM4001"}
	require.Empty(t, inflightProblem(st, []clusterservice.InflightCheck{{Name: "a", State: "failed", Error: "x"}}))
	require.Contains(t, inflightProblem(st, []clusterservice.InflightCheck{{Name: "a", State: "passed"}}), "none of the cluster's 1 inflight checks failed")
	require.Contains(t, inflightProblem(st, []clusterservice.InflightCheck{{Name: "a", State: "failed"}}), `"a" has no details.error`)
}

// TestEveryEndCarriesAnError: whatever a table makes of an answer, with
// Cluster Service's messages or without, before the deadline or past it,
// a Failed or Canceled written carries an error with a code and a message
// (details too), and any other status written carries none.
func TestEveryEndCarriesAnError(t *testing.T) {
	now := time.Now()
	later := now.Add(time.Hour)
	others := []string{"hibernating", "", "unknown"}
	states := func(table map[string]tableRow, extra ...string) []string {
		out := append(append([]string{}, others...), extra...)
		for s := range table {
			out = append(out, s)
		}
		return out
	}
	creds := func(status string) []clusterservice.Credential {
		return []clusterservice.Credential{{Status: status, Expiration: later}}
	}
	var credStates []string
	for s := range credentialTable {
		credStates = append(credStates, s)
	}
	type answer struct {
		name string
		said said
	}
	byKind := map[opkind.Kind][]answer{}
	for _, withWords := range []bool{false, true} {
		m := ""
		if withWords {
			m = "m"
		}
		add := func(kind opkind.Kind, name string, s said) {
			byKind[kind] = append(byKind[kind], answer{fmt.Sprintf("%s/words=%v", name, withWords), s})
		}
		for _, st := range states(clusterTable) {
			add(opkind.Cluster, st, said{status: clusterservice.Status{State: st, ErrorMessage: m, Description: m}})
			if withWords {
				add(opkind.Cluster, st+"/code", said{status: clusterservice.Status{State: st, ErrorCode: "OCM3001"}})
			}
		}
		checks := []clusterservice.InflightCheck{{Name: "a", State: "failed", Error: m}, {Name: "b", State: "failed"}}
		for n := range len(checks) + 1 {
			add(opkind.Cluster, fmt.Sprintf("OCM4001/%d failed", n),
				said{status: clusterservice.Status{State: "error", ErrorCode: "OCM4001", ErrorMessage: m}, checks: checks[:n]})
		}
		add(opkind.Cluster, "OCM4001/unreadable",
			said{status: clusterservice.Status{State: "error", ErrorCode: "OCM4001", ErrorMessage: m}, checksErr: errors.New("403")})
		for _, st := range states(nodePoolTable) {
			add(opkind.NodePool, st, said{status: clusterservice.Status{State: st, ErrorMessage: m}})
		}
		for _, st := range states(externalAuthTable) {
			add(opkind.ExternalAuth, st, said{auth: clusterservice.ExternalAuth{HasState: true, State: st, Message: m}})
		}
		add(opkind.ExternalAuth, "no state", said{auth: clusterservice.ExternalAuth{}})
		for _, st := range states(credentialTable) {
			add(opkind.CredentialRequest, st, said{credential: clusterservice.Credential{Status: st, Expiration: later}})
		}
		for _, st := range append(credStates, others...) {
			add(opkind.CredentialRevocation, st, said{credentials: creds(st)})
		}
		add(opkind.CredentialRevocation, "none", said{credentials: []clusterservice.Credential{}})
	}
	requests := map[opkind.Kind][]arm.Request{
		opkind.Cluster: {create, update, del}, opkind.NodePool: {create, update, del}, opkind.ExternalAuth: {create, update, del},
		opkind.CredentialRequest: {reqCred}, opkind.CredentialRevocation: {revoke},
	}
	ends := 0
	for kind, answers := range byKind {
		answers = append(answers, answer{"gone", said{gone: true}}, answer{"failure", said{failure: errors.New("403")}})
		for _, a := range answers {
			for _, request := range requests[kind] {
				for _, current := range unfinished {
					for _, overdue := range []time.Duration{0, time.Hour} {
						op := facts{request: request, current: current, overdue: overdue, now: now}
						d := decide(kind, op, a.said)
						name := fmt.Sprintf("%s/%s/%s/%s/overdue=%v", kind, a.name, request, current, overdue)
						if !d.Change {
							require.Nil(t, d.Error, name)
							continue
						}
						if d.State != failed && d.State != canceled {
							require.Nil(t, d.Error, name)
							continue
						}
						ends++
						require.NotNil(t, d.Error, name)
						requireCodeAndMessage(t, *d.Error, name)
						if d.State == canceled {
							require.Equal(t, "Canceled", d.Error.Code, name)
						}
					}
				}
			}
		}
	}
	require.Greater(t, ends, 100, "the answers end operations")
}

func requireCodeAndMessage(t *testing.T, e arm.CloudErrorBody, name string) {
	t.Helper()
	require.NotEmpty(t, e.Code, name)
	require.NotEmpty(t, e.Message, name)
	for _, d := range e.Details {
		requireCodeAndMessage(t, d, name)
	}
}

func TestEndError(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state arm.ProvisioningState
		in    *arm.CloudErrorBody
		want  *arm.CloudErrorBody
	}{
		{"Failed without an error", failed, nil, ise("Internal server error.")},
		{"Failed keeps what it has", failed, &arm.CloudErrorBody{Code: "OCM3001", Message: "m", Target: "t"},
			&arm.CloudErrorBody{Code: "OCM3001", Message: "m", Target: "t"}},
		{"Failed with a code alone", failed, &arm.CloudErrorBody{Code: "OCM3001"},
			&arm.CloudErrorBody{Code: "OCM3001", Message: "Internal server error."}},
		{"Failed with empty details", failed, &arm.CloudErrorBody{Code: "X", Message: "m", Details: []arm.CloudErrorBody{{}, {Message: "d"}}},
			&arm.CloudErrorBody{Code: "X", Message: "m", Details: []arm.CloudErrorBody{*ise("Internal server error."), *ise("d")}}},
		{"Canceled without an error", canceled, nil, superseded},
		{"Canceled with a message alone", canceled, &arm.CloudErrorBody{Message: "m"}, &arm.CloudErrorBody{Code: "Canceled", Message: "m"}},
		{"Succeeded has none", succeeded, ise("m"), nil},
		{"Deleting has none", deleting, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before *arm.CloudErrorBody
			if tc.in != nil {
				c := *tc.in
				before = &c
			}
			require.Equal(t, tc.want, endError(tc.state, tc.in))
			require.Equal(t, before, tc.in, "the error given is not changed")
		})
	}
}
