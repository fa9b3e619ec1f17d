package timeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Tool is the "tool" of the metadata the agent writes.
const Tool = "throttle-lab agent"

// Identity says which watched group a segment belongs to (the "agent" object of its .json;
// the Python reader ignores keys it does not know).
type Identity struct {
	Key       string `json:"key"` // namespace/pod[/container] or the static target's name
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	PodUID    string `json:"pod_uid,omitempty"`
	Node      string `json:"node,omitempty"` // the writing agent's node (Store.Node)
	BootID    string `json:"boot_id"`
	ZeroMono  int64  `json:"zero_monotonic_ns"`
}

// Meta is client.data.timeline_meta.TimelineMetadata's JSON plus the agent's identity.
type Meta struct {
	Name        string         `json:"name"`
	Clock       Clock          `json:"clock"`
	Cgroup      map[string]any `json:"cgroup"`
	Tool        string         `json:"tool"`
	Version     string         `json:"version"`
	Host        string         `json:"host"`
	HostCPUs    int            `json:"host_cpus,omitempty"` // the CPUs the node's groups may use
	StartedAt   string         `json:"started_at"`
	EndedAt     *string        `json:"ended_at"`
	IntervalS   float64        `json:"interval_s"`
	MaxSize     int64          `json:"max_size"`
	Samples     *int64         `json:"samples"`
	Interrupted bool           `json:"interrupted"`
	StopReason  *string        `json:"stop_reason"`
	Command     []string       `json:"command"`
	Agent       Identity       `json:"agent"`
}

// Clock is the metadata's clock object.
type Clock struct {
	ZeroEpochNS       int64  `json:"zero_epoch_ns"`
	ZeroUncertaintyNS int64  `json:"zero_uncertainty_ns"`
	Timeline          string `json:"timeline"`
	Unit              string `json:"unit"`
}

// Layout is what a row holds: PSI columns or not, how many levels beyond the first.
type Layout struct {
	Pressure bool
	Levels   int
}

// Segment is one open <name>.cgroup.csv being appended to.
type Segment struct {
	Meta    Meta
	Layout  Layout
	dir     string
	file    *os.File
	buf     []byte
	written int64
	samples int64
}

// CSVPath and MetaPath of the segment.
func (s *Segment) CSVPath() string  { return filepath.Join(s.dir, s.Meta.Name+".cgroup.csv") }
func (s *Segment) MetaPath() string { return filepath.Join(s.dir, s.Meta.Name+".json") }

// Written is the file's size including what is buffered.
func (s *Segment) Written() int64 { return s.written + int64(len(s.buf)) }

// Append one row (buffered until Flush).
func (s *Segment) Append(sample *Sample) {
	s.buf = AppendRow(s.buf, sample)
	s.samples++
}

// Flush the buffered rows to the file (whole rows only: a reader never sees half a row
// unless the write itself is cut by a kill, and a cut last row is dropped by the reader).
func (s *Segment) Flush() error {
	if len(s.buf) == 0 {
		return nil
	}
	n, err := s.file.Write(s.buf)
	s.written += int64(n)
	s.buf = s.buf[:0]
	return err
}

// Close flushes, closes, and writes the final metadata.
func (s *Segment) Close(reason string, interrupted bool) error {
	err := s.Flush()
	s.file.Close()
	now := time.Now().UTC().Format(time.RFC3339Nano)
	s.Meta.EndedAt, s.Meta.StopReason, s.Meta.Interrupted = &now, &reason, interrupted
	n := s.samples
	s.Meta.Samples = &n
	if werr := writeMeta(s.MetaPath(), &s.Meta); err == nil {
		err = werr
	}
	return err
}

