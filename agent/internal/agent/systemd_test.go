package agent

import (
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/throttle-lab/throttle-lab/agent/internal/source"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The kubelet's own cgroup v2 layout under the systemd driver with containerd, as the Kube
// source wants it (a running pod from the API): the container's group is its
// cri-containerd-<id>.scope below the pod's slice, found by the pod's uid and the status's
// container id; the level that binds (the pod's quota, then the container's tighter one) is
// the one the timeline's first counters and metadata name, and /metrics has each group's own.

const (
	sdUID = "0b3f9d3c-1d0e-4a9a-9f00-aabbccddeeff"
	sdCID = "6f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff0"
)

func runningPod(uid, containerID string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: types.UID(uid)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
			Name: "app", ContainerID: "containerd://" + containerID,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
	}
}

func (l *loop) pressure(dir string, someUS int64) {
	text := fmt.Sprintf("some avg10=0.00 avg60=0.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=%d\n", someUS, someUS/2)
	must(l.t, os.WriteFile(filepath.Join(dir, "cpu.pressure"), []byte(text), 0o644))
}

func (l *loop) metricLines(labels string) []string {
	reg := prometheus.NewRegistry()
	reg.MustRegister(l.a)
	rec := httptest.NewRecorder()
	l.a.Handler(reg).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.Contains(line, labels) && !strings.Contains(line, "_bucket") {
			out = append(out, line)
		}
	}
	return out
}

func hasLine(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}

