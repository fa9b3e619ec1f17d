package agent

import (
	"math"
)

// Adaptive resolution. Reading a group costs the kernel a few µs a file (kernfs, seq_file),
// and most pods on a node neither throttle nor change from busy to idle most of the time:
// reading each at the fast rate (http-timing record's 10 ms) costs ~6 % of a CPU for 100
// idle pods. So a group is read at the fast rate (Config.Interval) for Config.Hold after
//
//   - it is first watched,
//   - a reading in which one of its quota levels' nr_throttled moved, or
//   - it became busy: its usage over the last half idle interval (or more) reached half the
//     quota in force, after a half interval in which it had not (a service's background
//     threads, timers and probes use far less; a group that stays busy without throttling
//     goes back to the idle rate after the hold, and comes back at its first throttle),
//
// and otherwise at the idle rate (Config.IdleInterval), all idle groups in the same tick (one
// wake-up). A group that throttles is thus followed at the fast rate from the first reading
// that shows it, at most IdleInterval after its first throttled period; the rows before it
// are IdleInterval apart. Nothing is lost: every row holds the kernel's cumulative counters,
// so an idle-rate interval's throttled periods and time are all in it (the histogram's count
// is still nr_throttled and its sum the throttled time), only not placed more finely than
// the interval: which rate each row had is the gap between its t_ns and the previous row's,
// and the histogram's periods observed in such an interval are counted apart
// (throttle_lab_cpu_cfs_throttled_periods_coarse_total).
type pace struct {
	fastUntil     int64 // monotonic ns: read every tick until then
	fast          bool  // the rate of the current row
	lastThrottled int64
	quota         float64 // CPUs of the quota in force (0: none: it cannot throttle)
	markT         int64   // the start of the usage window
	markUsage     int64
	busy          bool // the last window's usage reached half the quota
}

func (p *pace) start(w *watched, hold int64, adaptive bool, now int64) {
	p.fastUntil = now + hold
	if !adaptive {
		p.fastUntil = math.MaxInt64
	}
	p.markT, p.markUsage, p.lastThrottled = now, w.own.usageNS, throttledPeriods(w)
	p.quota, p.busy = 0, false
	if l := w.target.Levels; len(l) > 0 && l[0].PeriodUS > 0 {
		p.quota = float64(l[0].QuotaUS) / float64(l[0].PeriodUS)
	}
}

// due: is the group read in this tick.
func (p *pace) due(idleTick bool, now int64) bool {
	p.fast = now < p.fastUntil
	return p.fast || idleTick
}

func (p *pace) rate() string {
	if p.fast {
		return "fast"
	}
	return "idle"
}

// update after a row (window: half the idle interval): a throttle or becoming busy keeps (or
// puts) the group at the fast rate.
func (p *pace) update(w *watched, hold, window, now int64) {
	if throttled := throttledPeriods(w); throttled != p.lastThrottled {
		p.lastThrottled = throttled
		p.fastUntil = max(p.fastUntil, now+hold)
	}
	if p.quota > 0 && now-p.markT >= window {
		busy := float64(w.own.usageNS-p.markUsage) >= 0.5*p.quota*float64(now-p.markT)
		if busy && !p.busy {
			p.fastUntil = max(p.fastUntil, now+hold)
		}
		p.busy, p.markT, p.markUsage = busy, now, w.own.usageNS
	}
}

func throttledPeriods(w *watched) (throttled int64) {
	for _, n := range w.levels {
		throttled += n.st.Throttled
	}
	return throttled
}

func (a *Agent) idleEvery() int64 {
	return max(1, a.cfg.IdleInterval.Nanoseconds()/a.cfg.Interval.Nanoseconds())
}

func (a *Agent) isIdleTick(tick int64) bool {
	return a.cfg.IdleInterval <= 0 || tick%a.idleEvery() == 0
}

// nextTick after tick: the next one while a group is at the fast rate, else the next idle tick.
func (a *Agent) nextTick(tick int64) int64 {
	if a.cfg.IdleInterval <= 0 {
		return tick + 1
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.clock()
	if len(a.started) > 0 {
		return tick + 1
	}
	for _, w := range a.fast {
		if w.pace.fastUntil > now {
			return tick + 1
		}
	}
	every := a.idleEvery()
	return (tick/every + 1) * every
}
