package main

import (
	"math"
	"slices"
	"time"
)

// quantile returns the q-quantile (0 <= q <= 1) of sorted values by the
// nearest-rank method: the smallest value with at least q of the values at
// or below it. It returns 0 for no values.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// dist summarizes delays.
type dist struct {
	N             int
	P50, P99, Max time.Duration
	// Censored counts the values only known to be at least the observation
	// time (operations not updated when the harness stopped waiting); a
	// quantile that falls on one of them is a lower bound, and the flags
	// say which.
	Censored               int `json:",omitempty"`
	P50AtLeast, P99AtLeast bool
	MaxAtLeast             bool
}

func summarize(values []time.Duration) dist { return summarizeCensored(values, 0, 0) }

// summarizeCensored summarizes values plus censored values known only to be
// at least observed.
func summarizeCensored(values []time.Duration, censored int, observed time.Duration) dist {
	s := slices.Clone(values)
	for range censored {
		s = append(s, observed)
	}
	slices.Sort(s)
	d := dist{N: len(s), P50: quantile(s, 0.5), P99: quantile(s, 0.99), Max: quantile(s, 1), Censored: censored}
	// Nearest rank: the quantile is censored when its rank reaches into the
	// censored tail (they sort last, being the longest).
	atLeast := func(q float64) bool {
		rank := min(max(int(math.Ceil(q*float64(len(s)))), 1), len(s))
		return censored > 0 && rank > len(s)-censored
	}
	d.P50AtLeast, d.P99AtLeast, d.MaxAtLeast = atLeast(0.5), atLeast(0.99), censored > 0
	return d
}

// median returns the median of values (the lower middle one for an even
// count), 0 for none.
func median(values []time.Duration) time.Duration {
	s := slices.Clone(values)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[(len(s)-1)/2]
}

// passEnd returns the instant a pass that started at start had issued a
// Cluster Service call for every path in paths: the latest, over the paths,
// of the first call at or after start. ok is false when some path has no
// call since start.
func passEnd(calls map[string][]time.Time, paths []string, start time.Time) (end time.Time, ok bool) {
	for _, p := range paths {
		first, found := firstAtOrAfter(calls[p], start)
		if !found {
			return time.Time{}, false
		}
		if first.After(end) {
			end = first
		}
	}
	return end, true
}

// checked returns how many of paths had a call in [from, to].
func checked(calls map[string][]time.Time, paths []string, from, to time.Time) int {
	n := 0
	for _, p := range paths {
		if first, ok := firstAtOrAfter(calls[p], from); ok && !first.After(to) {
			n++
		}
	}
	return n
}

// firstAtOrAfter returns the first of the sorted times that is not before t.
func firstAtOrAfter(times []time.Time, t time.Time) (time.Time, bool) {
	i, _ := slices.BinarySearchFunc(times, t, func(a, b time.Time) int { return a.Compare(b) })
	if i == len(times) {
		return time.Time{}, false
	}
	return times[i], true
}

// intervalCalls counts, for each path, its calls in each interval
// [bounds[i], bounds[i+1]) and returns the largest count, the number of
// (path, interval) pairs with more than one call, and the number of pairs.
// Calls before bounds[0] or at or after the last bound are not counted.
func intervalCalls(calls map[string][]time.Time, paths []string, bounds []time.Time) (maxCalls, over1, pairs int) {
	if len(bounds) < 2 {
		return 0, 0, 0
	}
	for _, p := range paths {
		ts := calls[p]
		for i := 0; i+1 < len(bounds); i++ {
			lo, _ := slices.BinarySearchFunc(ts, bounds[i], func(a, b time.Time) int { return a.Compare(b) })
			hi, _ := slices.BinarySearchFunc(ts, bounds[i+1], func(a, b time.Time) int { return a.Compare(b) })
			n := hi - lo
			pairs++
			maxCalls = max(maxCalls, n)
			if n > 1 {
				over1++
			}
		}
	}
	return maxCalls, over1, pairs
}