func TestTheKubeletsSystemdLayoutOnV2(t *testing.T) {
	l := newLoop(t, Config{IdleInterval: 100 * time.Millisecond, Hold: 50 * time.Millisecond}, 1<<30)
	u := strings.ReplaceAll(sdUID, "-", "_")
	podGroup := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + u + ".slice"
	ctrGroup := podGroup + "/cri-containerd-" + sdCID + ".scope"
	l.group("kubepods.slice", 0)
	l.group("kubepods.slice/kubepods-burstable.slice", 0)
	for _, g := range []string{"kubepods.slice", "kubepods.slice/kubepods-burstable.slice"} {
		must(t, os.WriteFile(filepath.Join(l.cg, g, "cpu.max"), []byte("max 100000\n"), 0o644))
	}
	pod := l.group(podGroup, 20000)
	l.group(podGroup+"/cri-containerd-a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1.scope", 2000) // the sandbox
	ctr := l.group(ctrGroup, 0)
	must(t, os.WriteFile(filepath.Join(ctr, "cpu.max"), []byte("max 100000\n"), 0o644))
	l.pressure(pod, 0)
	l.pressure(ctr, 0)

	l.watch(source.PodWants(runningPod(sdUID, sdCID))...)
	l.run(1)
	started := fmt.Sprintf("%g", float64(l.mono)/1e9) // the tick that began watching them
	if len(l.a.unresolved) != 0 || len(l.a.watched) != 2 {
		t.Fatalf("the pod and its container are watched: unresolved %v", l.a.unresolved)
	}
	l.stat(ctr, 150000, 0, 0, 0)
	l.stat(pod, 150000, 10, 8, 640000)
	l.pressure(ctr, 90000)
	l.run(5)

	ctrMeta := l.metas("shop/web/app")
	if len(ctrMeta) != 1 || ctrMeta[0].Cgroup["path"] != ctr || ctrMeta[0].Cgroup["group"] != ctrGroup ||
		ctrMeta[0].Cgroup["quota_group"] != podGroup || ctrMeta[0].Cgroup["cpus"] != 0.2 ||
		ctrMeta[0].Cgroup["pressure"] != true || len(ctrMeta[0].Cgroup["levels"].([]any)) != 1 {
		t.Fatalf("the container's scope, with the pod's slice as the quota that binds: %v", ctrMeta[0].Cgroup)
	}
	if m := l.metas("shop/web"); len(m) != 1 || m[0].Cgroup["path"] != pod || m[0].Cgroup["quota_group"] != podGroup {
		t.Fatalf("the pod's own timeline is its slice: %v", m[0].Cgroup)
	}
	rows := l.rows("shop/web/app")
	last := rows[len(rows)-1]
	if want := []int64{150000_000, 10, 8, 640000_000, 90000_000, 45000_000}; fmt.Sprint(last[1:]) != fmt.Sprint(want) {
		t.Fatalf("the container's row: its usage, the pod's counters, its PSI: %v, want %v", last[1:], want)
	}
	podLabels := `container="",level="pod",namespace="shop",pod="web"`
	ctrLabels := `container="app",level="container",namespace="shop",pod="web"`
	pm, cm := l.metricLines(podLabels), l.metricLines(ctrLabels)
	for _, want := range []string{
		"throttle_lab_cpu_cfs_throttled_periods_total{" + podLabels + "} 8",
		"throttle_lab_cpu_cfs_throttled_seconds_total{" + podLabels + "} 0.64",
		"throttle_lab_cpu_cfs_quota_seconds{" + podLabels + "} 0.02",
		"throttle_lab_cpu_counters_start_time_seconds{" + podLabels + "} " + started,
	} {
		if !hasLine(pm, want) {
			t.Fatalf("the pod's slice: %q not in %v", want, pm)
		}
	}
	for _, want := range []string{
		"throttle_lab_cpu_usage_seconds_total{" + ctrLabels + "} 0.15",
		"throttle_lab_cpu_cfs_throttled_periods_total{" + ctrLabels + "} 0",
		"throttle_lab_cpu_pressure_waiting_seconds_total{" + ctrLabels + "} 0.09",
	} {
		if !hasLine(cm, want) {
			t.Fatalf("the container's scope: %q not in %v", want, cm)
		}
	}
	for _, line := range cm {
		if strings.HasPrefix(line, "throttle_lab_cpu_cfs_quota_seconds") {
			t.Fatalf("the container's own cpu.max is max: no quota gauge, got %q", line)
		}
	}

	// the container's quota set tighter than the pod's: it binds, in a new segment
	must(t, os.WriteFile(filepath.Join(ctr, "cpu.max"), []byte("10000 100000\n"), 0o644))
	l.run(20) // past CheckEvery
	l.stat(ctr, 170000, 4, 3, 210000)
	l.run(5)
	ctrMeta = l.metas("shop/web/app")
	var now map[string]any
	for _, m := range ctrMeta {
		if m.StopReason == nil {
			now = m.Cgroup
		}
	}
	levels := now["levels"].([]any)
	if len(ctrMeta) != 2 || now["quota_group"] != ctrGroup || now["cpus"] != 0.1 || len(levels) != 2 ||
		levels[1].(map[string]any)["group"] != podGroup {
		t.Fatalf("the container's scope binds, the pod's slice is the next level: %v", now)
	}
	rows = l.rows("shop/web/app")
	last = rows[len(rows)-1]
	if want := []int64{170000_000, 4, 3, 210000_000, 90000_000, 45000_000, 10, 8, 640000_000}; fmt.Sprint(last[1:]) != fmt.Sprint(want) {
		t.Fatalf("the container's counters first, the pod's as level 1: %v, want %v", last[1:], want)
	}
	if cm := l.metricLines(ctrLabels); !hasLine(cm, "throttle_lab_cpu_cfs_quota_seconds{"+ctrLabels+"} 0.01") {
		t.Fatalf("the container's own quota: %v", cm)
	}
	// a new segment, not a new run of the counters: the same start
	start := "throttle_lab_cpu_counters_start_time_seconds{" + ctrLabels + "} "
	if cm := l.metricLines(ctrLabels); !hasLine(cm, start+started) {
		t.Fatalf("the container's counters still count since %s: %v", started, cm)
	}
	// watched anew (gone from the source, then back): a new run, a later start
	l.watch()
	l.run(1)
	if cm := l.metricLines(ctrLabels); len(cm) != 0 {
		t.Fatalf("no longer watched: its series end, got %v", cm)
	}
	l.watch(source.PodWants(runningPod(sdUID, sdCID))...)
	l.run(1)
	again := fmt.Sprintf("%g", float64(l.mono)/1e9)
	if cm := l.metricLines(ctrLabels); again == started || !hasLine(cm, start+again) {
		t.Fatalf("watched again at %s (first at %s): %v", again, started, cm)
	}
}