func writeMeta(path string, m *Meta) error {
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(raw, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Store is the directory of timelines: it opens (or resumes) segments, bounds them by size
// and age, and answers window queries.
type Store struct {
	Dir       string
	MaxSize   int64         // one segment's size limit (a new segment starts beyond it)
	MaxTotal  int64         // all segments together (the oldest closed ones go first)
	MaxAge    time.Duration // a closed segment older than this goes
	Host      string
	HostCPUs  int // the node's CPUs: the largest limit worth trying there (0: not known)
	Version   string
	IntervalS float64
	Command   []string
	// Node names the agent's node. Two nodes' agents may share one directory (nodes on one
	// machine, or a shared volume): each then lists, resumes, answers from and prunes only
	// the segments its own node's agent wrote, and its MaxTotal counts only those.
	Node   string
	mu     sync.Mutex
	open   map[string]bool // names of the segments being written
	parsed atomic.Int64    // metadata files read (a test: Open reads only its key's)
}

// NewStore makes the directory.
func NewStore(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &Store{Dir: dir, open: map[string]bool{}}, nil
}

// ReadMetas reads the metadata of every segment this node's agent wrote in the directory.
func (st *Store) ReadMetas() []Meta {
	var out []Meta
	for _, m := range st.readAllMetas() {
		if st.mine(m) {
			out = append(out, m)
		}
	}
	return out
}

// mine: the segment was written by this node's agent (any segment when the store has no node).
func (st *Store) mine(m Meta) bool { return st.Node == "" || m.Agent.Node == st.Node }

// readAllMetas reads every agent-written segment's metadata in the directory, any node's.
func (st *Store) readAllMetas() []Meta { return st.readMetasNamed("") }

// readMetasNamed reads the metadata of the agent-written segments whose names begin with
// prefix (any node's), oldest first: what Open reads for one key (its segments' names all
// begin with its base), so that opening n timelines reads n files' metadata, not n².
func (st *Store) readMetasNamed(prefix string) []Meta {
	var names []string
	if d, err := os.Open(st.Dir); err == nil {
		all, _ := d.Readdirnames(-1)
		d.Close()
		for _, n := range all {
			if strings.HasSuffix(n, ".json") && strings.HasPrefix(n, prefix) {
				names = append(names, n)
			}
		}
	}
	sort.Strings(names)
	var out []Meta
	for _, n := range names {
		raw, err := os.ReadFile(filepath.Join(st.Dir, n))
		if err != nil {
			continue
		}
		st.parsed.Add(1)
		var m Meta
		if json.Unmarshal(raw, &m) != nil || m.Tool != Tool || m.Agent.Key == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(st.Dir, m.Name+".cgroup.csv")); err != nil {
			continue
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Clock.ZeroEpochNS < out[j].Clock.ZeroEpochNS })
	return out
}

// Open starts a segment for the identity, or resumes the latest one of the same key when it
// is of this boot, has the same group, quota and layout, and has room: an agent restart then
// goes on in the same file on the same clock, losing no completed row.
func (st *Store) Open(id Identity, base string, cgroup map[string]any, layout Layout) (*Segment, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	id.BootID, id.Node = BootID(), st.Node
	metas := st.readMetasNamed(base + "_") // a key's segments are base_<its start>[-n]
	for i := len(metas) - 1; i >= 0; i-- {
		m := metas[i]
		if m.Agent.Key != id.Key || !st.mine(m) {
			continue
		}
		if seg, ok := st.resume(m, id, cgroup, layout); ok {
			st.open[seg.Meta.Name] = true
			return seg, nil
		}
		break // only the latest segment of a key is ever resumed
	}
	zero := Monotonic()
	epoch, spread := Anchor(zero)
	id.ZeroMono = zero
	stamp := fmt.Sprintf("%s_%s", base, time.Unix(0, epoch).UTC().Format("20060102-150405.000"))
	stamp = strings.ReplaceAll(stamp, ".", "")
	seg := &Segment{dir: st.Dir, Layout: layout, Meta: Meta{
		Name: stamp, Clock: Clock{epoch, spread, "CLOCK_MONOTONIC", "ns since zero"},
		Cgroup: cgroup, Tool: Tool, Version: st.Version, Host: st.Host, HostCPUs: st.HostCPUs,
		StartedAt: time.Unix(0, epoch).UTC().Format(time.RFC3339Nano), IntervalS: st.IntervalS,
		MaxSize: st.MaxSize, Command: st.Command, Agent: id}}
	// a key's next segment may start in the same millisecond as the one before it (a quota
	// changed right after a rotation): then the name gets -2, -3, ...
	var f *os.File
	for n := 1; ; n++ {
		if n > 1 {
			seg.Meta.Name = fmt.Sprintf("%s-%d", stamp, n)
		}
		var err error
		f, err = os.OpenFile(seg.CSVPath(), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || n >= 100 {
			return nil, err
		}
	}
	name := seg.Meta.Name
	header := Header(layout.Pressure, layout.Levels)
	if _, err := f.WriteString(header); err != nil {
		f.Close()
		return nil, err
	}
	seg.file, seg.written = f, int64(len(header))
	if err := writeMeta(seg.MetaPath(), &seg.Meta); err != nil {
		f.Close()
		return nil, err
	}
	st.open[name] = true
	return seg, nil
}

func (st *Store) resume(m Meta, id Identity, cgroup map[string]any, layout Layout) (*Segment, bool) {
	if m.Agent.BootID == "" || m.Agent.BootID != id.BootID || !sameCgroup(m.Cgroup, cgroup) {
		return nil, false
	}
	path := filepath.Join(st.Dir, m.Name+".cgroup.csv")
	raw, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(raw, []byte(Header(layout.Pressure, layout.Levels))) {
		return nil, false
	}
	keep := int64(bytes.LastIndexByte(raw, '\n') + 1) // a row cut off by a kill goes
	if st.full(keep) {                                // (not resumed: the agent would end it again at its next row)
		return nil, false
	}
	if err := os.Truncate(path, keep); err != nil {
		return nil, false
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, false
	}
	rows := int64(bytes.Count(raw[:keep], []byte("\n")) - 1)
	m.EndedAt, m.StopReason, m.Samples, m.Interrupted = nil, nil, nil, false
	m.Command, m.IntervalS, m.MaxSize, m.HostCPUs = st.Command, st.IntervalS, st.MaxSize, st.HostCPUs
	seg := &Segment{Meta: m, Layout: layout, dir: st.Dir, file: f, written: keep, samples: rows}
	if writeMeta(seg.MetaPath(), &seg.Meta) != nil {
		f.Close()
		return nil, false
	}
	return seg, true
}

// sameCgroup: the same group and quota levels (JSON round trip: numbers compare as float64).
func sameCgroup(a, b map[string]any) bool {
	norm := func(m map[string]any) any {
		raw, _ := json.Marshal(m)
		var out any
		json.Unmarshal(raw, &out)
		return out
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

// Full: the segment has reached its size limit (less a headroom for the rows a tick adds):
// the agent ends it and starts the next.
func (st *Store) Full(s *Segment) bool { return st.full(s.Written()) }

func (st *Store) full(written int64) bool { return written >= st.MaxSize-4096 }

// Closed marks a segment as no longer written (retention may remove it).
func (st *Store) Closed(name string) {
	st.mu.Lock()
	delete(st.open, name)
	st.mu.Unlock()
}

// Prune removes closed segments older than MaxAge, then the oldest closed ones while all
// segments together exceed MaxTotal. Another node's agent's segments are neither counted nor
// removed (it may be writing them). It returns the names removed.
func (st *Store) Prune(now time.Time) []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	type seg struct {
		name  string
		size  int64
		mtime time.Time
	}
	others := map[string]bool{}
	for _, m := range st.readAllMetas() {
		if !st.mine(m) {
			others[m.Name] = true
		}
	}
	paths, _ := filepath.Glob(filepath.Join(st.Dir, "*.cgroup.csv"))
	var segs []seg
	var total int64
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".cgroup.csv")
		if others[name] {
			continue
		}
		info, err := os.Stat(p)
		if err != nil {
			continue
		}
		segs = append(segs, seg{name, info.Size(), info.ModTime()})
		total += info.Size()
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].mtime.Before(segs[j].mtime) })
	var removed []string
	for _, s := range segs {
		if st.open[s.name] {
			continue
		}
		tooOld := st.MaxAge > 0 && now.Sub(s.mtime) > st.MaxAge
		tooMuch := st.MaxTotal > 0 && total > st.MaxTotal
		if !tooOld && !tooMuch {
			continue
		}
		os.Remove(filepath.Join(st.Dir, s.name+".cgroup.csv"))
		os.Remove(filepath.Join(st.Dir, s.name+".json"))
		total -= s.size
		removed = append(removed, s.name)
	}
	return removed
}
