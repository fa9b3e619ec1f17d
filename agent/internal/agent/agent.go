// Package agent is the node recorder's one loop: every tick it reads each due group's
// counter files once (pread on files kept open), appends a row to its timeline, and keeps the
// state /metrics exports. Adaptive resolution (adaptive.go): a group is read every Interval
// while it throttles or has just become busy, and every IdleInterval otherwise. What to watch comes from a source.Source; what is
// watched is derived from the kernel's files (re-resolved once a second: a resized quota
// starts a new timeline segment, a removed group ends its timeline).
package agent

import (
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/throttle-lab/throttle-lab/agent/internal/cgroupfs"
	"github.com/throttle-lab/throttle-lab/agent/internal/metrics"
	"github.com/throttle-lab/throttle-lab/agent/internal/source"
	"github.com/throttle-lab/throttle-lab/agent/internal/timeline"
)

// Config of the loop.
type Config struct {
	Interval time.Duration // between two samples of a group at the fast rate (on average)
	// IdleInterval: a group that neither throttled nor became busy within Hold is read this
	// often (a multiple of Interval; 0: every group every Interval).
	IdleInterval time.Duration
	Hold         time.Duration
	FlushEvery   time.Duration // rows reach the files this often (a SIGKILL loses at most this)
	CheckEvery   time.Duration // the quota files and unresolved wants are looked at this often
	PruneEvery   time.Duration // retention runs this often
	Proc         string
	Log          io.Writer
}

type watched struct {
	want   source.Want
	target cgroupfs.Target
	own    *node
	levels []*node // Levels[0] (or the own group without any quota), then the others
	seg    *timeline.Segment
	sample timeline.Sample
	pace   pace // when it is read next (adaptive.go)
	// the tick its segment started in (its first row, read then: the tick adds none)
	startTick uint64
}

// Agent is the loop and its state.
type Agent struct {
	cfg      Config
	resolver *cgroupfs.Resolver
	store    *timeline.Store

	wantMu  sync.Mutex
	wants   []source.Want
	newWant bool
	wake    chan struct{} // a new set of wants: tick now (the loop may be asleep till an idle tick)

	clock func() int64 // monotonic ns (timeline.Monotonic; a test's fake clock)

	mu         sync.Mutex // the state below, shared with the metrics collector
	watched    map[string]*watched
	list       []*watched // the watched groups by key (rebuilt when listDirty)
	listDirty  bool
	fast       []*watched // the groups at the fast rate after the last tick (the rest wait for an idle tick)
	started    []*watched // the groups started since the last record (at the fast rate: their first hold)
	due        []*watched // this tick's groups with a row (reused)
	dueNodes   []*node    // this tick's directories to read (reused)
	nodes      map[string]*node
	limitFiles map[string]*cgroupfs.LimitFiles // the quota files of every group in a chain
	unresolved map[string]string               // key -> why it is not watched (yet)
	order      []*node                         // the nodes, each group after the groups above it
	nodesDirty bool
	ticks      uint64
	late       uint64
	reads      map[string]uint64 // rows written at each rate ("fast", "idle")
	lastCheck  time.Time
	now        time.Time // the wall-clock time of the tick being done (Tick's)
	lastFlush  time.Time
	lastPrune  time.Time
}

// New agent.
func New(cfg Config, resolver *cgroupfs.Resolver, store *timeline.Store) *Agent {
	return &Agent{cfg: cfg, resolver: resolver, store: store, clock: timeline.Monotonic, watched: map[string]*watched{},
		nodes: map[string]*node{}, limitFiles: map[string]*cgroupfs.LimitFiles{}, unresolved: map[string]string{}, wake: make(chan struct{}, 1),
		reads: map[string]uint64{}}
}

// Update is the source's callback: the whole set of groups to watch.
func (a *Agent) Update(wants []source.Want) {
	a.wantMu.Lock()
	a.wants, a.newWant = append([]source.Want(nil), wants...), true
	a.wantMu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *Agent) logf(format string, args ...any) {
	if a.cfg.Log != nil {
		fmt.Fprintf(a.cfg.Log, "throttle-agent: "+format+"\n", args...)
	}
}

// apply the source's set: start what is new or changed, stop what is gone.
func (a *Agent) apply(wants []source.Want) {
	seen := map[string]bool{}
	for _, want := range wants {
		seen[want.Key] = true
		if w, ok := a.watched[want.Key]; ok {
			if w.want == want {
				continue
			}
			a.stop(want.Key, w, "the pod's container changed")
		}
		if err := a.start(want); err != nil {
			if a.unresolved[want.Key] != err.Error() {
				a.logf("%s: not watched yet: %v", want.Key, err)
			}
			a.unresolved[want.Key] = err.Error()
			continue
		}
		delete(a.unresolved, want.Key)
	}
	for key, w := range a.watched {
		if !seen[key] {
			a.stop(key, w, "no longer wanted by the source (pod gone or unlabelled)")
		}
	}
	for key := range a.unresolved {
		if !seen[key] {
			delete(a.unresolved, key)
		}
	}
}

