package agent

import (
	"path/filepath"
	"time"

	"github.com/throttle-lab/throttle-lab/agent/internal/cgroupfs"
	"github.com/throttle-lab/throttle-lab/agent/internal/metrics"
)

// labels of an exported group: its pod (or static target) and its quota level.
type labels struct{ namespace, pod, container, level string }

// node is one group directory read once per tick, whatever number of timelines use it (a
// pod's group is the pod's own target and a level of each of its containers).
type node struct {
	dir      string
	version  int
	stat     *cgroupfs.File
	usage    *cgroupfs.File
	sched    *cgroupfs.SchedstatUsage
	usageSrc string // "" (not needed), "cpu.stat", "cpuacct", "schedstat"
	pressure *cgroupfs.File
	refs     int

	// the last reading
	tNS     int64
	st      cgroupfs.Stat
	hasStat bool
	usageNS int64
	some    int64
	full    int64
	err     error

	// idle elision (see read)
	usageParent *node  // the nearest watched group above, with a usage of its own
	usageSame   bool   // this reading's usage equals the last one
	readTick    uint64 // the tick of the last reading
	dueTick     uint64 // a due group uses this node in this tick: read it
	parentSeen  int64  // usageParent's usage when this node was last read (-1: not known)
	lastChange  int64  // monotonic ns of the last reading whose usage differed
	statAt      int64  // monotonic ns of the last cpu.stat read
	settleNS    int64  // after this long without usage, cpu.stat no longer moves

	owners []*watched // the watched groups this is the own group of: a row each when it is read
	rank   int        // its place in Agent.order (the groups above it come first)

	export *labels // nil: read for a timeline only
	quota  *cgroupfs.Level
	// no quota on it nor on any group above (as resolved): its throttling counters are not
	// exported (they stand still), throttle_lab_cpu_no_quota says so instead
	noQuota bool
	waits   *metrics.Waits
	coarse  uint64 // the waits' periods observed more than one period after the last reading
	// the wall-clock time its export began (with its wait histogram): every counter it
	// exports counts since then at least without a reset (the kernel's since the group was
	// made, earlier); a new watch of the group is a new start
	since time.Time
}

func openNode(dir string, version int, now int64) (*node, error) {
	f, err := cgroupfs.OpenFile(filepath.Join(dir, "cpu.stat"), 1024)
	if err != nil {
		return nil, err
	}
	return &node{dir: dir, version: version, stat: f, some: -1, full: -1, parentSeen: -1,
		lastChange: now, settleNS: 3 * 100e6}, nil
}

// needUsage makes the node read its usage from the target's source.
func (n *node) needUsage(u cgroupfs.Usage, proc string) error {
	if n.usageSrc != "" {
		return nil
	}
	switch u.Kind {
	case "cpuacct":
		f, err := cgroupfs.OpenFile(u.Path, 64)
		if err != nil {
			return err
		}
		n.usage = f
	case "schedstat":
		n.sched = cgroupfs.NewSchedstatUsage(u.Path, proc)
	}
	n.usageSrc = u.Kind
	return nil
}

func (n *node) needPressure() {
	if n.pressure == nil {
		if f, err := cgroupfs.OpenFile(filepath.Join(n.dir, "cpu.pressure"), 256); err == nil {
			n.pressure = f
		}
	}
}

// read the node's files; t_ns is the middle of the cpu.stat read (as the Python sampler).
//
// Idle elision: a group whose usage has not moved cannot have moved its cpu.stat either once
// its period timer has stopped: the kernel counts a period (nr_periods) only while the timer
// runs, the timer stops after the second period without use, and it starts again only when the
// group asks for runtime, that is runs (or when its quota is written: then nr_periods may lag
// by up to 2 until the group next runs); a throttled period ends, and its throttled time is
// added, at the next period's start. So when the usage has been the same for settleNS (three
// of its periods and two intervals), the row repeats the counters already read, without
// reading cpu.stat. Usage is hierarchical (v1 cpuacct.usage and v2 usage_usec include the
// groups below, a schedstat sum covers the subtree), so when the group above (read earlier in
// the same tick: parents come first) has not moved since this one was last read, neither has
// this one, and its usage is not read either. force: read all. tick: the round's number.
// clock: the monotonic clock (timeline.Monotonic).
func (n *node) read(force bool, tick uint64, clock func() int64) {
	now := clock()
	prevT := n.tNS
	n.readTick = tick
	p := n.usageParent
	parentNow := int64(-1)
	if p != nil && p.readTick == tick && p.err == nil {
		parentNow = p.usageNS
	}
	parentSame := !force && parentNow >= 0 && parentNow == n.parentSeen && n.hasStat
	n.parentSeen = parentNow
	// (not with PSI: a task can wait for a CPU without running)
	// settled once cpu.stat was read settleNS after the last change: a late tick (a busy
	// machine) still reads the counters the timer added after it once before eliding
	settled := !force && n.usageSrc != "" && n.pressure == nil && n.hasStat && n.statAt-n.lastChange > n.settleNS
	if parentSame && settled {
		n.tNS, n.usageSame = now, true
		return
	}
	prev := n.usageNS
	if n.usageSrc == "cpuacct" || n.usageSrc == "schedstat" {
		if !parentSame {
			if !n.readUsage() {
				return
			}
		}
		if n.usageNS == prev && settled {
			n.tNS, n.usageSame = now, true
			return
		}
	}
	before := clock()
	raw, err := n.stat.Read()
	after := clock()
	if err != nil {
		n.err = err
		return
	}
	n.tNS, n.statAt = before+(after-before)/2, now
	n.st, n.hasStat = cgroupfs.ParseCPUStat(raw, n.version)
	if n.usageSrc == "cpu.stat" {
		n.usageNS = n.st.UsageNS
	}
	n.usageSame = n.usageSrc != "" && n.usageNS == prev
	if !n.usageSame {
		n.lastChange = now
	}
	if n.pressure != nil {
		if raw, err := n.pressure.Read(); err == nil {
			n.some, n.full, _ = cgroupfs.ParsePressure(raw)
		}
	}
	if n.waits != nil && n.hasStat {
		period := int64(100e6)
		if n.quota != nil {
			period = n.quota.PeriodUS * 1000
		}
		if seen := n.waits.Add(n.st.Throttled, n.st.ThrottledNS); seen > 0 && n.tNS-prevT > period {
			n.coarse += uint64(seen)
		}
	}
}

func (n *node) readUsage() bool {
	switch n.usageSrc {
	case "cpuacct":
		raw, err := n.usage.Read()
		if err != nil {
			n.err = err
			return false
		}
		var v int64
		for _, c := range raw {
			if c < '0' || c > '9' {
				break
			}
			v = v*10 + int64(c-'0')
		}
		n.usageNS = v
	case "schedstat":
		v, err := n.sched.Read()
		if err != nil {
			n.err = err
			return false
		}
		n.usageNS = v
	}
	return true
}

func (n *node) close() {
	n.stat.Close()
	n.usage.Close()
	n.pressure.Close()
}
