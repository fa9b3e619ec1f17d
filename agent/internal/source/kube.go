package source

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Kube watches the pods of one node (fieldSelector spec.nodeName=Node) that carry the label
// selector, through a client-go informer (a list, then a watch; no polling), and wants the
// pod's group and each running container's group.
type Kube struct {
	Client   kubernetes.Interface
	Node     string
	Selector string        // a label selector, e.g. throttle-lab/record=true
	Resync   time.Duration // the informer's resync (0: none)
}

// PodWants is what one pod asks to watch: its group, and each container with an id.
func PodWants(pod *corev1.Pod) []Want {
	if pod.Status.Phase != corev1.PodRunning {
		return nil
	}
	ns, name, uid := pod.Namespace, pod.Name, string(pod.UID)
	out := []Want{{Key: ns + "/" + name, Namespace: ns, Pod: name, PodUID: uid}}
	statuses := append([]corev1.ContainerStatus{}, pod.Status.ContainerStatuses...)
	sort.Slice(statuses, func(i, j int) bool { return statuses[i].Name < statuses[j].Name })
	for _, c := range statuses {
		if c.ContainerID == "" || c.State.Running == nil {
			continue
		}
		id := c.ContainerID
		if i := strings.Index(id, "://"); i >= 0 {
			id = id[i+3:]
		}
		out = append(out, Want{Key: ns + "/" + name + "/" + c.Name, Namespace: ns, Pod: name,
			Container: c.Name, PodUID: uid, ContainerID: id, PodLevel: PodLevelBinds(pod, c.Name)})
	}
	return out
}

// PodLevelBinds: whether the pod's pod-level CPU limit (spec.resources.limits.cpu, KEP-2837)
// binds the container: set, and the container has no cpu limit of its own or one equal to it
// (the API keeps a container's at or below the pod's). The kubelet writes the pod's limit on
// a container without one too: the two groups hold the same quota, the spec says whose it is.
func PodLevelBinds(pod *corev1.Pod, container string) bool {
	if pod.Spec.Resources == nil {
		return false
	}
	podCPU, ok := pod.Spec.Resources.Limits[corev1.ResourceCPU]
	if !ok {
		return false
	}
	for _, c := range pod.Spec.Containers {
		if c.Name != container {
			continue
		}
		if own, has := c.Resources.Limits[corev1.ResourceCPU]; has && own.MilliValue() < podCPU.MilliValue() {
			return false
		}
	}
	return true
}

// Run starts the informer and calls update with the whole set after every change.
func (k Kube) Run(ctx context.Context, update func([]Want)) error {
	if k.Node == "" {
		return fmt.Errorf("the node's name is needed (NODE_NAME from the downward API)")
	}
	factory := informers.NewSharedInformerFactoryWithOptions(k.Client, k.Resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", k.Node).String()
			o.LabelSelector = k.Selector
		}))
	informer := factory.Core().V1().Pods().Informer()
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    poke,
		UpdateFunc: func(_, n any) { poke(n) },
		DeleteFunc: poke,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return fmt.Errorf("the pod watch did not sync (API server unreachable or not allowed to list pods?)")
	}
	poke(nil)
	for {
		select {
		case <-ctx.Done():
			factory.Shutdown()
			return nil
		case <-changed:
			var wants []Want
			for _, obj := range informer.GetStore().List() {
				if pod, ok := obj.(*corev1.Pod); ok {
					wants = append(wants, PodWants(pod)...)
				}
			}
			sort.Slice(wants, func(i, j int) bool { return wants[i].Key < wants[j].Key })
			update(wants)
		}
	}
}
