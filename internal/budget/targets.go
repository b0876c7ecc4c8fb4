package budget

import (
	"cmp"
	"math"
	"slices"
)

// Targets are the permits each holder of l should have, as every member
// computes them alike, out of the smallest budget of the entries: the
// pickup group's floor first (the largest floor its entries carry, at
// most a quarter of the budget, shared among them: up to its demand to
// each busy one first, the rest evenly to the idle ones), then the rest
// water-filled over the holders with demand, each getting at most its
// demand beyond its floor, ties broken by owner id. A lone busy holder
// gets all it asks for; pickup entries together hold one floor however
// many there are, since a dead one's stays until it is reclaimed. Read
// from a ledger a member wrote, they are that member's.
func (l Ledger) Targets() map[string]int {
	targets, _ := shares(l.least(), l.Holders)
	return targets
}

// least is the smallest budget of l's entries; l's own without any.
func (l Ledger) least() int {
	if len(l.Holders) == 0 {
		return l.Budget
	}
	least := math.MaxInt
	for _, e := range l.Holders {
		least = min(least, l.budgetOf(e))
	}
	return least
}

// shares is the targets out of budget, and the floors they hold.
func shares(budget int, holders map[string]Entry) (targets, floors map[string]int) {
	group := 0
	busy, idle := map[string]int{}, map[string]int{}
	for owner, e := range holders {
		if e.Group != GroupPickup || e.Floor <= 0 {
			continue
		}
		group = max(group, e.Floor)
		if e.Demand > 0 {
			busy[owner] = min(e.Floor, e.Demand)
		} else {
			idle[owner] = e.Floor
		}
	}
	// An idle pickup must never hold poll's whole budget, however small.
	group = min(group, max(budget, 0)/4)
	floors = waterFill(group, busy)
	left := group
	for _, f := range floors {
		left -= f
	}
	for owner, f := range waterFill(left, idle) {
		floors[owner] = f
	}
	rest := budget
	for _, f := range floors {
		rest -= f
	}
	wants := map[string]int{}
	for owner, e := range holders {
		if w := e.Demand - floors[owner]; w > 0 {
			wants[owner] = w
		}
	}
	share := waterFill(rest, wants)
	targets = make(map[string]int, len(holders))
	for owner := range holders {
		targets[owner] = floors[owner] + share[owner]
	}
	return targets, floors
}

// waterFill shares total among wants: each gets min(want, level) for the
// highest level that fits, and what whole permits remain go one each to
// the owners still wanting more, in owner order.
func waterFill(total int, wants map[string]int) map[string]int {
	type want struct {
		owner string
		n     int
	}
	list := make([]want, 0, len(wants))
	for o, n := range wants {
		if n > 0 {
			list = append(list, want{o, n})
		}
	}
	slices.SortFunc(list, func(a, b want) int { return cmp.Or(cmp.Compare(a.n, b.n), cmp.Compare(a.owner, b.owner)) })
	got := make(map[string]int, len(list))
	left := max(total, 0)
	for i, w := range list {
		k := len(list) - i
		if w.n <= left/k {
			got[w.owner] = w.n
			left -= w.n
			continue
		}
		// Everyone from here wants more than an even share of what is left.
		rest := list[i:]
		slices.SortFunc(rest, func(a, b want) int { return cmp.Compare(a.owner, b.owner) })
		for j, r := range rest {
			got[r.owner] = left / k
			if j < left%k {
				got[r.owner]++
			}
		}
		break
	}
	return got
}
