package agent

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/throttle-lab/throttle-lab/agent/internal/timeline"
)

const (
	golden = 0.6180339887498949 // the tick dither sequence: frac(k * golden), as the Python sampler
	dither = 0.8                // ... spread over 0.8 of a step
)

// Run ticks until ctx ends, then closes every timeline (its last rows written). Ticks are on
// the Interval grid (dithered); when no group is at the fast rate the loop sleeps until the
// next idle tick (every IdleInterval: all idle groups are read in the same wake-up) or until
// the source brings new wants.
func (a *Agent) Run(ctx context.Context) {
	step := a.cfg.Interval.Nanoseconds()
	origin := a.clock()
	timer := time.NewTimer(0)
	<-timer.C
	defer a.closeAll("interrupted", true)
	dueAt := func(tick int64) int64 {
		frac := math.Mod(float64(tick)*golden, 1.0)
		return origin + tick*step + int64(math.Round((frac-0.5)*dither*float64(step)))
	}
	for tick := int64(1); ; {
		if wait := dueAt(tick) - a.clock(); wait > 0 {
			timer.Reset(time.Duration(wait))
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			case <-a.wake:
				if !timer.Stop() {
					<-timer.C
				}
				tick = max(1, (a.clock()-origin)/step) // this slot, now
			}
		} else if ctx.Err() != nil {
			return
		}
		a.Tick(time.Now(), tick)
		if behind := a.clock() - (origin + tick*step); behind > step {
			tick += behind / step // late (a busy machine): skip ticks, never sample in a burst
			a.mu.Lock()
			a.late++
			a.mu.Unlock()
		}
		tick = a.nextTick(tick)
	}
}

// Tick is one round (tick: its index on the Interval grid): the source's new wants applied,
// the due groups read (sample), their rows written and full timelines rotated (record), now
// and then the quota check, flush and prune (housekeep).
func (a *Agent) Tick(now time.Time, tick int64) {
	a.wantMu.Lock()
	wants, fresh := a.wants, a.newWant
	a.newWant = false
	a.wantMu.Unlock()

	a.mu.Lock()
	defer a.mu.Unlock()
	a.ticks++
	a.now = now
	check := now.Sub(a.lastCheck) >= a.cfg.CheckEvery
	if fresh || (check && len(a.unresolved) > 0) {
		a.apply(wants)
	}
	mono := a.clock()
	a.record(a.sample(a.isIdleTick(tick), mono), mono)
	a.housekeep(now, check)
}

// sample reads the directories of the groups due in this tick, each once and the groups above
// first (the idle elision needs the parent's reading), and returns the groups that get a row:
// those whose own directory was read. Nothing is written.
func (a *Agent) sample(idleTick bool, mono int64) []*watched {
	if a.nodesDirty {
		a.orderNodes()
	}
	candidates := a.fast // between idle ticks, only the groups at the fast rate can be due
	if idleTick || a.listDirty {
		candidates = a.watchedList()
	}
	a.dueNodes = a.dueNodes[:0]
	for _, w := range candidates {
		if w.startTick == a.ticks || !w.pace.due(idleTick, mono) {
			continue // (a group started in this tick has its first row)
		}
		a.markDue(w.own)
		for _, n := range w.levels {
			a.markDue(n)
		}
	}
	sort.Slice(a.dueNodes, func(i, j int) bool { return a.dueNodes[i].rank < a.dueNodes[j].rank })
	a.due = a.due[:0]
	for _, n := range a.dueNodes {
		n.read(false, a.ticks, a.clock)
	}
	for _, n := range a.dueNodes {
		for _, w := range n.owners { // (a pod's group read for its container: a row for the pod too)
			if w.startTick != a.ticks && a.allRead(w) {
				a.due = append(a.due, w)
			}
		}
	}
	return a.due
}

func (a *Agent) markDue(n *node) {
	if n.dueTick != a.ticks {
		n.dueTick = a.ticks
		a.dueNodes = append(a.dueNodes, n)
	}
}

// allRead: every level of w was read in this tick (its row is one reading).
func (a *Agent) allRead(w *watched) bool {
	for _, n := range w.levels {
		if n.dueTick != a.ticks {
			return false
		}
	}
	return true
}

// record writes the sampled groups' rows and moves their pace; a group whose files can no
// longer be read stops (its group is gone), a timeline at its size limit rotates.
func (a *Agent) record(due []*watched, mono int64) {
	var full []*watched
	fast := a.fast[:0]
	for _, w := range due {
		if failed := a.failedNode(w); failed != nil {
			a.stop(w.want.Key, w, fmt.Sprintf("stopped sampling %s: %v", failed.dir, failed.err))
			a.unresolved[w.want.Key] = "its group is gone"
			continue
		}
		a.row(w)
		a.reads[w.pace.rate()]++
		w.pace.update(w, a.cfg.Hold.Nanoseconds(), max(a.cfg.Interval, a.cfg.IdleInterval/2).Nanoseconds(),
			w.own.tNS)
		if w.pace.fastUntil > mono {
			fast = append(fast, w)
		}
		if a.store.Full(w.seg) {
			full = append(full, w)
		}
	}
	a.fast = append(fast, a.started...)
	a.started = a.started[:0]
	for _, w := range full {
		if a.watched[w.want.Key] == w {
			a.rotate(w.want.Key, w, "the timeline reached its size limit")
		}
	}
}

// housekeep: the quota check (check: its time has come), the flush and the retention.
func (a *Agent) housekeep(now time.Time, check bool) {
	if check {
		a.lastCheck = now
		a.checkQuotas()
	}
	if now.Sub(a.lastFlush) >= a.cfg.FlushEvery {
		a.lastFlush = now
		for _, w := range a.watched {
			if err := w.seg.Flush(); err != nil {
				a.logf("%s: %v", w.seg.CSVPath(), err)
			}
		}
	}
	if now.Sub(a.lastPrune) >= a.cfg.PruneEvery {
		a.lastPrune = now
		for _, name := range a.store.Prune(now) {
			a.logf("retention: removed %s", name)
		}
	}
}

// watchedList is every watched group, by key.
func (a *Agent) watchedList() []*watched {
	if a.listDirty {
		a.list = a.list[:0]
		for _, w := range a.watched {
			a.list = append(a.list, w)
		}
		sort.Slice(a.list, func(i, j int) bool { return a.list[i].want.Key < a.list[j].want.Key })
		a.listDirty = false
	}
	return a.list
}

func (a *Agent) failedNode(w *watched) *node {
	if w.own.err != nil {
		return w.own
	}
	for _, n := range w.levels {
		if n.err != nil {
			return n
		}
	}
	return nil
}

func counters(n *node) timeline.Counters {
	return timeline.Counters{Periods: n.st.Periods, Throttled: n.st.Throttled, ThrottledNS: n.st.ThrottledNS}
}

func (a *Agent) row(w *watched) {
	first := w.levels[0]
	s := &w.sample
	s.TNS = first.tNS - w.seg.Meta.Agent.ZeroMono
	s.UsageNS = w.own.usageNS
	s.First = counters(first)
	s.Some, s.Full = w.own.some, w.own.full
	for i, n := range w.levels[1:] {
		s.Others[i] = counters(n)
	}
	w.seg.Append(s)
}
