package cgroupfs

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// Level is a group at or above the target that holds a quota: the kernel counts a throttle
// only in the cpu.stat of the group whose quota it was (the counters are not hierarchical).
type Level struct {
	Dir      string // the group's directory
	Group    string // its path in the hierarchy
	QuotaUS  int64
	PeriodUS int64
	BurstUS  *int64 // nil: the kernel has no burst file
}

// CPUs is the quota as a number of CPUs, rounded as the Python side rounds (6 digits).
func (l Level) CPUs() float64 {
	return math.Round(float64(l.QuotaUS)/float64(l.PeriodUS)*1e6) / 1e6
}

// Metadata is the level as client/run/cgroup_target.py QuotaLevel.to_metadata() writes it.
func (l Level) Metadata() map[string]any {
	return map[string]any{"path": l.Dir, "group": l.Group, "quota_us": l.QuotaUS,
		"period_us": l.PeriodUS, "burst_us": l.BurstUS, "cpus": l.CPUs()}
}

// Usage says where a group's CPU usage comes from (the names of cgroup_target.UsageSource).
type Usage struct {
	Kind string // "cpu.stat" (v2 usage_usec), "cpuacct" (v1 cpuacct.usage) or "schedstat"
	Path string // the cpu.stat or cpuacct.usage file, or the group directory (schedstat)
}

// Target is one watched group: its directory, its quota levels (the tightest first, then the
// others nearest first, as cgroup_target._levels orders them) and its usage source.
type Target struct {
	Spec     string
	Dir      string
	Version  int
	Group    string
	Levels   []Level
	Usage    Usage
	BurstUS  *int64
	Pressure bool // the group has cpu.pressure (PSI, v2)
	// TieDir: the level named first where its quota equals the tightest (a pod's group whose
	// limit is pod-level, KEP-2837: the kubelet writes it on the container's group too);
	// "" for none
	TieDir string
}

// StatDir is the directory whose cpu.stat gives the timeline's first counters: the quota in
// force's group, or the group itself without any quota.
func (t Target) StatDir() string {
	if len(t.Levels) > 0 {
		return t.Levels[0].Dir
	}
	return t.Dir
}

// Metadata is the target as CgroupTarget.to_metadata() writes it into a timeline's .json.
func (t Target) Metadata() map[string]any {
	levels := make([]map[string]any, 0, len(t.Levels))
	for _, l := range t.Levels {
		levels = append(levels, l.Metadata())
	}
	out := map[string]any{"spec": t.Spec, "path": t.Dir, "group": t.Group, "version": t.Version,
		"quota_us": nil, "period_us": nil, "burst_us": t.BurstUS, "cpus": nil,
		"usage_source": t.Usage.Kind, "quota_group": nil, "levels": levels, "pressure": t.Pressure}
	if len(t.Levels) > 0 {
		first := t.Levels[0]
		out["quota_us"], out["period_us"], out["cpus"] = first.QuotaUS, first.PeriodUS, first.CPUs()
		out["quota_group"] = first.Group
	}
	return out
}

// Resolver turns a directory, pid:PID or a pod's uid (+ container id) into a Target.
type Resolver struct {
	Proc   string // the proc file system ("/proc"); its self/mountinfo locates the hierarchies
	mounts []Mount
}

// NewResolver reads the cgroup mounts once.
func NewResolver(proc string) (*Resolver, error) {
	mounts, err := ReadMounts(proc)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s/self/mountinfo: %w", proc, err)
	}
	return &Resolver{Proc: proc, mounts: mounts}, nil
}

// Resolve a static spec: a cgroup directory or pid:PID.
func (r *Resolver) Resolve(spec string) (Target, error) {
	spec = strings.TrimSpace(spec)
	if strings.HasPrefix(spec, "pid:") {
		pid, err := strconv.Atoi(spec[4:])
		if err != nil || pid <= 0 {
			return Target{}, fmt.Errorf("%s: pid: needs a process id, a number > 0 (pid:1234)", spec)
		}
		return r.fromPid(spec, pid)
	}
	return r.FromDirectory(spec, spec)
}

