package timeline

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func newStore(t *testing.T, dir string) *Store {
	st, err := NewStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	st.MaxSize, st.Version, st.IntervalS = 1<<20, "test", 0.01
	return st
}

var cg = map[string]any{"path": "/x", "quota_us": 20000, "levels": []any{}}

// A restart resumes the last segment of the key: the rows written stay, a cut row goes.
func TestResumeKeepsEveryWholeRow(t *testing.T) {
	dir := t.TempDir()
	st := newStore(t, dir)
	id := Identity{Key: "web", Pod: "web"}
	seg, err := st.Open(id, "web", cg, Layout{})
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 3; i++ {
		seg.Append(&Sample{TNS: i * 10, UsageNS: i})
	}
	seg.Flush()
	f, _ := os.OpenFile(seg.CSVPath(), os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString("40,4,0") // a row cut by a kill
	f.Close()
	again, err := newStore(t, dir).Open(id, "web", cg, Layout{})
	if err != nil {
		t.Fatal(err)
	}
	if again.Meta.Name != seg.Meta.Name || again.Meta.Agent.ZeroMono != seg.Meta.Agent.ZeroMono {
		t.Fatalf("not resumed: %s vs %s", again.Meta.Name, seg.Meta.Name)
	}
	again.Append(&Sample{TNS: 50, UsageNS: 5})
	again.Close("interrupted", true)
	raw, _ := os.ReadFile(again.CSVPath())
	want := "t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns\n10,1,0,0,0\n20,2,0,0,0\n30,3,0,0,0\n50,5,0,0,0\n"
	if string(raw) != want || *again.Meta.Samples != 4 {
		t.Fatalf("%q samples %d", raw, *again.Meta.Samples)
	}
	other := map[string]any{"path": "/x", "quota_us": 50000, "levels": []any{}}
	third, _ := newStore(t, dir).Open(id, "web", other, Layout{})
	if third.Meta.Name == seg.Meta.Name {
		t.Fatal("a changed quota must start a new segment")
	}
	third.Close("done", false)
}

func TestWindowJoinsSegmentsAndKeepsOneRowEachSide(t *testing.T) {
	dir := t.TempDir()
	st := newStore(t, dir)
	id := Identity{Key: "ns/pod", Namespace: "ns", Pod: "pod"}
	a, _ := st.Open(id, "ns_pod", cg, Layout{})
	for i := int64(0); i < 5; i++ {
		a.Append(&Sample{TNS: i * 1e9})
	}
	a.Close("size", false)
	st.Closed(a.Meta.Name)
	time.Sleep(20 * time.Millisecond)
	// a second segment: force a new one by taking the first one's room away
	st.MaxSize = 10
	b, _ := st.Open(id, "ns_pod", cg, Layout{})
	if b.Meta.Name == a.Meta.Name {
		t.Fatal("expected a new segment")
	}
	b.Append(&Sample{TNS: 0, UsageNS: 7})
	b.Close("done", false)
	f, _ := os.OpenFile(b.CSVPath(), os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString("99,1,2") // a row being written: not served
	f.Close()
	shift := b.Meta.Agent.ZeroMono - a.Meta.Agent.ZeroMono
	zero := a.Meta.Clock.ZeroEpochNS
	body, meta, err := st.Window("ns/pod", zero+1500e6, zero+2500e6)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	if len(lines) != 4 || lines[1] != "1000000000,0,0,0,0" || lines[3] != "3000000000,0,0,0,0" || *meta.Samples != 3 {
		t.Fatalf("%q", body)
	}
	all, _, _ := st.Window("ns/pod", 0, 1<<62)
	if !strings.HasSuffix(string(all), "\n"+itoa(shift)+",7,0,0,0\n") {
		t.Fatalf("the second segment's row is moved onto the first one's zero: %q (shift %d)", all, shift)
	}
	if _, _, err := st.Window("ns/other", 0, 1<<62); err == nil {
		t.Fatal("no timeline: an error")
	}
}

func itoa(v int64) string {
	return strings.TrimSpace(strings.Replace(string(AppendRow(nil, &Sample{TNS: v})), ",0,0,0,0", "", 1))
}

func TestPruneByAgeAndTotal(t *testing.T) {
	dir := t.TempDir()
	st := newStore(t, dir)
	var names []string
	for i := 0; i < 3; i++ {
		s, _ := st.Open(Identity{Key: string(rune('a' + i))}, string(rune('a'+i)), cg, Layout{})
		for j := 0; j < 100; j++ {
			s.Append(&Sample{TNS: int64(j)})
		}
		s.Close("done", false)
		st.Closed(s.Meta.Name)
		old := time.Now().Add(time.Duration(-3+i) * time.Hour)
		os.Chtimes(s.CSVPath(), old, old)
		names = append(names, s.Meta.Name)
	}
	st.MaxAge = 150 * time.Minute
	if got := st.Prune(time.Now()); len(got) != 1 || got[0] != names[0] {
		t.Fatalf("age: %v", got)
	}
	st.MaxTotal = 1500 // each file is ~1.1 kB
	if got := st.Prune(time.Now()); len(got) != 1 || got[0] != names[1] {
		t.Fatalf("total: %v", got)
	}
}

// Segments of one key started within the same millisecond get names of their own.
func TestSegmentsStartedInOneMillisecondDoNotCollide(t *testing.T) {
	st := newStore(t, t.TempDir())
	id := Identity{Key: "web", Pod: "web"}
	names := map[string]bool{}
	for quota := 10000; quota < 10010; quota++ { // a new quota each: never a resume
		seg, err := st.Open(id, "web", map[string]any{"path": "/x", "quota_us": quota,
			"levels": []any{}}, Layout{})
		if err != nil {
			t.Fatal(err)
		}
		if names[seg.Meta.Name] {
			t.Fatalf("%s twice", seg.Meta.Name)
		}
		names[seg.Meta.Name] = true
		seg.Close("the group's quota changed", false)
	}
}

// Two nodes' agents in one directory (nodes on one machine): each lists and resumes only its
// own node's segments, and its retention never removes the other's, open or closed.
func TestTwoNodesAgentsShareADirectoryWithoutTouchingEachOthersSegments(t *testing.T) {
	dir := t.TempDir()
	first, second := newStore(t, dir), newStore(t, dir)
	first.Node, second.Node = "node-1", "node-2"
	second.MaxTotal = 1 // every closed segment of its own is over the bound
	mine, err := first.Open(Identity{Key: "ns/a", Namespace: "ns", Pod: "a"}, "ns_a", cg, Layout{})
	if err != nil {
		t.Fatal(err)
	}
	mine.Append(&Sample{TNS: 10, UsageNS: 1})
	mine.Flush() // open, being written by node 1's agent
	closed, _ := first.Open(Identity{Key: "ns/c", Namespace: "ns", Pod: "c"}, "ns_c", cg, Layout{})
	closed.Close("pod gone", false)
	first.Closed(closed.Meta.Name)
	theirs, _ := second.Open(Identity{Key: "ns/b", Namespace: "ns", Pod: "b"}, "ns_b", cg, Layout{})
	theirs.Close("pod gone", false)
	second.Closed(theirs.Meta.Name)

	if removed := second.Prune(time.Now()); len(removed) != 1 || removed[0] != theirs.Meta.Name {
		t.Fatalf("node 2's agent removed %v, not only its own closed segment", removed)
	}
	for _, seg := range []*Segment{mine, closed} {
		if _, err := os.Stat(seg.CSVPath()); err != nil {
			t.Fatalf("node 1's segment %s removed by node 2's agent", seg.Meta.Name)
		}
	}
	var keys []string
	for _, m := range first.ReadMetas() {
		keys = append(keys, m.Agent.Key+"@"+m.Agent.Node)
	}
	if strings.Join(keys, " ") != "ns/a@node-1 ns/c@node-1" && strings.Join(keys, " ") != "ns/c@node-1 ns/a@node-1" {
		t.Fatalf("node 1's agent lists %v", keys)
	}
	if metas := second.ReadMetas(); len(metas) != 0 {
		t.Fatalf("node 2's agent lists node 1's segments: %v", metas)
	}
	// node 2's agent recording a pod of node 1's name starts its own segment, never resumes node 1's
	again, _ := second.Open(Identity{Key: "ns/a", Namespace: "ns", Pod: "a"}, "ns_a", cg, Layout{})
	if again.Meta.Name == mine.Meta.Name {
		t.Fatal("node 2's agent resumed node 1's segment")
	}
	again.Close("done", false)
	mine.Close("done", false)
}

// Every segment's metadata names the node's CPUs (the largest limit worth trying there), a
// resumed one too: an agent restarted on a resized node says its new count.
func TestSegmentsNameTheNodesCPUs(t *testing.T) {
	dir := t.TempDir()
	st := newStore(t, dir)
	st.HostCPUs = 4
	id := Identity{Key: "web", Pod: "web"}
	seg, err := st.Open(id, "web", cg, Layout{})
	if err != nil {
		t.Fatal(err)
	}
	seg.Append(&Sample{TNS: 10, UsageNS: 1})
	seg.Flush() // then killed: the next agent resumes it
	raw, err := os.ReadFile(seg.MetaPath())
	if err != nil || !strings.Contains(string(raw), `"host_cpus": 4`) {
		t.Fatalf("%s: %v", raw, err)
	}
	again := newStore(t, dir)
	again.HostCPUs = 8
	resumed, err := again.Open(id, "web", cg, Layout{})
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close("done", false)
	raw, _ = os.ReadFile(resumed.MetaPath())
	if resumed.Meta.Name != seg.Meta.Name || !strings.Contains(string(raw), `"host_cpus": 8`) {
		t.Fatalf("%s resumed as %s: %s", seg.Meta.Name, resumed.Meta.Name, raw)
	}
}

// Opening n timelines reads each one's own metadata, not every segment's each time (at 390
// pods a node, two timelines each, the agent took 14 s of CPU to start); the key's own
// latest segment is still the one resumed, beside keys whose names begin the same.
func TestOpenReadsOnlyItsKeysSegments(t *testing.T) {
	dir := t.TempDir()
	st := newStore(t, dir)
	const n = 60
	var names []string
	for i := 0; i < n; i++ {
		pod := fmt.Sprintf("pod%d", i)
		for _, c := range []string{"", "c"} {
			id, base := Identity{Key: "ns/" + pod, Namespace: "ns", Pod: pod}, "ns_"+pod
			if c != "" {
				id.Key, id.Container, base = id.Key+"/"+c, c, base+"_"+c
			}
			seg, err := st.Open(id, base, cg, Layout{})
			if err != nil {
				t.Fatal(err)
			}
			seg.Close("interrupted", true)
			st.Closed(seg.Meta.Name)
			names = append(names, seg.Meta.Name)
		}
	}
	// (reading every segment's each time, as before: 2n(2n-1)/2 = 7,140)
	if got := st.parsed.Load(); got > 2*n {
		t.Fatalf("opening %d timelines read %d metadata files (at most %d: each its own key's)",
			2*n, got, 2*n)
	}
	again := newStore(t, dir)
	seg, err := again.Open(Identity{Key: "ns/pod1", Namespace: "ns", Pod: "pod1"}, "ns_pod1", cg, Layout{})
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close("done", false)
	if seg.Meta.Name != names[2] {
		t.Fatalf("resumed %s, want pod1's own %s", seg.Meta.Name, names[2])
	}
	// ns_pod1_ begins pod1's container's names too, not pod10's (ns_pod10_)
	if got := again.parsed.Load(); got != 2 {
		t.Fatalf("read %d metadata files for pod1, want 2 (its own, its container's)", got)
	}
}
