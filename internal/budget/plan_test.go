package budget

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The expected values below are written from the rules of docs/design.md
// ("The Cluster Service budget") as data, one row each, independently of
// plan's code.

// planNow is the instant every row plans at; ago(d) is d before it.
var planNow = Instant{Wall: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC), Mono: time.Hour}

func ago(d time.Duration) Instant {
	return Instant{Wall: planNow.Wall.Add(-d), Mono: planNow.Mono - d}
}

// holding is the state of a member "me" that joined epoch e0 and holds
// permits under a lease renewed a second ago, its last write at seq 5.
func holding(permits int) state {
	return state{owner: "me", spare: "me2", joined: true, epoch: "e0", epochSeen: ago(time.Hour),
		seq: 5, committed: permits, capLocal: permits, leased: true, leaseSend: ago(time.Second),
		lastDemand: 100, lastGroup: GroupPoll, observed: map[string]observation{}}
}

// busy is a poll process with demand n and nothing in use.
func busy(n int) local { return local{group: GroupPoll, demand: n, idleSince: ago(time.Hour)} }

// ledgerOf is epoch e0 of budget 10 with holders.
func ledgerOf(holders map[string]Entry) Ledger {
	return Ledger{ID: ID, Epoch: "e0", Budget: 10, Holders: holders}
}

// seen marks the entries of holders as seen at their seq since at.
func seen(s state, at Instant, holders map[string]Entry) state {
	s.observed = map[string]observation{}
	for o, e := range holders {
		s.observed[o] = observation{seq: e.Seq, at: at}
	}
	return s
}

