// Package timeline writes a watched group's samples in exactly the format the Python side
// reads (client/data/timeline.py, client/data/timeline_meta.py): <name>.cgroup.csv, a header
// then one row per sample, and <name>.json, the group, its quota and the clock.
package timeline

import (
	"fmt"
	"strconv"
)

// Columns of client.data.timeline: TIMELINE_COLUMNS, PRESSURE_COLUMNS, level<k>_*.
var baseColumns = []string{"t_ns", "usage_ns", "nr_periods", "nr_throttled", "throttled_ns"}

// Header is timeline_columns(pressure, levels) joined with commas, newline-terminated.
func Header(pressure bool, levels int) string {
	h := ""
	for i, c := range baseColumns {
		if i > 0 {
			h += ","
		}
		h += c
	}
	if pressure {
		h += ",pressure_some_ns,pressure_full_ns"
	}
	for k := 1; k <= levels; k++ {
		h += fmt.Sprintf(",level%d_nr_periods,level%d_nr_throttled,level%d_throttled_ns", k, k, k)
	}
	return h + "\n"
}

// Counters of one quota level: nr_periods, nr_throttled, throttled ns.
type Counters struct{ Periods, Throttled, ThrottledNS int64 }

// Sample is one row: t_ns since the timeline's zero, the group's usage, the quota in force's
// counters, PSI totals (-1: none) and the other levels' counters.
type Sample struct {
	TNS     int64
	UsageNS int64
	First   Counters
	Some    int64
	Full    int64
	Others  []Counters
	WithPSI bool
}

// AppendRow appends timeline_row(sample, pressure) to buf.
func AppendRow(buf []byte, s *Sample) []byte {
	buf = strconv.AppendInt(buf, s.TNS, 10)
	for _, v := range [...]int64{s.UsageNS, s.First.Periods, s.First.Throttled, s.First.ThrottledNS} {
		buf = append(buf, ',')
		buf = strconv.AppendInt(buf, v, 10)
	}
	if s.WithPSI {
		for _, v := range [...]int64{s.Some, s.Full} {
			buf = append(buf, ',')
			if v >= 0 {
				buf = strconv.AppendInt(buf, v, 10)
			}
		}
	}
	for _, l := range s.Others {
		for _, v := range [...]int64{l.Periods, l.Throttled, l.ThrottledNS} {
			buf = append(buf, ',')
			buf = strconv.AppendInt(buf, v, 10)
		}
	}
	return append(buf, '\n')
}
