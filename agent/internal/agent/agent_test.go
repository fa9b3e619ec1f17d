package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/throttle-lab/throttle-lab/agent/internal/cgroupfs"
	"github.com/throttle-lab/throttle-lab/agent/internal/source"
	"github.com/throttle-lab/throttle-lab/agent/internal/timeline"
)

// The loop on a fake cgroup v2 tree (a temporary directory named as a cgroup2 mount by a fake
// proc/self/mountinfo) and a fake monotonic clock: each Tick is one round at a time the test
// chooses, and the rows are what the fake cpu.stat said.

type loop struct {
	t     *testing.T
	cg    string // the fake hierarchy's top
	dir   string // the timelines
	a     *Agent
	mono  int64
	tick  int64
	reads int // cpu.stat contents the test wrote (each a distinct reading)
}

func newLoop(t *testing.T, cfg Config, maxSize int64) *loop {
	root := t.TempDir()
	l := &loop{t: t, cg: filepath.Join(root, "cgroup"), dir: filepath.Join(root, "timelines"),
		mono: timeline.Monotonic()}
	must(t, os.MkdirAll(filepath.Join(root, "proc", "self"), 0o755))
	must(t, os.MkdirAll(l.cg, 0o755))
	must(t, os.WriteFile(filepath.Join(root, "proc", "self", "mountinfo"),
		[]byte("30 25 0:26 / "+l.cg+" rw,relatime shared:4 - cgroup2 cgroup2 rw\n"), 0o644))
	resolver, err := cgroupfs.NewResolver(filepath.Join(root, "proc"))
	must(t, err)
	store, err := timeline.NewStore(l.dir)
	must(t, err)
	store.MaxSize, store.MaxTotal, store.MaxAge = maxSize, 1<<40, time.Hour
	if cfg.Interval == 0 {
		cfg.Interval = 10 * time.Millisecond
	}
	cfg.FlushEvery, cfg.CheckEvery, cfg.PruneEvery = time.Hour, time.Second, time.Hour
	l.a = New(cfg, resolver, store)
	l.a.clock = func() int64 { return l.mono }
	return l
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// group makes a v2 group with a quota (µs per 100 ms) and idle counters.
func (l *loop) group(name string, quotaUS int) string {
	dir := filepath.Join(l.cg, name)
	must(l.t, os.MkdirAll(dir, 0o755))
	must(l.t, os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(fmt.Sprintf("%d 100000\n", quotaUS)), 0o644))
	l.stat(dir, 0, 0, 0, 0)
	return dir
}

func (l *loop) stat(dir string, usageUS, periods, throttled, throttledUS int64) {
	l.reads++
	text := fmt.Sprintf("usage_usec %d\nuser_usec %d\nsystem_usec 0\nnr_periods %d\nnr_throttled %d\nthrottled_usec %d\n",
		usageUS, usageUS, periods, throttled, throttledUS)
	must(l.t, os.WriteFile(filepath.Join(dir, "cpu.stat"), []byte(text), 0o644))
}

func (l *loop) watch(wants ...source.Want) { l.a.Update(wants) }

// run n ticks of the Interval grid, as Run does (each after the one nextTick says).
func (l *loop) run(n int) {
	for i := 0; i < n; i++ {
		next := l.a.nextTick(l.tick)
		if l.tick == 0 {
			next = 1
		}
		l.mono += (next - l.tick) * l.a.cfg.Interval.Nanoseconds()
		l.tick = next
		l.a.Tick(time.Unix(0, l.mono), l.tick)
	}
}

// rows of every timeline of key, oldest segment first: each row's fields as numbers.
func (l *loop) rows(key string) [][]int64 {
	l.a.mu.Lock()
	for _, w := range l.a.watched {
		must(l.t, w.seg.Flush())
	}
	l.a.mu.Unlock()
	var out [][]int64
	for _, m := range l.a.store.ReadMetas() {
		if m.Agent.Key != key {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(l.dir, m.Name+".cgroup.csv"))
		must(l.t, err)
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n")[1:] {
			var row []int64
			for _, f := range strings.Split(line, ",") {
				v, err := strconv.ParseInt(f, 10, 64)
				must(l.t, err)
				row = append(row, v)
			}
			out = append(out, row)
		}
	}
	return out
}

func (l *loop) metas(key string) []timeline.Meta {
	var out []timeline.Meta
	for _, path := range must2(filepath.Glob(filepath.Join(l.dir, "*.json"))) {
		var m timeline.Meta
		must(l.t, json.Unmarshal(must2(os.ReadFile(path)), &m))
		if m.Agent.Key == key {
			out = append(out, m)
		}
	}
	return out
}

