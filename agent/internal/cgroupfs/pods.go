package cgroupfs

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// KubepodsDepth is how deep below a hierarchy's root the kubepods group may be (kind, k3s, a
// kubelet --cgroup-root), as in client/run/cgroup_lookup.py.
const KubepodsDepth = 3

var monitors = []string{"crio-conmon-"} // a runtime's sibling group named by the same container id

// FindPodDirectory is the pod's group (or its container's, when containerID is not "") below
// the hierarchy top: "" when the pod has no group here; an error when the pod is here but the
// container is not. Both drivers: cgroupfs pod<uid>/<id>, systemd *-pod<uid_>.slice/*-<id>.scope.
func FindPodDirectory(top, uid, containerID string) (string, error) {
	for _, kubepods := range kubepodsRoots(top) {
		podDir := podBelow(kubepods, uid)
		if podDir == "" {
			continue
		}
		if containerID == "" {
			return podDir, nil
		}
		found := containerBelow(podDir, containerID)
		if found == "" {
			short := containerID
			if len(short) > 12 {
				short = short[:12]
			}
			return "", fmt.Errorf("container %s has no cgroup in %s (restarted or not started yet?)", short, podDir)
		}
		return found, nil
	}
	return "", nil
}

func kubepodsRoots(top string) []string {
	var roots []string
	level := []string{top}
	for i := 0; i < KubepodsDepth; i++ {
		var below []string
		for _, dir := range level {
			for _, child := range subdirectories(dir) {
				name := filepath.Base(child)
				if name == "kubepods" || name == "kubepods.slice" || strings.HasSuffix(name, "-kubepods.slice") {
					roots = append(roots, child)
				} else {
					below = append(below, child)
				}
			}
		}
		level = below
	}
	return roots
}

func podBelow(kubepods, uid string) string {
	names := map[string]bool{"pod" + uid: true, "pod" + strings.ReplaceAll(uid, "-", "_"): true}
	for _, qos := range append([]string{kubepods}, subdirectories(kubepods)...) {
		for _, child := range subdirectories(qos) {
			name := filepath.Base(child)
			if names[name] {
				return child
			}
			if strings.HasSuffix(name, ".slice") {
				stem := strings.TrimSuffix(name, ".slice")
				if names[stem[strings.LastIndex(stem, "-")+1:]] {
					return child
				}
			}
		}
	}
	return ""
}

func containerBelow(podDir, containerID string) string {
	for _, child := range subdirectories(podDir) {
		name := filepath.Base(child)
		skip := false
		for _, m := range monitors {
			skip = skip || strings.HasPrefix(name, m)
		}
		if skip {
			continue
		}
		stem := strings.TrimSuffix(name, ".scope")
		bare := stem[strings.LastIndex(stem, "-")+1:]
		if containerID == stem || containerID == bare || (len(containerID) >= 12 && strings.HasPrefix(bare, containerID)) {
			return child
		}
	}
	return ""
}

func subdirectories(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out
}
