package scan

// StartAt makes f's scans start at position start of the listing (the last
// position when it is shorter) instead of a random one.
func (f *Function) StartAt(start int) {
	f.startAt = func(n int) int { return min(start, n-1) }
}