func must2[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestAThrottlingGroupIsReadEveryTickAndAnIdleOneAtIdleTicksOnly(t *testing.T) {
	l := newLoop(t, Config{IdleInterval: 100 * time.Millisecond, Hold: 50 * time.Millisecond}, 1<<30)
	dir := l.group("pod", 20000)
	l.watch(source.Want{Key: "pod", Pod: "pod", Spec: dir})
	l.run(1) // the first row, at the start, then every tick within the hold (50 ms: 4 more)
	l.run(5)
	if got := len(l.rows("pod")); got != 1+4 {
		t.Fatalf("a new group: a row at the start and one a tick within the hold, got %d", got)
	}
	l.run(3) // idle: the loop sleeps till the idle ticks (every 10th)
	if got := len(l.rows("pod")); got != 5+3 || l.tick%10 != 0 {
		t.Fatalf("an idle group: one row an idle tick, got %d rows at tick %d", got, l.tick)
	}
	l.stat(dir, 30000, 3, 1, 5000) // it throttles: seen at the next idle tick
	l.run(1)
	l.run(5)
	rows := l.rows("pod")
	if len(rows) != 8+1+4 {
		t.Fatalf("a throttle puts the group at the fast rate for the hold, got %d rows", len(rows))
	}
	last := rows[len(rows)-1]
	if want := []int64{30000_000, 3, 1, 5000_000}; fmt.Sprint(last[1:]) != fmt.Sprint(want) {
		t.Fatalf("a row is what cpu.stat said: %v, want usage, periods, throttled, ns %v", last[1:], want)
	}
	for i := 1; i < len(rows); i++ {
		if gap := rows[i][0] - rows[i-1][0]; gap < 10*ms || gap > 100*ms {
			t.Fatalf("rows %d and %d are %d ns apart: one tick (fast) to one idle interval", i-1, i, gap)
		}
	}
}

func TestThePodsTimelineGetsARowWheneverItsGroupIsReadForItsContainer(t *testing.T) {
	l := newLoop(t, Config{IdleInterval: 100 * time.Millisecond, Hold: 50 * time.Millisecond}, 1<<30)
	pod := l.group("pod", 20000)
	ctr := l.group("pod/c", 20000)
	l.watch(source.Want{Key: "pod", Pod: "pod", Spec: pod}, source.Want{Key: "pod-c", Pod: "pod", Container: "c", Spec: ctr})
	l.run(6 + 3)
	l.stat(ctr, 30000, 3, 1, 5000) // only the container throttles
	l.run(6)
	c, p := l.rows("pod-c"), l.rows("pod")
	if len(c) != len(p) {
		t.Fatalf("the pod's group is read every tick for its container: %d rows, the pod %d", len(c), len(p))
	}
	if len(c[0]) != 5+3 {
		t.Fatalf("the container's row holds the pod's level too: %v", c[0])
	}
}

func TestAGroupWhoseFilesCannotBeReadStopsItsTimeline(t *testing.T) {
	l := newLoop(t, Config{IdleInterval: 100 * time.Millisecond, Hold: 50 * time.Millisecond}, 1<<30)
	dir := l.group("pod", 20000)
	l.watch(source.Want{Key: "pod", Pod: "pod", Spec: dir})
	l.run(3)
	must(t, os.WriteFile(filepath.Join(dir, "cpu.stat"), nil, 0o644)) // a removed group's file reads empty
	l.run(1)
	metas := l.metas("pod")
	if len(metas) != 1 || metas[0].StopReason == nil || !strings.HasPrefix(*metas[0].StopReason, "stopped sampling "+dir) {
		t.Fatalf("the timeline ends, saying why: %+v", metas)
	}
	if got := l.a.unresolved["pod"]; got != "its group is gone" {
		t.Fatalf("the group is not watched: %q", got)
	}
	if len(l.rows("pod")) != 3 {
		t.Fatal("the rows read before are kept")
	}
}

func TestAResizedQuotaStartsANewSegmentAtTheNextCheck(t *testing.T) {
	l := newLoop(t, Config{IdleInterval: 100 * time.Millisecond, Hold: 50 * time.Millisecond}, 1<<30)
	dir := l.group("pod", 20000)
	l.watch(source.Want{Key: "pod", Pod: "pod", Spec: dir})
	l.run(10)
	must(t, os.WriteFile(filepath.Join(dir, "cpu.max"), []byte("50000 100000\n"), 0o644))
	l.run(20) // past CheckEvery (1 s of the fake clock)
	metas := l.metas("pod")
	if len(metas) != 2 {
		t.Fatalf("two segments, got %d", len(metas))
	}
	quotas := map[float64]bool{}
	for _, m := range metas {
		quotas[m.Cgroup["levels"].([]any)[0].(map[string]any)["quota_us"].(float64)] = true
		if m.StopReason != nil && *m.StopReason != "the group's quota changed" {
			t.Fatalf("the first segment says why it ended: %q", *m.StopReason)
		}
	}
	if !quotas[20000] || !quotas[50000] {
		t.Fatalf("each segment holds its own quota: %v", quotas)
	}
}

func TestATimelineAtItsSizeLimitGoesOnInANewSegment(t *testing.T) {
	l := newLoop(t, Config{}, 8192) // every group every tick
	dir := l.group("pod", 20000)
	l.watch(source.Want{Key: "pod", Pod: "pod", Spec: dir})
	l.run(400)
	metas := l.metas("pod")
	if len(metas) < 2 {
		t.Fatalf("more than one segment, got %d", len(metas))
	}
	if got := len(l.rows("pod")); got != 400+len(metas)-1 {
		t.Fatalf("a row a tick, and one more at each new segment's start: %d rows, %d segments", got, len(metas))
	}
	for _, m := range metas {
		info, err := os.Stat(filepath.Join(l.dir, m.Name+".cgroup.csv"))
		must(t, err)
		if info.Size() > 8192 {
			t.Fatalf("%s is %d bytes, beyond the limit", m.Name, info.Size())
		}
	}
}