func (a *Agent) resolve(want source.Want) (cgroupfs.Target, error) {
	if want.PodUID == "" {
		return a.resolver.Resolve(want.Spec)
	}
	spec := "k8s:" + want.Namespace + "/" + want.Pod
	if want.Container != "" {
		spec += "/" + want.Container
	}
	return a.resolver.FromPod(spec, want.PodUID, want.ContainerID, want.PodLevel)
}

func (a *Agent) start(want source.Want) error {
	target, err := a.resolve(want)
	if err != nil {
		return err
	}
	w := &watched{want: want, target: target}
	release := func() {
		for _, n := range append([]*node{w.own}, w.levels...) {
			if n != nil {
				a.release(n)
			}
		}
	}
	if w.own, err = a.acquire(target.Dir, target.Version); err != nil {
		return err
	}
	if err := w.own.needUsage(target.Usage, a.cfg.Proc); err != nil {
		release()
		return err
	}
	if target.Pressure {
		w.own.needPressure()
	}
	a.nodesDirty = true
	dirs := []string{target.StatDir()}
	for _, l := range target.Levels[min(1, len(target.Levels)):] {
		dirs = append(dirs, l.Dir)
	}
	for _, dir := range dirs {
		n, err := a.acquire(dir, target.Version)
		if err != nil {
			release()
			return err
		}
		w.levels = append(w.levels, n)
	}
	if w.own.export == nil {
		level := "group"
		switch {
		case want.PodUID != "" && want.Container == "":
			level = "pod"
		case want.Container != "":
			level = "container"
		}
		w.own.export = &labels{want.Namespace, want.Pod, want.Container, level}
		w.own.waits = metrics.NewWaits()
		w.own.since = a.now
	}
	w.own.quota = nil
	w.own.noQuota = len(target.Levels) == 0 // none on it or above: nothing can throttle it
	if l, ok := cgroupfs.ReadLimit(target.Dir, target.Version, target.Group); ok {
		w.own.quota = &l
	}
	for i, n := range w.levels {
		period := int64(100e6)
		if len(target.Levels) > 0 {
			period = target.Levels[min(i, len(target.Levels)-1)].PeriodUS * 1000
		}
		n.settleNS = max(n.settleNS, 3*period+2*a.cfg.Interval.Nanoseconds())
	}
	for _, l := range target.Levels {
		if l.Dir == w.own.dir {
			w.own.settleNS = max(w.own.settleNS, 3*l.PeriodUS*1000+2*a.cfg.Interval.Nanoseconds())
		}
	}
	if err := a.openSegment(w); err != nil {
		release()
		return err
	}
	a.watched[want.Key] = w
	w.own.owners = append(w.own.owners, w)
	a.listDirty = true
	return nil
}

func (a *Agent) openSegment(w *watched) error {
	others := len(w.levels) - 1
	w.sample = timeline.Sample{Others: make([]timeline.Counters, others), WithPSI: w.target.Pressure}
	id := timeline.Identity{Key: w.want.Key, Namespace: w.want.Namespace, Pod: w.want.Pod,
		Container: w.want.Container, PodUID: w.want.PodUID}
	base := w.want.Pod
	if w.want.Namespace != "" {
		base = w.want.Namespace + "_" + base
	}
	if w.want.Container != "" {
		base += "_" + w.want.Container
	}
	seg, err := a.store.Open(id, base, w.target.Metadata(), timeline.Layout{Pressure: w.target.Pressure, Levels: others})
	if err != nil {
		return fmt.Errorf("cannot write its timeline: %w", err)
	}
	w.seg = seg
	for _, n := range append([]*node{w.own}, w.levels...) {
		n.read(true, a.ticks, a.clock)
	}
	a.row(w) // the first sample, at the start
	w.startTick = a.ticks
	w.pace.start(w, a.cfg.Hold.Nanoseconds(), a.cfg.IdleInterval > 0, a.clock())
	a.started = append(a.started, w)
	return nil
}

func (a *Agent) acquire(dir string, version int) (*node, error) {
	if n, ok := a.nodes[dir]; ok {
		n.refs++
		return n, nil
	}
	n, err := openNode(dir, version, a.clock())
	if err != nil {
		return nil, err
	}
	n.refs = 1
	a.nodes[dir] = n
	a.nodesDirty = true
	return n, nil
}

func (a *Agent) release(n *node) {
	n.refs--
	if n.refs <= 0 {
		n.close()
		delete(a.nodes, n.dir)
		a.nodesDirty = true
	}
}

