package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
)

func TestInFlightMean(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	at := func(s int, mean float64) clustersim.InFlightStats {
		return clustersim.InFlightStats{Since: t0, At: t0.Add(time.Duration(s) * time.Second), Mean: mean}
	}
	// 0 in flight for 10 s, then 4 for 10 s: area 0 at 10 s, 40 at 20 s.
	samples := []clustersim.InFlightStats{at(5, 0), at(10, 0), at(20, 2), at(25, 40.0/25)}
	m, ok := inFlightMean(samples, t0.Add(10*time.Second), t0.Add(20*time.Second))
	require.True(t, ok)
	require.InDelta(t, 4, m, 1e-9)
	_, ok = inFlightMean(samples, t0.Add(30*time.Second), t0.Add(40*time.Second))
	require.False(t, ok, "no sample in the window")
}

func TestP99(t *testing.T) {
	require.Zero(t, p99(nil))
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Second)
	}
	require.Equal(t, 99*time.Second, p99(d))
	require.Equal(t, 3*time.Second, p99(d[:3]))
}

func TestNewcomersFromTheirProcessStart(t *testing.T) {
	// A newcomer's time runs from the latest handler start before its
	// entry first appeared; an entry of before the window is no newcomer.
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	sec := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	w := &ledgerWatch{
		first:   map[string]time.Time{"old": sec(1), "new": sec(12)},
		seen:    map[string]time.Time{"old": sec(2), "new": sec(12.5)},
		reached: map[string]time.Time{"old": sec(3), "new": sec(14)},
		starts:  []time.Time{sec(0.5), sec(10), sec(20)},
	}
	require.Equal(t, []time.Duration{4 * time.Second}, w.newcomers(sec(5)), "started at 10 s, its share at 14 s")
}

// cs_in_flight_max covers every scenario, those that keep no maximum of
// their own included, and the budget lines come from the ledger's run.
func TestBudgetHeadlines(t *testing.T) {
	r := &results{Budget: 256, CSInFlightMaxAll: 300}
	m, ok := r.csInFlightMax()
	require.True(t, ok)
	require.EqualValues(t, 300, m)

	r = &results{Budget: 256, Ledger: &budgetResult{Ledger: true, Newcomers: []time.Duration{time.Second, 3 * time.Second},
		Reclaim: 31 * time.Second, ReclaimAtLeast: true, Busy: ledgerRate{RUPerS: 12.5, Replaces: 40, Replace412: 4}, Idle: ledgerRate{RUPerS: 1.25}}}
	r.ledgerHeadlines()
	got := map[string]string{}
	for _, h := range r.Headline {
		got[h.Name] = h.Value
	}
	require.Equal(t, map[string]string{"budget_newcomer_p99_s": "3.00", "budget_reclaim_s": "≥31.00",
		"ledger_ru_per_s_idle": "1.25", "ledger_ru_per_s_busy": "12.50", "ledger_412_rate": "0.10"}, got)
}
