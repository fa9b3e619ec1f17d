// Package cgroupfs finds a group's cpu controller files and the groups above it that hold a
// quota, with the same rules and names as the Python side (cpuquota/cgroupfs.py,
// client/run/cgroup_target.py, client/run/cgroup_lookup.py), and reads their counters.
package cgroupfs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Mount is one cgroup line of /proc/self/mountinfo.
type Mount struct {
	Root         string // the hierarchy's directory mounted here
	Point        string // where it is mounted
	FSType       string // "cgroup" (v1) or "cgroup2"
	SuperOptions []string
}

// Version is 1 for a v1 hierarchy, 2 for the unified one.
func (m Mount) Version() int {
	if m.FSType == "cgroup" {
		return 1
	}
	return 2
}

func (m Mount) has(option string) bool {
	for _, o := range m.SuperOptions {
		if o == option {
			return true
		}
	}
	return false
}

// IsCPU: a v1 mount with the cpu controller, or the v2 unified one.
func (m Mount) IsCPU() bool { return m.FSType == "cgroup2" || (m.FSType == "cgroup" && m.has("cpu")) }

var octal = regexp.MustCompile(`\\([0-7]{3})`)

func unescape(field string) string {
	return octal.ReplaceAllStringFunc(field, func(s string) string {
		n, _ := strconv.ParseUint(s[1:], 8, 8)
		return string(rune(n))
	})
}

// ParseMountinfo returns the cgroup mounts of a mountinfo text.
func ParseMountinfo(text string) []Mount {
	var out []Mount
	for _, line := range strings.Split(text, "\n") {
		left, right, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		fields, tail := strings.Fields(left), strings.Fields(right)
		if len(fields) < 5 || len(tail) < 3 || (tail[0] != "cgroup" && tail[0] != "cgroup2") {
			continue
		}
		out = append(out, Mount{Root: unescape(fields[3]), Point: unescape(fields[4]),
			FSType: tail[0], SuperOptions: strings.Split(tail[2], ",")})
	}
	return out
}

// CPUMounts: v1 cpu mounts first, then cgroup2 (a host with both has the controller on v1).
func CPUMounts(mounts []Mount) []Mount {
	var v1, v2 []Mount
	for _, m := range mounts {
		if !m.IsCPU() {
			continue
		}
		if m.FSType == "cgroup" {
			v1 = append(v1, m)
		} else {
			v2 = append(v2, m)
		}
	}
	return append(v1, v2...)
}

// MapGroupPath is where a group's files are: the mount point plus the group's path relative
// to the mount's root; "" when the group is not below the mount's root.
func MapGroupPath(m Mount, group string) string {
	root := strings.TrimRight(m.Root, "/")
	if group != root && !strings.HasPrefix(group, root+"/") {
		return ""
	}
	rest := strings.Trim(group[len(root):], "/")
	point := strings.TrimRight(m.Point, "/")
	if rest != "" {
		return point + "/" + rest
	}
	if point == "" {
		return "/"
	}
	return point
}

// MountOf is the deepest cgroup mount holding the real path.
func MountOf(real string, mounts []Mount) (Mount, bool) {
	var best Mount
	found := false
	for _, m := range mounts {
		point := strings.TrimRight(m.Point, "/")
		if point == "" {
			point = "/"
		}
		if real == point || strings.HasPrefix(real, strings.TrimRight(point, "/")+"/") {
			if !found || len(point) > len(best.Point) {
				best, found = m, true
			}
		}
	}
	return best, found
}

// ReadMounts reads proc/self/mountinfo.
func ReadMounts(proc string) ([]Mount, error) {
	raw, err := os.ReadFile(filepath.Join(proc, "self", "mountinfo"))
	if err != nil {
		return nil, err
	}
	return ParseMountinfo(string(raw)), nil
}