func TestPlan(t *testing.T) {
	cfg := Config{Budget: 10, Ceiling: 10}.withDefaults()
	me := func(permits, demand int) Entry {
		return Entry{Group: GroupPoll, Permits: permits, Demand: demand, Seq: 5, Budget: 10}
	}
	other := func(permits, demand int) Entry {
		return Entry{Group: GroupPoll, Permits: permits, Demand: demand, Seq: 3, Budget: 10}
	}
	type want struct {
		write   bool
		permits int      // the own entry written, when write
		holders []string // the entries written, when write
		owner   string
		cap     int
		waiting bool
		target  int
		seq     int64 // the seq written, when not 0
		// what plan found for the log
		newEpoch, reclaimed string
		invalid             []string
	}
	for _, tc := range []struct {
		name string
		s    state
		l    Ledger
		in   local
		want want
	}{
		{"a newcomer to an empty ledger takes its demand in one write",
			state{owner: "me", spare: "me2"}, ledgerOf(nil), busy(100),
			want{write: true, permits: 10, holders: []string{"me"}, owner: "me", target: 10}},
		{"a newcomer grows only into free permits",
			state{owner: "me", spare: "me2"}, ledgerOf(map[string]Entry{"o": other(7, 7)}), busy(100),
			want{write: true, permits: 3, holders: []string{"me", "o"}, owner: "me", target: 5}},
		{"a newcomer with no free permits joins with none",
			state{owner: "me", spare: "me2"}, ledgerOf(map[string]Entry{"o": other(10, 100)}), busy(100),
			want{write: true, permits: 0, holders: []string{"me", "o"}, owner: "me", target: 5}},
		{"nothing changed and the lease is fresh: no write",
			holding(10), ledgerOf(map[string]Entry{"me": me(10, 100)}), busy(100),
			want{owner: "me", cap: 10, target: 10}},
		{"the lease older than RenewEvery: renewed",
			func() state { s := holding(10); s.leaseSend = ago(DefaultRenewEvery); return s }(),
			ledgerOf(map[string]Entry{"me": me(10, 100)}), busy(100),
			want{write: true, permits: 10, holders: []string{"me"}, owner: "me", cap: 10, target: 10}},
		{"over its target while another is short: gives back what its requests allow",
			holding(10), ledgerOf(map[string]Entry{"me": me(10, 100), "o": other(0, 100)}),
			func() local { in := busy(100); in.inUse = 5; return in }(),
			want{write: true, permits: 5, holders: []string{"me", "o"}, owner: "me", cap: 5, target: 5}},
		{"over its target with more in use: lowers its cap, writes nothing yet",
			holding(10), ledgerOf(map[string]Entry{"me": me(10, 100), "o": other(0, 100)}),
			func() local { in := busy(100); in.inUse = 8; return in }(),
			want{owner: "me", cap: 5, target: 5}},
		{"over its demand with the free permits covering the other's: keeps them",
			holding(6), ledgerOf(map[string]Entry{"me": me(6, 100), "o": other(0, 4)}), busy(3),
			want{owner: "me", cap: 6, target: 3}},
		{"over its demand with the free permits short of the other's: gives back",
			holding(7), ledgerOf(map[string]Entry{"me": me(7, 100), "o": other(0, 4)}), busy(3),
			want{write: true, permits: 3, holders: []string{"me", "o"}, owner: "me", cap: 3, target: 3}},
		{"idle for IdleAfter: writes 0",
			holding(10), ledgerOf(map[string]Entry{"me": me(10, 100)}),
			local{group: GroupPoll, idleSince: ago(defaultIdleAfter)},
			want{write: true, permits: 0, holders: []string{"me"}, owner: "me", cap: 0}},
		{"idle for less than IdleAfter: keeps its permits",
			holding(10), ledgerOf(map[string]Entry{"me": me(10, 100)}),
			local{group: GroupPoll, idleSince: ago(defaultIdleAfter - time.Millisecond)},
			want{write: true, permits: 10, holders: []string{"me"}, owner: "me", cap: 10}},
		{"a write whose reply was lost raised the seq: never written twice",
			holding(3), ledgerOf(map[string]Entry{"me": func() Entry { e := me(3, 100); e.Seq = 7; return e }()}), busy(100),
			want{write: true, permits: 10, holders: []string{"me"}, owner: "me", cap: 3, target: 10, seq: 8}},
		{"a write whose reply was lost gave back: uses no more than the ledger says",
			holding(10), ledgerOf(map[string]Entry{"me": func() Entry { e := me(4, 100); e.Seq = 6; return e }()}), busy(100),
			want{write: true, permits: 10, holders: []string{"me"}, owner: "me", cap: 4, target: 10, seq: 7}},
		{"an entry seen unchanged for E is reclaimed",
			seen(holding(0), ago(DefaultExpireAfter), map[string]Entry{"o": other(10, 100)}),
			ledgerOf(map[string]Entry{"me": me(0, 100), "o": other(10, 100)}), busy(100),
			want{write: true, permits: 10, holders: []string{"me"}, owner: "me", cap: 0, target: 10}},
		{"an entry seen unchanged for less than E stays",
			seen(holding(0), ago(DefaultExpireAfter-time.Millisecond), map[string]Entry{"o": other(10, 100)}),
			ledgerOf(map[string]Entry{"me": me(0, 100), "o": other(10, 100)}), busy(100),
			want{owner: "me", target: 5}},
		{"an entry whose seq moved is seen anew",
			seen(holding(0), ago(time.Hour), map[string]Entry{"o": other(10, 100)}),
			ledgerOf(map[string]Entry{"me": me(0, 100), "o": func() Entry { e := other(10, 100); e.Seq++; return e }()}), busy(100),
			want{owner: "me", target: 5}},
		{"an entry others saw unchanged for E is reclaimed by a newcomer",
			state{owner: "me", spare: "me2"},
			ledgerOf(map[string]Entry{"o": func() Entry { e := other(10, 100); e.UnchangedMs = DefaultExpireAfter.Milliseconds(); return e }()}),
			busy(100),
			want{write: true, permits: 10, holders: []string{"me"}, owner: "me", target: 10}},
		{"an invalid entry is dropped as expired",
			holding(0), ledgerOf(map[string]Entry{"me": me(0, 100), "o": func() Entry { e := other(10, 100); e.Seq = -1; return e }()}),
			busy(100),
			want{write: true, permits: 10, holders: []string{"me"}, owner: "me", cap: 0, target: 10, invalid: []string{"o"}}},
		{"its own entry gone: rejoins under the spare owner id",
			holding(10), ledgerOf(map[string]Entry{"o": other(0, 100)}), busy(100),
			want{write: true, permits: 5, holders: []string{"me2", "o"}, owner: "me2", target: 5, reclaimed: "me"}},
		{"a new epoch: rejoins with nothing and waits E",
			holding(10), Ledger{ID: ID, Epoch: "e1", Budget: 10, Holders: map[string]Entry{}}, busy(100),
			want{write: true, permits: 0, holders: []string{"me2"}, owner: "me2", waiting: true, target: 10, newEpoch: "e1"}},
		{"waiting out an epoch: takes nothing",
			func() state {
				s := holding(0)
				s.waiting, s.waitFrom = true, ago(DefaultExpireAfter-time.Millisecond)
				return s
			}(),
			ledgerOf(map[string]Entry{"me": me(0, 100)}), busy(100),
			want{owner: "me", waiting: true, target: 10}},
		{"the wait over: grows",
			func() state { s := holding(0); s.waiting, s.waitFrom = true, ago(DefaultExpireAfter); return s }(),
			ledgerOf(map[string]Entry{"me": me(0, 100)}), busy(100),
			want{write: true, permits: 10, holders: []string{"me"}, owner: "me", target: 10}},
		{"a fence it created waits too, then its permits are used",
			func() state {
				s := holding(10)
				s.waiting, s.waitFrom, s.capLocal = true, ago(DefaultExpireAfter), 0
				return s
			}(),
			ledgerOf(map[string]Entry{"me": me(10, 100)}), busy(100),
			want{owner: "me", cap: 10, target: 10}},
		{"the targets use the smallest budget of the entries",
			state{owner: "me", spare: "me2"},
			Ledger{ID: ID, Epoch: "e0", Budget: 10, Holders: map[string]Entry{"o": {Group: GroupPoll, Demand: 100, Seq: 3, Budget: 4}}},
			busy(100),
			want{write: true, permits: 2, holders: []string{"me", "o"}, owner: "me", target: 2}},
		{"a young epoch's smaller budget bounds growth",
			func() state { s := holding(0); s.epochSeen = ago(time.Second); return s }(),
			Ledger{ID: ID, Epoch: "e0", Budget: 6, Holders: map[string]Entry{"me": me(0, 100)}}, busy(100),
			want{write: true, permits: 6, holders: []string{"me"}, owner: "me", cap: 0, target: 10}},
		{"pickup's floor is kept free",
			state{owner: "me", spare: "me2"},
			ledgerOf(map[string]Entry{"p": {Group: GroupPickup, Floor: 2, Seq: 3, Budget: 10}}), busy(100),
			want{write: true, permits: 8, holders: []string{"me", "p"}, owner: "me", target: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.l
			l.Holders = maps.Clone(tc.l.Holders)
			s := tc.s
			s.observed = maps.Clone(tc.s.observed)
			d := plan(tc.s, tc.l, tc.in, planNow, cfg)
			require.Equal(t, l, tc.l, "plan changed the ledger it read")
			require.Equal(t, s.observed, tc.s.observed, "plan changed the state it read")

			require.Equal(t, tc.want.write, d.write, "write")
			if tc.want.write {
				require.Equal(t, tc.want.permits, d.ledger.Holders[tc.want.owner].Permits, "permits written")
				require.ElementsMatch(t, tc.want.holders, slices.Collect(maps.Keys(d.ledger.Holders)), "entries written")
				require.Equal(t, d.state.seq, d.ledger.Holders[tc.want.owner].Seq, "the seq written is spent")
				if tc.want.seq != 0 {
					require.Equal(t, tc.want.seq, d.state.seq, "seq written")
				}
				if d.state.owner == tc.s.owner {
					require.Greater(t, d.state.seq, tc.s.seq, "a seq written twice")
				}
				require.LessOrEqual(t, d.ledger.Sum(), 10, "permits written over the budget")
			}
			require.Equal(t, tc.want.owner, d.state.owner, "owner")
			require.Equal(t, tc.want.cap, d.state.capLocal, "cap")
			require.Equal(t, tc.want.waiting, d.state.waiting, "waiting")
			require.Equal(t, tc.want.target, d.state.target, "target")
			require.Equal(t, tc.want.newEpoch, d.newEpoch, "new epoch")
			require.Equal(t, tc.want.reclaimed, d.reclaimed, "reclaimed")
			require.ElementsMatch(t, tc.want.invalid, slices.Collect(maps.Keys(d.invalid)), "invalid")
		})
	}
}
