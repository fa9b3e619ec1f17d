package source

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func pod(name, uid string, running bool, containers ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "throttle-lab",
		UID: types.UID(uid), Labels: map[string]string{"throttle-lab/record": "true"}},
		Spec: corev1.PodSpec{NodeName: "node-a"}}
	if running {
		p.Status.Phase = corev1.PodRunning
	}
	for i, c := range containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c, ContainerID: "containerd://" + string(rune('a'+i)) + "0123456789abcdef",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	}
	return p
}

func TestPodWants(t *testing.T) {
	got := PodWants(pod("limited", "1111-22", true, "service"))
	if len(got) != 2 || got[0].Key != "throttle-lab/limited" || got[0].Container != "" ||
		got[1].Key != "throttle-lab/limited/service" || got[1].ContainerID != "a0123456789abcdef" ||
		got[1].PodUID != "1111-22" {
		t.Fatalf("%+v", got)
	}
	if PodWants(pod("pending", "x", false, "service")) != nil {
		t.Fatal("a pod that is not running has no groups to watch")
	}
}

// A pod-level CPU limit (spec.resources, KEP-2837) binds a container without a limit of its
// own or with one equal to it; a tighter container limit binds instead.
func TestPodLevelBindsTheContainer(t *testing.T) {
	p := pod("podlevel", "u-2", true, "service")
	if PodWants(p)[1].PodLevel {
		t.Fatal("no pod-level limit: the container's")
	}
	p.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("300m")}}
	p.Spec.Containers = []corev1.Container{{Name: "service"}}
	if w := PodWants(p); !w[1].PodLevel || w[0].PodLevel {
		t.Fatalf("the pod level binds the container: %+v", w)
	}
	for own, binds := range map[string]bool{"0.3": true, "200m": false} {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(own)}
		if PodLevelBinds(p, "service") != binds {
			t.Fatalf("own limit %s: pod level binds %v", own, !binds)
		}
	}
}

// The informer lists and watches with the node's field selector and the label selector, and
// every add, change and delete reaches the agent as the whole set.
func TestKubeWatchesThisNodesLabelledPods(t *testing.T) {
	client := fake.NewSimpleClientset(pod("limited", "u1", true, "service"))
	var mu sync.Mutex
	var restrictions []k8stesting.ListRestrictions
	client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		restrictions = append(restrictions, a.(k8stesting.ListAction).GetListRestrictions())
		mu.Unlock()
		return false, nil, nil
	})
	updates := make(chan []Want, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Kube{Client: client, Node: "node-a", Selector: "throttle-lab/record=true"}.Run(ctx,
			func(w []Want) { updates <- w })
	}()
	next := func() []Want {
		select {
		case w := <-updates:
			return w
		case <-time.After(10 * time.Second):
			t.Fatal("no update from the pod watch")
			return nil
		}
	}
	first := next()
	if len(first) != 2 || first[1].Container != "service" {
		t.Fatalf("first set %+v", first)
	}
	mu.Lock()
	r := restrictions[0]
	mu.Unlock()
	if r.Fields.String() != "spec.nodeName=node-a" || r.Labels.String() != "throttle-lab/record=true" {
		t.Fatalf("list restrictions fields=%q labels=%q", r.Fields, r.Labels)
	}
	pods := client.CoreV1().Pods("throttle-lab")
	if _, err := pods.Create(ctx, pod("limitless", "u2", true, "service"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for w := next(); len(w) != 4; w = next() {
	}
	if err := pods.Delete(ctx, "limited", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var last []Want
	for last = next(); len(last) != 2; last = next() {
	}
	if last[0].Pod != "limitless" {
		t.Fatalf("after the delete %+v", last)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestStaticParse(t *testing.T) {
	w, err := ParseStatic("# groups\nweb /sys/fs/cgroup/cpu/web\nworker pid:42 # a comment\n")
	if err != nil || len(w) != 2 || w[1].Spec != "pid:42" || w[0].Key != "web" {
		t.Fatalf("%+v %v", w, err)
	}
	for _, bad := range []string{"web", "a b c", "a/b /x", "w /x\nw /y"} {
		if _, err := ParseStatic(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}
