package test

import (
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

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

// Deployment is a Deployment with meta.
func Deployment(meta metav1.ObjectMeta) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: meta}
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

// Workload is the owner chain most controller tests place pods in: the
// Deployment web/nginx (UID deploy-uid) with annotations, and its
// ReplicaSet web/nginx-abc (UID rs-uid).
func Workload(annotations map[string]string) (*appsv1.Deployment, *appsv1.ReplicaSet) {
	deploy := Deployment(metav1.ObjectMeta{Namespace: "web", Name: "nginx", UID: "deploy-uid", Annotations: annotations})
	return deploy, ReplicaSet(metav1.ObjectMeta{Namespace: "web", Name: "nginx-abc", UID: "rs-uid"}, deploy)
}
