// Package source says which groups the agent watches: the pods of its node from the
// Kubernetes API (Kube), or a list of groups from a file (Static).
package source

import "context"

// Want is one group to watch. For a pod: its UID (the pod's group) and, for a container, its
// runtime id (the container's group below the pod's). For a static target: Spec, a cgroup
// directory or pid:PID.
type Want struct {
	Key         string // unique: namespace/pod, namespace/pod/container or the static name
	Namespace   string
	Pod         string
	Container   string // "" for the pod's own group
	PodUID      string
	ContainerID string
	Spec        string
	// PodLevel: the pod's CPU limit is pod-level (spec.resources, KEP-2837) and binds this
	// container (it has none of its own, or one equal): on a tie the pod's group is named
	PodLevel bool
}

// Source calls update with the whole set of groups to watch, every time it changes, until
// ctx ends. update must not block for long (the agent takes the set at its next tick).
type Source interface {
	Run(ctx context.Context, update func([]Want)) error
}
