package timeline

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
)

// ErrNoTimeline is returned when no segment of the key overlaps the window.
type ErrNoTimeline struct{ Key string }

func (e ErrNoTimeline) Error() string { return fmt.Sprintf("no timeline of %s in that window", e.Key) }

// Window is the part of a key's timeline between two wall-clock times (Unix ns; 0 and
// MaxInt64 for open ends), as one timeline: the header, the rows whose time falls in the
// window plus one on each side (so an interval that straddles an end is whole), and the
// metadata of the first segment used, with "samples" set. Consecutive segments of the same
// boot and layout (a new one starts at the size limit) are joined: their t_ns are moved onto
// the first one's zero (both are CLOCK_MONOTONIC). A segment of another boot or layout ends
// the join: the answer covers the latest run of joinable segments (Meta.Name says which).
func (st *Store) Window(key string, fromNS, toNS int64) ([]byte, Meta, error) {
	return st.WindowIn(st.ReadMetas(), key, fromNS, toNS)
}

// WindowIn is Window over metas read once (ReadMetas) for many keys.
func (st *Store) WindowIn(metas []Meta, key string, fromNS, toNS int64) ([]byte, Meta, error) {
	var segs []Meta
	for _, m := range metas {
		if m.Agent.Key == key {
			segs = append(segs, m)
		}
	}
	// keep the latest run of joinable segments that overlaps the window
	var run []Meta
	for _, m := range segs {
		if m.Clock.ZeroEpochNS > toNS {
			break
		}
		if len(run) > 0 && !joinable(run[0], m) {
			run = nil
		}
		run = append(run, m)
	}
	if len(run) == 0 {
		return nil, Meta{}, ErrNoTimeline{key}
	}
	first := run[0]
	header := ""
	var out bytes.Buffer
	var before []byte // the last row before the window
	var rows int64
	done := false
	for _, m := range run {
		if done {
			break
		}
		shift := m.Agent.ZeroMono - first.Agent.ZeroMono
		raw, err := os.ReadFile(filepath.Join(st.Dir, m.Name+".cgroup.csv"))
		if err != nil {
			continue
		}
		raw = raw[:bytes.LastIndexByte(raw, '\n')+1] // a row being written is not served
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		if !sc.Scan() {
			continue
		}
		if header == "" {
			header = sc.Text() + "\n"
			out.WriteString(header)
		} else if sc.Text()+"\n" != header {
			break
		}
		for sc.Scan() {
			line := sc.Bytes()
			comma := bytes.IndexByte(line, ',')
			if comma < 0 {
				continue
			}
			t, err := strconv.ParseInt(string(line[:comma]), 10, 64)
			if err != nil {
				continue
			}
			t += shift
			epoch := first.Clock.ZeroEpochNS + t
			row := append(strconv.AppendInt(nil, t, 10), line[comma:]...)
			row = append(row, '\n')
			switch {
			case epoch < fromNS:
				before = row
			case epoch <= toNS:
				if before != nil {
					out.Write(before)
					rows++
					before = nil
				}
				out.Write(row)
				rows++
			default:
				if before != nil { // a window between two samples: both of them
					out.Write(before)
					rows++
					before = nil
				}
				out.Write(row)
				rows++
				done = true
			}
			if done {
				break
			}
		}
	}
	if rows == 0 {
		return nil, Meta{}, ErrNoTimeline{key}
	}
	first.Samples = &rows
	return out.Bytes(), first, nil
}

func joinable(a, b Meta) bool {
	return a.Agent.BootID != "" && a.Agent.BootID == b.Agent.BootID && sameCgroup(a.Cgroup, b.Cgroup)
}

// ParseEpoch reads a window end: Unix seconds (with a fraction) or "" for open.
func ParseEpoch(text string, open int64) (int64, error) {
	if text == "" {
		return open, nil
	}
	v, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("%q is not a time in Unix seconds", text)
	}
	return int64(math.Round(v * 1e9)), nil
}
