package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/dev/clustersim"
	"github.com/opstatus/opstatus/dev/hostemu"
	"github.com/opstatus/opstatus/internal/budget"
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

func TestNewcomersFromTheirWork(t *testing.T) {
	// A newcomer's time runs from its process's first work: its first
	// invocation after the latest handler start seen on its instance
	// before its entry first appeared, or that start if the work came
	// first; an entry with demand before the window, or in the watch's
	// first read, is no newcomer, and one still short of its share is a
	// lower bound.
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	sec := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	rec := newRecorder(nil)
	for _, inv := range []hostemu.Invocation{
		{Function: "poll", Instance: 2, Start: sec(9)},  // the process before
		{Function: "poll", Instance: 2, Start: sec(13)}, // its first work
		{Function: "poll", Instance: 2, Start: sec(14)},
		{Function: "scan", Instance: 3, Start: sec(21)},
		{Function: "poll", Instance: 3, Start: sec(20.5)}, // before its start was seen
	} {
		rec.record(inv)
	}
	w := &ledgerWatch{
		rec:     rec,
		begun:   sec(5.1),
		first:   map[string]time.Time{"old": sec(1), "there": sec(5.1), "idle": sec(12), "busy": sec(21), "short": sec(31)},
		seen:    map[string]time.Time{"old": sec(2), "there": sec(8), "idle": sec(13.2), "busy": sec(21.1), "short": sec(31)},
		reached: map[string]time.Time{"old": sec(3), "there": sec(8), "idle": sec(15), "busy": sec(23)},
		starts:  []procStart{{sec(0.5), 1}, {sec(10), 2}, {sec(21), 3}, {sec(30), 4}},
		last:    budget.Ledger{Holders: map[string]budget.Entry{"short": {Demand: 5}}},
		at:      sec(40),
	}
	reached, short := w.newcomers(sec(5))
	require.Equal(t, []time.Duration{2 * time.Second, 2 * time.Second}, reached,
		"idle: started at 10 s, work at 13 s, its share at 15 s; busy: started at 21 s with work, its share at 23 s")
	require.Equal(t, []time.Duration{10 * time.Second}, short, "started at 30 s with work, short at 40 s")

	r := budgetResult{Newcomers: reached, NewcomersShort: short}
	p, atLeast := r.newcomerP99()
	require.Equal(t, 10*time.Second, p)
	require.True(t, atLeast)
	r.NewcomersShort = nil
	p, atLeast = r.newcomerP99()
	require.Equal(t, 2*time.Second, p)
	require.False(t, atLeast)
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
