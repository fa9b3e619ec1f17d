package agent

import (
	"testing"

	"github.com/throttle-lab/throttle-lab/agent/internal/cgroupfs"
)

const ms = int64(1e6)

// a watched group with a 0.2 CPU quota (20 ms every 100 ms) and no level above it
func group() *watched {
	n := &node{}
	return &watched{own: n, levels: []*node{n},
		target: cgroupfs.Target{Levels: []cgroupfs.Level{{QuotaUS: 20000, PeriodUS: 100000}}}}
}

func TestPaceFollowsAGroupFastOnlyWhileItThrottlesOrHasJustBecomeBusy(t *testing.T) {
	const hold, window = 5000 * ms, 500 * ms
	w, p := group(), &pace{}
	p.start(w, hold, true, 0)
	if !p.due(false, 10*ms) || p.rate() != "fast" {
		t.Fatal("a new group is read at the fast rate for the hold")
	}
	// idle (a background thread: 1 ms of CPU a second, far below half the quota)
	now := int64(0)
	for now < 6000*ms {
		now += 1000 * ms
		w.own.usageNS += 1 * ms
		p.update(w, hold, window, now)
	}
	if p.due(false, now+10*ms) || !p.due(true, now+10*ms) || p.rate() != "idle" {
		t.Fatal("an idle group is read at idle ticks only, once the hold is over")
	}
	// it becomes busy: 0.15 CPU over the next second (>= half the quota), no throttle yet
	now += 1000 * ms
	w.own.usageNS += 150 * ms
	p.update(w, hold, window, now)
	if !p.due(false, now+10*ms) {
		t.Fatal("a group that became busy is read at the fast rate")
	}
	// it stays busy without throttling: back to the idle rate after the hold
	for i := 0; i < 60; i++ {
		now += 100 * ms
		w.own.usageNS += 15 * ms
		p.update(w, hold, window, now)
	}
	if p.due(false, now+10*ms) {
		t.Fatal("a group busy without throttling goes back to the idle rate after the hold")
	}
	// its first throttled period (seen at an idle-rate reading): fast again, for the hold
	now += 1000 * ms
	w.own.usageNS += 200 * ms
	w.own.st.Throttled++
	p.update(w, hold, window, now)
	if !p.due(false, now+hold-10*ms) || p.due(false, now+hold+10*ms) {
		t.Fatal("a throttle puts the group at the fast rate for the hold")
	}
}

func TestPaceWithoutAdaptiveResolutionReadsEveryTick(t *testing.T) {
	w, p := group(), &pace{}
	p.start(w, 0, false, 0)
	p.update(w, 0, 500*ms, 3600_000*ms)
	if !p.due(false, 3600_000*ms) || p.rate() != "fast" {
		t.Fatal("--idle-interval 0: every group every tick")
	}
}

func TestPaceOfAGroupWithoutQuotaNeverWakesOnUsage(t *testing.T) {
	w, p := group(), &pace{}
	w.target.Levels = nil
	p.start(w, 1000*ms, true, 0)
	w.own.usageNS += 5000 * ms
	p.update(w, 1000*ms, 500*ms, 2000*ms)
	if p.due(false, 2010*ms) {
		t.Fatal("without a quota a group cannot throttle: busy alone does not make it fast")
	}
}
