package agent

import (
	"path/filepath"

	"github.com/throttle-lab/throttle-lab/agent/internal/cgroupfs"
	"github.com/throttle-lab/throttle-lab/agent/internal/metrics"
	"github.com/throttle-lab/throttle-lab/agent/internal/timeline"
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

	export *labels // nil: read for a timeline only
	quota  *cgroupfs.Level
	waits  *metrics.Waits
}

func openNode(dir string, version int) (*node, error) {
	f, err := cgroupfs.OpenFile(filepath.Join(dir, "cpu.stat"), 1024)
	if err != nil {
		return nil, err
	}
	return &node{dir: dir, version: version, stat: f, some: -1, full: -1}, nil
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
func (n *node) read() {
	before := timeline.Monotonic()
	raw, err := n.stat.Read()
	after := timeline.Monotonic()
	if err != nil {
		n.err = err
		return
	}
	n.tNS = before + (after-before)/2
	n.st, n.hasStat = cgroupfs.ParseCPUStat(raw, n.version)
	switch n.usageSrc {
	case "cpu.stat":
		n.usageNS = n.st.UsageNS
	case "cpuacct":
		raw, err := n.usage.Read()
		if err != nil {
			n.err = err
			return
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
			return
		}
		n.usageNS = v
	}
	if n.pressure != nil {
		if raw, err := n.pressure.Read(); err == nil {
			n.some, n.full, _ = cgroupfs.ParsePressure(raw)
		}
	}
	if n.waits != nil && n.hasStat {
		n.waits.Add(n.st.Throttled, n.st.ThrottledNS)
	}
}

func (n *node) close() {
	n.stat.Close()
	n.usage.Close()
	n.pressure.Close()
}