func (r *Resolver) fromPid(spec string, pid int) (Target, error) {
	raw, err := os.ReadFile(filepath.Join(r.Proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Target{}, fmt.Errorf("no such process: %d", pid)
		}
		return Target{}, err
	}
	for _, m := range CPUMounts(r.mounts) {
		for _, line := range strings.Split(string(raw), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				continue
			}
			controllers := strings.Split(parts[1], ",")
			joined := false
			if m.Version() == 1 {
				for _, c := range controllers {
					joined = joined || c == "cpu"
				}
			} else {
				joined = parts[0] == "0" && parts[1] == ""
			}
			if !joined {
				continue
			}
			if dir := MapGroupPath(m, parts[2]); dir != "" {
				return r.build(spec, dir, m.Version(), parts[2])
			}
		}
	}
	return Target{}, fmt.Errorf("process %d has no cgroup cpu controller mounted here", pid)
}

// FromDirectory resolves a group directory.
func (r *Resolver) FromDirectory(spec, dir string) (Target, error) {
	info, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Target{}, fmt.Errorf("no such cgroup directory: %s", dir)
		}
		return Target{}, err
	}
	if !info.IsDir() {
		return Target{}, fmt.Errorf("%s is not a directory", dir)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return Target{}, err
	}
	real, _ = filepath.Abs(real)
	m, ok := MountOf(real, r.mounts)
	if !ok {
		return Target{}, fmt.Errorf("%s is not in a cgroup file system", dir)
	}
	if !m.IsCPU() {
		return Target{}, fmt.Errorf("%s is in a cgroup v1 hierarchy that is not the cpu controller's", dir)
	}
	rel, _ := filepath.Rel(m.Point, real)
	group := strings.TrimRight(m.Root, "/")
	if rel != "." {
		group += "/" + rel
	}
	if group == "" {
		group = "/"
	}
	return r.build(spec, real, m.Version(), group)
}

// FromPod resolves a pod's group (containerID "") or one container's, in every cpu hierarchy.
// podLevel: the pod's spec says its CPU limit is pod-level and binds the container (see
// Target.TieDir).
func (r *Resolver) FromPod(spec, uid, containerID string, podLevel bool) (Target, error) {
	var firstErr error
	for _, m := range CPUMounts(r.mounts) {
		dir, err := FindPodDirectory(m.Point, uid, containerID)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if dir != "" {
			rel, _ := filepath.Rel(m.Point, dir)
			tie := ""
			if podLevel {
				tie = dir
				if containerID != "" {
					tie = filepath.Dir(dir)
				}
			}
			return r.buildTie(spec, dir, m.Version(), strings.TrimRight(m.Root, "/")+"/"+rel, tie)
		}
	}
	if firstErr != nil {
		return Target{}, firstErr
	}
	return Target{}, fmt.Errorf("no cgroup for pod uid %s under kubepods", uid)
}

// HierarchyPath is a group's path as its hierarchy names it. In a cgroup namespace of its own
// (a container's on a cgroup v2 node, as the agent's DaemonSet pod is) mountinfo gives the
// node's /sys/fs/cgroup, mounted in by hostPath, the root "/../../../.." (the mount's root as
// seen from the namespace's): the groups below it are named from the mount, /kubepods.slice/...
func HierarchyPath(group string) string { return path.Clean("/" + group) }

func (r *Resolver) build(spec, dir string, version int, group string) (Target, error) {
	return r.buildTie(spec, dir, version, group, "")
}

