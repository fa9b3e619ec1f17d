package cgroupfs

import (
	"os"
	"path/filepath"
	"testing"
)

func mkdirs(t *testing.T, root string, dirs ...string) {
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// The names client/run/cgroup_lookup.py finds, for both drivers and a kubelet cgroupRoot.
func TestFindPodDirectory(t *testing.T) {
	top := t.TempDir()
	uid := "0b3f9d3c-1d0e-4a9a-9f00-aabbccddeeff"
	id := "6f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff0"
	mkdirs(t, top,
		"kubepods/burstable/pod"+uid+"/"+id,
		"kubepods/burstable/pod"+uid+"/pause0000000000000000")
	got, err := FindPodDirectory(top, uid, id[:12])
	if err != nil || got != filepath.Join(top, "kubepods/burstable/pod"+uid+"/"+id) {
		t.Fatalf("cgroupfs: %q %v", got, err)
	}
	sys := t.TempDir()
	u := "0b3f9d3c_1d0e_4a9a_9f00_aabbccddeeff"
	mkdirs(t, sys,
		"throttle-lab.slice/kubepods.slice/kubepods-pod"+u+".slice/crio-conmon-"+id+".scope",
		"throttle-lab.slice/kubepods.slice/kubepods-pod"+u+".slice/crio-"+id+".scope")
	got, err = FindPodDirectory(sys, uid, id)
	if err != nil || filepath.Base(got) != "crio-"+id+".scope" {
		t.Fatalf("systemd: %q %v", got, err)
	}
	pod, _ := FindPodDirectory(sys, uid, "")
	if filepath.Base(pod) != "kubepods-pod"+u+".slice" {
		t.Fatalf("pod: %q", pod)
	}
	if _, err := FindPodDirectory(sys, uid, "ffffffffffff"); err == nil {
		t.Fatal("a missing container is an error when the pod is here")
	}
	if got, err := FindPodDirectory(sys, "11111111-2222-3333-4444-555555555555", ""); got != "" || err != nil {
		t.Fatalf("another pod: %q %v", got, err)
	}
}

func write(t *testing.T, path, text string) {
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The tightest quota first, then the others nearest first (cgroup_target._levels).
func TestQuotaLevelsOrder(t *testing.T) {
	top := t.TempDir()
	pod := filepath.Join(top, "kubepods", "pod1")
	ctr := filepath.Join(pod, "c1")
	mkdirs(t, top, "kubepods/pod1/c1")
	write(t, filepath.Join(top, "kubepods", "cpu.max"), "max 100000\n")
	write(t, filepath.Join(pod, "cpu.max"), "20000 100000\n")
	write(t, filepath.Join(ctr, "cpu.max"), "50000 100000\n")
	levels := orderLevels(QuotaLevels(ctr, top, 2, "/kubepods/pod1/c1"))
	if len(levels) != 2 || levels[0].Dir != pod || levels[1].Dir != ctr || levels[0].Group != "/kubepods/pod1" {
		t.Fatalf("%+v", levels)
	}
	if levels[0].CPUs() != 0.2 || levels[0].BurstUS != nil {
		t.Fatalf("%+v", levels[0])
	}
}

func TestParseCPUStat(t *testing.T) {
	v1, ok := ParseCPUStat([]byte("nr_periods 30\nnr_throttled 12\nthrottled_time 416442408\nnr_bursts 0\nburst_time 0\n"), 1)
	if !ok || v1.Periods != 30 || v1.Throttled != 12 || v1.ThrottledNS != 416442408 || v1.HasUsage {
		t.Fatalf("%+v", v1)
	}
	v2, ok := ParseCPUStat([]byte("usage_usec 5\nuser_usec 3\nsystem_usec 2\nnr_periods 4\nnr_throttled 1\nthrottled_usec 70000\n"), 2)
	if !ok || v2.ThrottledNS != 70000000 || v2.UsageNS != 5000 {
		t.Fatalf("%+v", v2)
	}
	if _, ok := ParseCPUStat([]byte("usage_usec 5\nuser_usec 3\nsystem_usec 2\n"), 2); ok {
		t.Fatal("no bandwidth counters without the cpu controller")
	}
	some, full, ok := ParsePressure([]byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=5\n"))
	if !ok || some != 1234000 || full != 5000 {
		t.Fatal(some, full, ok)
	}
}

func TestMountinfo(t *testing.T) {
	m := ParseMountinfo("32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n" +
		"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n" +
		"33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n")
	cpu := CPUMounts(m)
	if len(cpu) != 2 || cpu[0].Point != "/sys/fs/cgroup/cpu" || cpu[1].Version() != 2 {
		t.Fatalf("%+v", cpu)
	}
	if MapGroupPath(m[0], "/a/b") != "/sys/fs/cgroup/cpu/a/b" || MapGroupPath(Mount{Root: "/docker/x", Point: "/sys/fs/cgroup/cpu"}, "/other") != "" {
		t.Fatal("map")
	}
}

// The quota files kept open say what ReadLimit says, each time they are read again.
func TestLimitFilesReadAsReadLimit(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "cpu.cfs_quota_us"), "20000\n")
	write(t, filepath.Join(dir, "cpu.cfs_period_us"), "100000\n")
	write(t, filepath.Join(dir, "cpu.cfs_burst_us"), "0\n")
	files, err := OpenLimit(dir, 1, "/pod")
	if err != nil {
		t.Fatal(err)
	}
	defer files.Close()
	for _, quota := range []string{"20000", "50000", "-1", "30000"} {
		write(t, filepath.Join(dir, "cpu.cfs_quota_us"), quota+"\n")
		got, ok, err := files.Read()
		want, wantOK := ReadLimit(dir, 1, "/pod")
		if err != nil || ok != wantOK || (ok && (got.QuotaUS != want.QuotaUS || got.PeriodUS != want.PeriodUS ||
			*got.BurstUS != *want.BurstUS || got.Group != want.Group)) {
			t.Fatalf("quota %s: %+v %v %v, ReadLimit %+v %v", quota, got, ok, err, want, wantOK)
		}
	}
	write(t, filepath.Join(dir, "cpu.cfs_quota_us"), "") // a removed group's file reads empty
	if _, _, err := files.Read(); err == nil {
		t.Fatal("a file that can no longer be read is an error (the agent opens it again)")
	}
	if _, err := OpenLimit(t.TempDir(), 1, "/"); err == nil {
		t.Fatal("a directory without a quota file has no limit files")
	}
}

func TestLimitFilesReadCPUMax(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "cpu.max"), "max 100000\n")
	files, err := OpenLimit(dir, 2, "/pod")
	if err != nil {
		t.Fatal(err)
	}
	defer files.Close()
	if _, ok, err := files.Read(); ok || err != nil {
		t.Fatal("max: no quota")
	}
	write(t, filepath.Join(dir, "cpu.max"), "20000 50000\n")
	if l, ok, err := files.Read(); !ok || err != nil || l.QuotaUS != 20000 || l.PeriodUS != 50000 || l.BurstUS != nil {
		t.Fatalf("a quota written in place is read: %+v %v %v", l, ok, err)
	}
}

