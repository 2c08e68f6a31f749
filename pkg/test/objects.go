// Package test holds the fixtures unit tests build Kubernetes objects from,
// in Karpenter's shape: a function per kind taking options that are merged
// onto what every test of that kind needs. Here: Scheme (core and apps for
// fake clients and caches), ControllerRef and OwnedBy (controller owner
// references), ReplicaSet (controlled by its Deployment) and Pod
// (controlled by its ReplicaSet, gated if asked); and FailPatches, a fake
// client's interceptor that refuses the first patches.
package test

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

// Scheme knows the core and apps/v1 kinds, the ones the fixtures build.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	// Adding the built-in groups to a new scheme cannot fail.
	_ = corev1.AddToScheme(s)
	_ = appsv1.AddToScheme(s)
	return s
}

// ControllerRef is a controller owner reference to the object kind name
// (uid) of apiVersion.
func ControllerRef(apiVersion, kind, name string, uid types.UID) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}
}

// OwnedBy is the owner references of an object controlled by kind name
// (uid) of apiVersion.
func OwnedBy(apiVersion, kind, name string, uid types.UID) []metav1.OwnerReference {
	return []metav1.OwnerReference{ControllerRef(apiVersion, kind, name, uid)}
}

// ReplicaSet is a ReplicaSet with meta, controlled by owner when it is not
// nil.
func ReplicaSet(meta metav1.ObjectMeta, owner *appsv1.Deployment) *appsv1.ReplicaSet {
	rs := &appsv1.ReplicaSet{ObjectMeta: meta}
	if owner != nil {
		rs.OwnerReferences = OwnedBy("apps/v1", "Deployment", owner.Name, owner.UID)
	}
	return rs
}

// PodOptions say what Pod builds.
type PodOptions struct {
	metav1.ObjectMeta
	// Owner, when set, controls the pod (its owner references).
	Owner *appsv1.ReplicaSet
	// Gated holds the pod with the placement gate.
	Gated bool
}

// Pod is a pod with o's metadata, controlled by o.Owner and held by the
// placement gate when o.Gated.
func Pod(o PodOptions) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: o.ObjectMeta}
	if o.Owner != nil {
		p.OwnerReferences = OwnedBy("apps/v1", "ReplicaSet", o.Owner.Name, o.Owner.UID)
	}
	if o.Gated {
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: annotations.PlacementGate}}
	}
	return p
}