func (r *Resolver) buildTie(spec, dir string, version int, group, tie string) (Target, error) {
	group = HierarchyPath(group)
	top := dir
	if m, ok := MountOf(dir, r.mounts); ok {
		top = m.Point
	}
	levels := orderLevelsTie(QuotaLevels(dir, top, version, group), tie)
	ownFile := "cpu.max"
	if version == 1 {
		ownFile = "cpu.cfs_quota_us"
	}
	_, ownErr := os.Stat(filepath.Join(dir, ownFile))
	if ownErr != nil && len(levels) == 0 {
		return Target{}, fmt.Errorf("no cpu controller in %s", dir)
	}
	stat, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return Target{}, err
	}
	if _, ok := ParseCPUStat(stat, version); !ok && (ownErr == nil || version == 1) {
		return Target{}, fmt.Errorf("no throttling counters in %s/cpu.stat", dir)
	}
	t := Target{Spec: spec, Dir: dir, Version: version, Group: group, Levels: levels,
		Usage: r.usageSource(dir, version, group, stat), TieDir: tie}
	if len(levels) > 0 {
		t.BurstUS = levels[0].BurstUS
	} else {
		t.BurstUS = readBurst(dir, version)
	}
	if version == 2 {
		_, err := os.Stat(filepath.Join(dir, "cpu.pressure"))
		t.Pressure = err == nil
	}
	return t, nil
}

// QuotaLevels: every group from dir up to the hierarchy's top that holds a quota, nearest
// first (cpuquota.cgroupfs.quota_levels).
func QuotaLevels(dir, top string, version int, group string) []Level {
	var found []Level
	here := dir
	for {
		if l, ok := ReadLimit(here, version, group); ok {
			found = append(found, l)
		}
		parent := filepath.Dir(here)
		if here == top || parent == here {
			return found
		}
		here = parent
		if i := strings.LastIndex(group, "/"); i > 0 {
			group = group[:i]
		} else {
			group = "/"
		}
	}
}

// ReadLimit is the quota written in one group's files (ok false: no quota or unreadable).
func ReadLimit(dir string, version int, group string) (Level, bool) {
	var quota, period int64
	if version == 1 {
		q, err1 := readInt(filepath.Join(dir, "cpu.cfs_quota_us"))
		p, err2 := readInt(filepath.Join(dir, "cpu.cfs_period_us"))
		if err1 != nil || err2 != nil || q < 0 || p <= 0 {
			return Level{}, false
		}
		quota, period = q, p
	} else {
		raw, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
		if err != nil {
			return Level{}, false
		}
		f := strings.Fields(string(raw))
		if len(f) != 2 || f[0] == "max" {
			return Level{}, false
		}
		q, err1 := strconv.ParseInt(f[0], 10, 64)
		p, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || p <= 0 {
			return Level{}, false
		}
		quota, period = q, p
	}
	return Level{Dir: dir, Group: group, QuotaUS: quota, PeriodUS: period, BurstUS: readBurst(dir, version)}, true
}

// OrderLevels is the resolver's order for the agent's quota check (tie: Target.TieDir).
func OrderLevels(levels []Level, tie string) []Level { return orderLevelsTie(levels, tie) }

// Top is the mount point of the hierarchy holding dir.
func (r *Resolver) Top(dir string) string {
	if m, ok := MountOf(dir, r.mounts); ok {
		return m.Point
	}
	return dir
}

// orderLevels: the tightest first (the nearest of equals), then the rest nearest first.
func orderLevels(levels []Level) []Level { return orderLevelsTie(levels, "") }

// orderLevelsTie: orderLevels, but of the levels as tight as the tightest, the one in
// directory tie first where it is one of them.
func orderLevelsTie(levels []Level, tie string) []Level {
	if len(levels) == 0 {
		return nil
	}
	tightest := 0
	for i, l := range levels {
		if l.CPUs() < levels[tightest].CPUs() {
			tightest = i
		}
	}
	for i, l := range levels {
		if tie != "" && l.Dir == tie && l.QuotaUS*levels[tightest].PeriodUS == levels[tightest].QuotaUS*l.PeriodUS {
			tightest = i
		}
	}
	out := []Level{levels[tightest]}
	for i, l := range levels {
		if i != tightest {
			out = append(out, l)
		}
	}
	return out
}

func readBurst(dir string, version int) *int64 {
	name := "cpu.max.burst"
	if version == 1 {
		name = "cpu.cfs_burst_us"
	}
	v, err := readInt(filepath.Join(dir, name))
	if err != nil {
		return nil
	}
	return &v
}

