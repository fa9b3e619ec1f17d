// Package metrics exports what the agent samples on /metrics with Prometheus's naming.
package metrics

// Buckets of the per-period wait histogram, in seconds: a throttled period costs from a few ms
// (quota nearly enough) up to the period itself (100 ms by default) and beyond for longer
// periods.
var Buckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1}

// Waits turns one group's consecutive cpu.stat readings into one observation per throttled
// period: how long the group waited in that period.
//
// How: the kernel's period timer, at the end of a period in which the group ran out of
// quota, adds 1 to nr_throttled and unthrottles the group's run queues; each unthrottled run
// queue adds the time it spent throttled to throttled_time (v1 ns, v2 throttled_usec). So
// between two samples, Δthrottled_time belongs to the Δnr_throttled periods that ended in
// between, and each of them waited Δthrottled_time / Δnr_throttled. At the default 10 ms
// sampling and 100 ms periods an interval holds at most one period's end, so this is that
// period's own wait, not an average. Two things are handled:
//
//   - nr_throttled and throttled_time do not move at the same instant (the timer counts the
//     period, the run queues are unthrottled, remote CPUs possibly a moment later; seen here
//     in either order): periods and time are carried until both have arrived (pending), and
//     a reading that brings new throttled periods without new throttled time waits one more
//     reading in case that period's time is still to come; after that it is observed with
//     the time there is, even none (Linux 6.18 counts a period throttled whose task was never
//     stopped, e.g. one that was exiting: nr_throttled moves, throttled_time does not).
//   - throttled time with no throttled period (a run queue unthrottled by returned slack in
//     mid-period) is carried to the next throttled period.
//
// Nothing is lost or invented: over any run, the histogram's count is the Δnr_throttled and
// its sum the Δthrottled_time seen, less what is still pending. The wait is per run queue:
// a group throttled on two CPUs at once adds both CPUs' throttled time, so it reads as twice
// the wall-clock wait (as cAdvisor's throttled_seconds does).
type Waits struct {
	started      bool
	lastN        int64
	lastNS       int64
	pendingN     int64
	pendingNS    int64
	deferred     bool
	BucketCounts []uint64 // cumulative counts are made at export; these are per bucket
	Count        uint64
	SumSeconds   float64
}

// NewWaits with empty buckets.
func NewWaits() *Waits { return &Waits{BucketCounts: make([]uint64, len(Buckets)+1)} }

// Add one reading of nr_throttled and throttled ns; returns how many periods were observed.
func (w *Waits) Add(nrThrottled, throttledNS int64) int64 {
	if !w.started || nrThrottled < w.lastN || throttledNS < w.lastNS { // first, or a new group
		w.started, w.lastN, w.lastNS, w.pendingN, w.pendingNS = true, nrThrottled, throttledNS, 0, 0
		return 0
	}
	dN, dNS := nrThrottled-w.lastN, throttledNS-w.lastNS
	w.lastN, w.lastNS = nrThrottled, throttledNS
	w.pendingN += dN
	w.pendingNS += dNS
	if w.pendingN == 0 {
		return 0 // no throttled period yet (time alone is carried)
	}
	if dN > 0 && dNS == 0 && !w.deferred {
		w.deferred = true // this reading's period may have its time still to come
		return 0
	}
	w.deferred = false
	n := w.pendingN
	each := float64(w.pendingNS) / float64(n) / 1e9
	i := 0
	for i < len(Buckets) && each > Buckets[i] {
		i++
	}
	w.BucketCounts[i] += uint64(n)
	w.Count += uint64(n)
	w.SumSeconds += float64(w.pendingNS) / 1e9
	w.pendingN, w.pendingNS = 0, 0
	return n
}

// Cumulative is the histogram's buckets as Prometheus wants them (upper bound -> count <= it).
func (w *Waits) Cumulative() map[float64]uint64 {
	out := make(map[float64]uint64, len(Buckets))
	var c uint64
	for i, b := range Buckets {
		c += w.BucketCounts[i]
		out[b] = c
	}
	return out
}
