package timeline

import (
	"os"
	"strings"
	_ "unsafe" // go:linkname

	"golang.org/x/sys/unix"
)

// nanotime is the Go runtime's CLOCK_MONOTONIC reading, through the vDSO (no system call; the
// runtime keeps this name reachable for linkname).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// Monotonic is CLOCK_MONOTONIC in ns (Python's perf_counter_ns on Linux: the timeline's clock).
// unix.ClockGettime would be a real system call each time: the loop reads the clock a few
// times a group and tick, which cost as much as the cgroup reads themselves.
func Monotonic() int64 { return nanotime() }

func syscallMonotonic() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func realtime() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_REALTIME, &ts)
	return ts.Nano()
}

// Anchor is the wall-clock time (Unix ns) of Monotonic() == zero, and its uncertainty: a
// monotonic reading between two wall-clock readings, the tightest of five
// (client/run/timeline_record.anchor_clock).
func Anchor(zero int64) (epochNS, uncertaintyNS int64) {
	best := int64(-1)
	for i := 0; i < 5; i++ {
		before := realtime()
		mono := Monotonic()
		after := realtime()
		gap := after - before
		if best < 0 || gap < best {
			best = gap
			epochNS = (before+after)/2 - (mono - zero)
		}
	}
	return epochNS, (best + 1) / 2
}

// BootID identifies this boot: a timeline's monotonic clock goes on only within one boot.
func BootID() string {
	raw, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(raw))
}