func readInt(path string) (int64, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
}

func (r *Resolver) usageSource(dir string, version int, group string, stat []byte) Usage {
	if version == 2 || strings.Contains(string(stat), "usage_usec") {
		return Usage{"cpu.stat", filepath.Join(dir, "cpu.stat")}
	}
	if _, err := os.Stat(filepath.Join(dir, "cpuacct.usage")); err == nil {
		return Usage{"cpuacct", filepath.Join(dir, "cpuacct.usage")}
	}
	for _, m := range r.mounts {
		if m.FSType != "cgroup" || !m.has("cpuacct") {
			continue
		}
		twin := MapGroupPath(m, group)
		if twin == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(twin, "cpuacct.usage")); err != nil {
			continue
		}
		a, okA := subtreeProcs(twin)
		b, okB := subtreeProcs(dir)
		if okA && okB && sameSet(a, b) {
			return Usage{"cpuacct", filepath.Join(twin, "cpuacct.usage")}
		}
	}
	return Usage{"schedstat", dir}
}

func subtreeProcs(dir string) (map[string]bool, bool) {
	found := map[string]bool{}
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			raw, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if err != nil {
				return err
			}
			for _, p := range strings.Fields(string(raw)) {
				found[p] = true
			}
		}
		return nil
	})
	return found, err == nil
}

func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// LimitFiles are one group's quota files kept open: ReadLimit without the open and close of
// each file (the agent's quota check reads every watched group's chain once a second; the
// opens, path walks and closes were 40 % of its CPU for 100 pods).
type LimitFiles struct {
	dir, group           string
	version              int
	quota, period, burst *File // v2: quota is cpu.max, period nil
}

// OpenLimit opens the quota files of dir (an error: no quota file there, as ReadLimit's false).
func OpenLimit(dir string, version int, group string) (*LimitFiles, error) {
	l := &LimitFiles{dir: dir, group: group, version: version}
	quota, burst := "cpu.max", "cpu.max.burst"
	if version == 1 {
		quota, burst = "cpu.cfs_quota_us", "cpu.cfs_burst_us"
	}
	var err error
	if l.quota, err = OpenFile(filepath.Join(dir, quota), 64); err != nil {
		return nil, err
	}
	if version == 1 {
		if l.period, err = OpenFile(filepath.Join(dir, "cpu.cfs_period_us"), 64); err != nil {
			l.Close()
			return nil, err
		}
	}
	l.burst, _ = OpenFile(filepath.Join(dir, burst), 64) // nil: the kernel has no burst file
	return l, nil
}

// Read is ReadLimit(dir, version, group) from the open files; err: a file can no longer be
// read (the group was removed): open it again.
func (l *LimitFiles) Read() (Level, bool, error) {
	raw, err := l.quota.Read()
	if err != nil {
		return Level{}, false, err
	}
	var quota, period int64
	if l.version == 1 {
		q, err1 := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		p, err2 := readOpen(l.period)
		if err2 != nil {
			return Level{}, false, err2
		}
		if err1 != nil || q < 0 || p <= 0 {
			return Level{}, false, nil
		}
		quota, period = q, p
	} else {
		f := strings.Fields(string(raw))
		if len(f) != 2 || f[0] == "max" {
			return Level{}, false, nil
		}
		q, err1 := strconv.ParseInt(f[0], 10, 64)
		p, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || p <= 0 {
			return Level{}, false, nil
		}
		quota, period = q, p
	}
	level := Level{Dir: l.dir, Group: l.group, QuotaUS: quota, PeriodUS: period}
	if l.burst != nil {
		if b, err := readOpen(l.burst); err == nil {
			level.BurstUS = &b
		}
	}
	return level, true, nil
}

func readOpen(f *File) (int64, error) {
	raw, err := f.Read()
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
}

// Close the files.
func (l *LimitFiles) Close() {
	l.quota.Close()
	l.period.Close()
	l.burst.Close()
}
