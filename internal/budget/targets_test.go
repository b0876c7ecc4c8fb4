package budget_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opstatus/opstatus/internal/budget"
)

func TestTargets(t *testing.T) {
	for _, tc := range []struct {
		name    string
		budget  int
		holders map[string]budget.Entry
		want    map[string]int
	}{
		{"lone busy holder gets everything", 256, map[string]budget.Entry{"a": {Demand: 1000}}, map[string]int{"a": 256}},
		{"idle holder gets nothing", 256, map[string]budget.Entry{"a": {}}, map[string]int{"a": 0}},
		{"small demand filled, rest shared", 10, map[string]budget.Entry{"a": {Demand: 2}, "b": {Demand: 50}, "c": {Demand: 50}},
			map[string]int{"a": 2, "b": 4, "c": 4}},
		{"remainder by owner id", 10, map[string]budget.Entry{"b": {Demand: 50}, "a": {Demand: 50}, "c": {Demand: 50}},
			map[string]int{"a": 4, "b": 3, "c": 3}},
		{"pickup floor kept while idle", 32, map[string]budget.Entry{"p": {Group: budget.GroupPickup, Floor: 8}, "a": {Demand: 100}},
			map[string]int{"p": 8, "a": 24}},
		{"pickup floor at most a quarter of the budget", 20, map[string]budget.Entry{"p": {Group: budget.GroupPickup, Floor: 8}, "a": {Demand: 100}},
			map[string]int{"p": 5, "a": 15}},
		{"an idle pickup never takes a small budget whole", 8, map[string]budget.Entry{"p": {Group: budget.GroupPickup, Floor: 8}, "a": {Demand: 100}},
			map[string]int{"p": 2, "a": 6}},
		{"a budget too small to share keeps no floor", 3, map[string]budget.Entry{"p": {Group: budget.GroupPickup, Floor: 8}, "a": {Demand: 100}},
			map[string]int{"p": 0, "a": 3}},
		{"busy pickup gets floor and share", 20, map[string]budget.Entry{"p": {Group: budget.GroupPickup, Floor: 4, Demand: 100}, "a": {Demand: 100}},
			map[string]int{"p": 12, "a": 8}},
		{"floors over the budget shared", 24, map[string]budget.Entry{"p": {Group: budget.GroupPickup, Floor: 8}, "q": {Group: budget.GroupPickup, Floor: 8}},
			map[string]int{"p": 3, "q": 3}},
		{"pickup entries hold one floor together, the busy one's first", 32, map[string]budget.Entry{
			"p1": {Group: budget.GroupPickup, Floor: 8, Demand: 3}, "p2": {Group: budget.GroupPickup, Floor: 8},
			"p3": {Group: budget.GroupPickup, Floor: 8}, "p4": {Group: budget.GroupPickup, Floor: 8}, "a": {Demand: 64}},
			map[string]int{"p1": 3, "p2": 2, "p3": 2, "p4": 1, "a": 24}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := budget.Ledger{Budget: tc.budget, Holders: tc.holders}.Targets()
			require.Equal(t, tc.want, got)
			total := 0
			for _, n := range got {
				total += n
			}
			require.LessOrEqual(t, total, tc.budget)
		})
	}
}