func (a *Agent) stop(key string, w *watched, reason string) {
	if err := w.seg.Close(reason, false); err != nil {
		a.logf("%s: %v", w.seg.CSVPath(), err)
	}
	a.store.Closed(w.seg.Meta.Name)
	if w.own.export != nil && w.own.refs == 1 {
		w.own.export = nil // its series go with it
	}
	for i, o := range w.own.owners {
		if o == w {
			w.own.owners = append(w.own.owners[:i], w.own.owners[i+1:]...)
			break
		}
	}
	for _, n := range append([]*node{w.own}, w.levels...) {
		a.release(n)
	}
	delete(a.watched, key)
	a.listDirty = true
}

// rotate ends the segment and starts the next; the group's node (its wait histogram) stays.
func (a *Agent) rotate(key string, w *watched, reason string) {
	want, own := w.want, w.own
	own.refs++
	a.stop(key, w, reason)
	if err := a.start(want); err != nil {
		a.unresolved[key] = err.Error()
	}
	if own.refs == 1 {
		own.export = nil
	}
	a.release(own)
}

// checkQuotas re-reads the quota files of every watched group and of the groups above it
// (each directory once per round, from files kept open): a changed quota (an in-place resize)
// or set of levels ends the segment and starts a new one with the new metadata.
func (a *Agent) checkQuotas() {
	limits := map[string]*cgroupfs.Level{} // directory -> its quota (nil: none), this round
	var changed []string
	for key, w := range a.watched {
		levels := cgroupfs.OrderLevels(a.quotaChain(w.target, limits), w.target.TieDir)
		if !reflect.DeepEqual(levelsMeta(levels), levelsMeta(w.target.Levels)) {
			changed = append(changed, key)
		}
	}
	for dir, files := range a.limitFiles {
		if _, used := limits[dir]; !used {
			files.Close()
			delete(a.limitFiles, dir)
		}
	}
	for _, key := range changed {
		a.rotate(key, a.watched[key], "the group's quota changed")
	}
}

// quotaChain is cgroupfs.QuotaLevels with each directory's files read once per round.
func (a *Agent) quotaChain(t cgroupfs.Target, limits map[string]*cgroupfs.Level) []cgroupfs.Level {
	top := a.resolver.Top(t.Dir)
	var found []cgroupfs.Level
	here, group := t.Dir, t.Group
	for {
		l, ok := limits[here]
		if !ok {
			l = a.readLimit(here, t.Version, group)
			limits[here] = l
		}
		if l != nil {
			found = append(found, *l)
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

// readLimit is cgroupfs.ReadLimit from the directory's files kept open (nil: no quota); a
// directory without them, or whose files can no longer be read, is opened again next round.
func (a *Agent) readLimit(dir string, version int, group string) *cgroupfs.Level {
	files, ok := a.limitFiles[dir]
	if !ok {
		opened, err := cgroupfs.OpenLimit(dir, version, group)
		if err != nil {
			return nil
		}
		files = opened
		a.limitFiles[dir] = files
	}
	l, has, err := files.Read()
	if err != nil {
		files.Close()
		delete(a.limitFiles, dir)
		return nil
	}
	if !has {
		return nil
	}
	return &l
}

func levelsMeta(levels []cgroupfs.Level) []map[string]any {
	out := make([]map[string]any, 0, len(levels))
	for _, l := range levels {
		out = append(out, l.Metadata())
	}
	return out
}

func (a *Agent) closeAll(reason string, interrupted bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, w := range a.watched {
		if err := w.seg.Close(reason, interrupted); err != nil {
			a.logf("%s: %v", w.seg.CSVPath(), err)
		}
		a.store.Closed(w.seg.Meta.Name)
		delete(a.watched, key)
	}
	a.list, a.fast, a.started, a.listDirty = nil, nil, nil, false
	for _, n := range a.nodes {
		n.close()
	}
	a.nodes = map[string]*node{}
	for _, files := range a.limitFiles {
		files.Close()
	}
	a.limitFiles = map[string]*cgroupfs.LimitFiles{}
}

// orderNodes sorts the nodes so that a group comes after the groups above it, and links each
// to the nearest one above with a usage (the idle elision's parent).
func (a *Agent) orderNodes() {
	a.order = a.order[:0]
	for _, n := range a.nodes {
		a.order = append(a.order, n)
	}
	sort.Slice(a.order, func(i, j int) bool {
		if len(a.order[i].dir) != len(a.order[j].dir) {
			return len(a.order[i].dir) < len(a.order[j].dir)
		}
		return a.order[i].dir < a.order[j].dir
	})
	for i, n := range a.order {
		n.rank = i
		n.usageParent = nil
		for j := i - 1; j >= 0; j-- {
			p := a.order[j]
			if p.usageSrc != "" && p.version == n.version && strings.HasPrefix(n.dir, p.dir+"/") {
				n.usageParent = p
				break
			}
		}
	}
	a.nodesDirty = false
}

// Key of a timeline by namespace, pod and container (as the sources make them).
func Key(namespace, pod, container string) string {
	key := pod
	if namespace != "" {
		key = namespace + "/" + pod
	}
	if container != "" {
		key += "/" + container
	}
	return key
}
