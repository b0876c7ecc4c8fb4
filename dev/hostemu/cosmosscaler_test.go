package hostemu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCosmosTarget(t *testing.T) {
	// CosmosDBTargetScaler: ceil(remaining work / maxItemsPerInvocation),
	// 100 when the trigger sets none, at most one instance per lease.
	tests := []struct {
		name                 string
		remaining            int64
		partitions, maxItems int
		want                 int
	}{
		{name: "nothing lags", remaining: 0, partitions: 1, maxItems: 100, want: 0},
		{name: "the vote before leases exist", remaining: 1, partitions: 1, maxItems: 100, want: 1},
		{name: "one batch", remaining: 100, partitions: 8, maxItems: 100, want: 1},
		{name: "rounded up", remaining: 101, partitions: 8, maxItems: 100, want: 2},
		{name: "default maxItemsPerInvocation", remaining: 250, partitions: 8, want: 3},
		{name: "at most one per lease", remaining: 5000, partitions: 2, maxItems: 100, want: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, cosmosTarget(tt.remaining, tt.partitions, tt.maxItems))
		})
	}
}

func TestScaleBoundAppWide(t *testing.T) {
	// With AppWideLimit a scale-out stops at what the other groups leave
	// of maximumInstanceCount; no group loses instances to another's
	// growth, and always-ready instances are kept.
	tests := []struct {
		name                    string
		cur, target, room, want int
		ready                   int
	}{
		{name: "per group: four more", cur: 0, target: 10, room: -1, want: 4},
		{name: "app-wide: what is left", cur: 0, target: 10, room: 3, want: 3},
		{name: "app-wide: nothing left", cur: 2, target: 10, room: 0, want: 2},
		{name: "app-wide: keeps what it has", cur: 5, target: 10, room: 1, want: 5},
		{name: "app-wide: scale-in unchanged", cur: 5, target: 1, room: 0, want: 1},
		{name: "app-wide: always ready", cur: 0, target: 0, room: 0, ready: 1, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &Host{}
			h.opts.Flex = &FlexOptions{MaximumInstanceCount: 40, ScaleInDelay: -1, AlwaysReady: map[string]int{"pickup": tt.ready}}
			s := &scaler{h: h, g: &group{fn: &Function{Name: "pickup"}}}
			d := ScaleDecision{Target: tt.target}
			s.bound(&d, tt.cur, tt.room)
			require.Equal(t, tt.want, d.After)
		})
	}
}

func TestFlexPickupScalesByTheFeed(t *testing.T) {
	// On Flex pickup's group follows the change feed's lag from zero: a
	// vote of 1 before leases exist, then remaining work /
	// maxItemsPerInvocation, at most one instance per lease, and zero when
	// nothing lags. Every instance a decision adds starts its handler after
	// StartDelay. An instance scaled in while a batch runs drains: the
	// batch finishes and is checkpointed, so it never comes again.
	env := newCosmosEnv(t, true)
	gate := filepath.Join(t.TempDir(), "gate")
	env.settings["POLL_GATE"] = gate
	env.write(t, "a1")
	const startDelay = 700 * time.Millisecond
	app := newApp(t, cosmosHostJSON, map[string]string{"pickup": pickupJSON(`, "maxItemsPerInvocation": 2, "startFromBeginning": true`)})
	r := runHost(t, app, env.settings, Options{CosmosTrigger: fastCosmos,
		Flex: &FlexOptions{ScaleInterval: time.Hour, ScaleInDelay: -1, StartDelay: startDelay}})
	t.Cleanup(func() { _ = os.WriteFile(gate, nil, 0o644) })
	var s *scaler
	eventually(t, func() bool { s = r.h.scalerOf("pickup"); return s != nil }, "pickup's scale controller")
	require.Empty(t, r.h.groupInstances("pickup"), "no always-ready instance: pickup starts from zero")
	ctx := t.Context()
	type vote struct {
		remaining                  int64
		partitions, target, before int
		after                      int
	}
	of := func(d ScaleDecision) vote {
		return vote{d.RemainingWork, d.Partitions, d.Target, d.Before, d.After}
	}

	decided := time.Now()
	require.Equal(t, vote{1, 1, 1, 0, 1}, of(s.decide(ctx, time.Now())), "no lease yet: a vote of one")
	in := r.h.groupInstances("pickup")[0]
	eventually(t, func() bool { return in.PID() != 0 }, "the new instance's handler")
	require.GreaterOrEqual(t, time.Since(decided), startDelay, "the handler starts after the instance's start delay")
	eventually(t, func() bool { return r.h.Counters().Checkpoints >= 1 }, "a1 delivered and checkpointed")

	require.Equal(t, vote{0, 1, 0, 1, 0}, of(s.decide(ctx, time.Now())), "nothing lags: to zero")
	eventually(t, func() bool { return r.h.Counters().InstancesStopped == 1 }, "the instance stopped")

	env.write(t, "b1", "b2", "b3")
	// The lag is read only as far as the target can use: a batch per lease.
	require.Equal(t, vote{2, 1, 1, 0, 1}, of(s.decide(ctx, time.Now())), "two batches of lag, one lease: one instance")
	eventually(t, func() bool { return r.h.Counters().DocumentsDelivered >= 4 }, "b1–b3")
	settle(t, r, 3)

	// Scale in while a batch runs: the instance drains.
	env.write(t, "gate")
	eventually(t, func() bool { return strings.Contains(r.out.String(), "fakehandler: pickup gate") }, "the gated batch")
	idle := s.vote
	s.vote = func(_ context.Context, d *ScaleDecision) {}
	require.Equal(t, 0, s.decide(ctx, time.Now()).After)
	s.vote = idle
	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	eventually(t, func() bool { return r.h.Counters().InstancesStopped == 2 }, "the drained instance stopped")
	calls := r.rec.of("pickup")
	require.NoError(t, calls[len(calls)-1].Err, "the batch in flight finished")
	leases := env.leases(t)
	var gateLSN any
	for _, c := range pickups(t, r) {
		for _, d := range c.docs {
			if d["id"] == "gate" {
				gateLSN = d["_lsn"]
			}
		}
	}
	require.Equal(t, fmt.Sprintf(`"%v"`, gateLSN), leases[0]["ContinuationToken"], "the drained batch is checkpointed")
	require.Nil(t, leases[0]["Owner"], "and its lease released")

	env.write(t, "after")
	require.Equal(t, 1, s.decide(ctx, time.Now()).After)
	eventually(t, func() bool { return r.h.Counters().DocumentsDelivered >= 6 }, "the next write")
	settle(t, r, 3)
	require.Equal(t, []string{"a1", "b1", "b2", "b3", "gate", "after"}, allIDs(pickups(t, r)), "each document once")
	require.NoError(t, r.stop())
}
