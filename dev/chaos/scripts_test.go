package chaos

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
)

// TestScenarioScripts checks the scenario against the simulator alone, with
// no handler: every kind is drawn, and once every lifecycle has run its
// course Cluster Service says what, by the contract's tables, ends each
// operation in the status and with the error code it must end in. A
// follow-up delete runs after its create has succeeded.
func TestScenarioScripts(t *testing.T) {
	subs := subscriptions(10, "scripts")
	minLife, maxLife := 3*time.Second, 45*time.Second
	ops := scenario(rand.New(rand.NewPCG(1, 1)), subs, 500, minLife, maxLife, "s")
	require.Len(t, ops, 500)

	kinds := countKinds(ops)
	for _, w := range kindWeights {
		require.Positive(t, kinds[w.kind], "kind %s drawn", w.kind)
	}
	require.Positive(t, kinds[kindDeleteCreated], "cluster creates followed by their delete")

	clock := clustersim.NewManualClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	sim := clustersim.New(clustersim.Options{Clock: clock})
	t.Cleanup(sim.Close)
	byID := map[string]op{}
	for _, o := range ops {
		byID[o.ID] = o
		if o.After == "" {
			require.NoError(t, o.simulate(sim), o.ID)
		}
	}
	clock.Advance(maxLife + time.Second)
	for _, o := range ops {
		if o.After != "" {
			continue
		}
		status, code := endOf(t, sim, clock.Now(), o)
		require.Equal(t, o.Want, status, "%s (%s)", o.ID, o.Kind)
		require.Equal(t, o.WantCode, code, "%s (%s)", o.ID, o.Kind)
	}
	for _, o := range ops {
		if o.After != "" {
			create := byID[o.After]
			require.Equal(t, kindCreate, create.Kind, o.ID)
			require.Equal(t, create.Cluster, o.Cluster, o.ID)
			require.NoError(t, o.simulate(sim), o.ID)
		}
	}
	clock.Advance(maxLife + time.Second)
	for _, o := range ops {
		if o.After != "" {
			status, _ := endOf(t, sim, clock.Now(), o)
			require.Equal(t, "Succeeded", status, "%s (%s)", o.ID, o.Kind)
		}
	}
}

// endOf maps what the simulator says of o's object now to the terminal
// status and error code the contract's tables give; "" for a status that
// does not end the operation.
func endOf(t *testing.T, sim *clustersim.Sim, now time.Time, o op) (status, code string) {
	t.Helper()
	var (
		r   clustersim.Resource
		err error
	)
	switch {
	case o.Request == "RevokeCredentials":
		var awaiting, failed, live bool
		for _, c := range sim.Resources() {
			if c.Kind != clustersim.KindBreakGlassCredential || c.ClusterID != o.Cluster || !c.ExpirationTimestamp.After(now) {
				continue
			}
			switch c.State {
			case clustersim.CredentialAwaitingRevocation:
				awaiting = true
			case clustersim.CredentialFailed:
				failed = true
			case clustersim.CredentialCreated, clustersim.CredentialIssued:
				live = true
			}
		}
		switch {
		case awaiting || !failed && live:
			return "", ""
		case failed:
			return "Failed", "InternalServerError"
		}
		return "Succeeded", ""
	case o.Credential != "":
		r, err = sim.Credential(o.Cluster, o.Credential)
		require.NoError(t, err, o.ID)
		switch r.State {
		case clustersim.CredentialIssued:
			return "Succeeded", ""
		case clustersim.CredentialFailed:
			return "Failed", "InternalServerError"
		case clustersim.CredentialAwaitingRevocation, clustersim.CredentialRevoked, clustersim.CredentialExpired:
			return "Canceled", "Canceled"
		}
		return "", ""
	case o.Auth != "":
		r, err = sim.ExternalAuth(o.Cluster, o.Auth)
	case o.Pool != "":
		r, err = sim.NodePool(o.Cluster, o.Pool)
	default:
		r, err = sim.Cluster(o.Cluster)
	}
	if errors.Is(err, clustersim.ErrNotFound) && o.Request == "Delete" {
		return "Succeeded", ""
	}
	require.NoError(t, err, o.ID)
	switch {
	case r.State == clustersim.StateReady && o.Request != "Delete",
		r.State == "" && o.Auth != "" && o.Request != "Delete":
		return "Succeeded", ""
	case r.State == clustersim.StateError && r.Kind == clustersim.KindCluster:
		return "Failed", r.Script.ErrorCode
	case r.State == clustersim.StateError:
		return "Failed", "InternalServerError"
	}
	return "", ""
}