// The kubelet's own v2 layout under the systemd cgroup driver with containerd: a pod's slice
// by QoS class (Guaranteed directly under kubepods.slice), each container's
// cri-containerd-<id>.scope below it beside the sandbox's, the uid with '_' for '-'.
func TestFindPodDirectorySystemdContainerd(t *testing.T) {
	uid := "0b3f9d3c-1d0e-4a9a-9f00-aabbccddeeff"
	u := "0b3f9d3c_1d0e_4a9a_9f00_aabbccddeeff"
	id := "6f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff0"
	pause := "a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1"
	for _, pod := range []string{
		"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + u + ".slice",
		"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + u + ".slice",
		"kubepods.slice/kubepods-pod" + u + ".slice",
	} {
		top := t.TempDir()
		other := "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod11111111_2222_3333_4444_555555555555.slice"
		mkdirs(t, top, pod+"/cri-containerd-"+pause+".scope", pod+"/cri-containerd-"+id+".scope",
			other+"/cri-containerd-"+id[:60]+"ffff.scope", "system.slice/containerd.service")
		for _, asked := range []string{id, id[:12]} {
			got, err := FindPodDirectory(top, uid, asked)
			if err != nil || got != filepath.Join(top, pod, "cri-containerd-"+id+".scope") {
				t.Fatalf("%s, container %s: %q %v", pod, asked, got, err)
			}
		}
		if got, err := FindPodDirectory(top, uid, ""); err != nil || got != filepath.Join(top, pod) {
			t.Fatalf("%s: the pod's slice: %q %v", pod, got, err)
		}
		if _, err := FindPodDirectory(top, uid, "fedcba987654"); err == nil {
			t.Fatalf("%s: a container not in the pod's slice is an error", pod)
		}
	}
}

// A pod-level limit only (the kubelet's pod-level resources, or a pod whose containers have
// none): the pod's slice binds; a tighter container quota binds instead. The container's own
// "max" is no level.
func TestQuotaLevelsOfTheSystemdLayout(t *testing.T) {
	top := t.TempDir()
	pod := filepath.Join(top, "kubepods.slice", "kubepods-burstable.slice", "kubepods-burstable-podx.slice")
	ctr := filepath.Join(pod, "cri-containerd-abc.scope")
	mkdirs(t, top, "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podx.slice/cri-containerd-abc.scope")
	for _, d := range []string{filepath.Join(top, "kubepods.slice"), filepath.Dir(pod), ctr} {
		write(t, filepath.Join(d, "cpu.max"), "max 100000\n")
	}
	write(t, filepath.Join(pod, "cpu.max"), "20000 100000\n")
	group := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podx.slice/cri-containerd-abc.scope"
	levels := orderLevels(QuotaLevels(ctr, top, 2, group))
	if len(levels) != 1 || levels[0].Dir != pod || levels[0].Group != filepath.Dir(group) || levels[0].CPUs() != 0.2 {
		t.Fatalf("the pod's slice binds: %+v", levels)
	}
	write(t, filepath.Join(ctr, "cpu.max"), "10000 100000\n")
	levels = orderLevels(QuotaLevels(ctr, top, 2, group))
	if len(levels) != 2 || levels[0].Dir != ctr || levels[0].Group != group || levels[1].Dir != pod {
		t.Fatalf("the container's tighter quota binds, the pod's next: %+v", levels)
	}
}

// A pod-level limit the kubelet writes on the container's group too (KEP-2837, 1.37): both
// levels hold 0.3 CPU. Resolved as the pod's spec says (podLevel), the pod's group is named
// first; without it, the nearest (the container's).
func TestAPodLevelTieNamesThePodsGroup(t *testing.T) {
	root := t.TempDir()
	top, proc := filepath.Join(root, "cgroup"), filepath.Join(root, "proc")
	pod := "kubepods/burstable/pod0b3f9d3c-1d0e-4a9a-9f00-aabbccddeeff"
	ctr := pod + "/6f1e2d3c4b5a"
	mkdirs(t, top, ctr, "../proc/self")
	write(t, filepath.Join(proc, "self", "mountinfo"), "41 31 0:38 / "+top+" rw,relatime - cgroup2 cgroup2 rw\n")
	for _, d := range []string{pod, ctr} {
		write(t, filepath.Join(top, d, "cpu.max"), "30000 100000\n")
		write(t, filepath.Join(top, d, "cpu.stat"), "usage_usec 5\nuser_usec 3\nsystem_usec 2\nnr_periods 4\nnr_throttled 1\nthrottled_usec 70000\n")
	}
	r, err := NewResolver(proc)
	if err != nil {
		t.Fatal(err)
	}
	for podLevel, first := range map[bool]string{true: pod, false: ctr} {
		got, err := r.FromPod("k8s:ns/web/app", "0b3f9d3c-1d0e-4a9a-9f00-aabbccddeeff", "6f1e2d3c4b5a", podLevel)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Levels) != 2 || got.Levels[0].Dir != filepath.Join(top, first) || got.Metadata()["quota_group"] != "/"+first || got.StatDir() != filepath.Join(top, first) {
			t.Fatalf("podLevel %v: %s first, got %+v", podLevel, first, got.Levels)
		}
		again := OrderLevels(QuotaLevels(got.Dir, top, 2, got.Group), got.TieDir)
		if again[0].Dir != got.Levels[0].Dir {
			t.Fatalf("the quota check orders them as the resolver did: %+v", again)
		}
	}
}

// The agent's pod on a v2 node has a cgroup namespace of its own: the node's hierarchy,
// mounted in by hostPath, has the root "/../../../.." in its mountinfo. The groups are named
// as the node names them, from the hierarchy's root.
func TestGroupsInACgroupNamespaceAreNamedFromTheMount(t *testing.T) {
	root := t.TempDir()
	top, proc := filepath.Join(root, "cgroup"), filepath.Join(root, "proc")
	pod := "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b3f9d3c_1d0e_4a9a_9f00_aabbccddeeff.slice"
	ctr := pod + "/cri-containerd-6f1e2d3c4b5a.scope"
	mkdirs(t, top, ctr, "../proc/self")
	write(t, filepath.Join(proc, "self", "mountinfo"), "41 31 0:38 /../../../.. "+top+" ro,relatime - cgroup2 cgroup2 rw\n")
	write(t, filepath.Join(top, pod, "cpu.max"), "20000 100000\n")
	write(t, filepath.Join(top, ctr, "cpu.max"), "max 100000\n")
	for _, d := range []string{pod, ctr} {
		write(t, filepath.Join(top, d, "cpu.stat"), "usage_usec 5\nuser_usec 3\nsystem_usec 2\nnr_periods 4\nnr_throttled 1\nthrottled_usec 70000\n")
	}
	r, err := NewResolver(proc)
	if err != nil {
		t.Fatal(err)
	}
	byPod, err := r.FromPod("k8s:ns/web/app", "0b3f9d3c-1d0e-4a9a-9f00-aabbccddeeff", "6f1e2d3c4b5a", false)
	if err != nil {
		t.Fatal(err)
	}
	byDir, err := r.FromDirectory(filepath.Join(top, ctr), filepath.Join(top, ctr))
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range []Target{byPod, byDir} {
		if got.Group != "/"+ctr || len(got.Levels) != 1 || got.Levels[0].Group != "/"+pod || got.Metadata()["quota_group"] != "/"+pod {
			t.Fatalf("named from the mount: %q, levels %+v", got.Group, got.Levels)
		}
	}
	if HierarchyPath("/") != "/" || HierarchyPath("") != "/" || HierarchyPath("/docker/x") != "/docker/x" {
		t.Fatal("a path without '..' is itself")
	}
}
