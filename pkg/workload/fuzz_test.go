package workload

import (
	"context"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/internal/memcache"
)

// candidates is a PolicySource whose answers are fixed by workload name.
type candidates map[string][]Policy

func (c candidates) Candidates(_ context.Context, _ string, top *metav1.PartialObjectMetadata) ([]Policy, error) {
	return c[top.Name], nil
}

func annotated(strategyKey, strategyValue, mode, skip string) map[string]string {
	out := map[string]string{}
	if strategyKey != "" {
		out[strategyKey] = strategyValue
	}
	if mode != "" {
		out[annotations.Mode] = mode
	}
	if skip != "" {
		out[annotations.Skip] = skip
	}
	return out
}

var strategyKeys = []string{"", annotations.Strategy, annotations.LegacyStrategy, annotations.LegacyCamelStrategy, "apportion.dev/stratgy"}

// FuzzResolve: for any annotations on a pod template, its workload and a
// CronJob, and any policies of either, the resolver (1) answers the same
// through the webhook's route (Resolve: a pod and the metadata caches) as
// through the chain plan and explain build (ResolveChain); (2) keeps the
// precedence: an annotation, then a PlacementPolicy (the Job's, then the
// CronJob's), then a ClusterPlacementPolicy; (3) always gives a valid mode,
// set where it says; (4) never both skips and refuses the skip.
func FuzzResolve(f *testing.F) {
	f.Add(uint8(0), uint8(1), "a=b,weight=1", uint8(0), "", "shadw", "", "true", "preferred", uint8(0xff))
	f.Add(uint8(1), uint8(0), "", uint8(2), "x=y,weight=1", "shadow", "required", "", "", uint8(0x0c))
	f.Add(uint8(1), uint8(4), "a=b", uint8(0), "", "", "", "ture", "shadow", uint8(0x12))
	f.Fuzz(func(t *testing.T, kind, topKey uint8, topValue string, tmplKey uint8, tmplValue, topMode, tmplMode, skip, policyMode string, flags uint8) {
		batch := kind%2 == 1
		top := annotated(strategyKeys[int(topKey)%len(strategyKeys)], topValue, topMode, skip)
		tmpl := annotated(strategyKeys[int(tmplKey)%len(strategyKeys)], tmplValue, tmplMode, "")
		var cron map[string]string
		if batch && flags&1 != 0 {
			cron = annotated(annotations.Strategy, "cron=1,weight=1", "", "")
		}
		policies := candidates{}
		if flags&2 != 0 {
			policies["w"] = append(policies["w"], Policy{Strategy: "ns=1,weight=1", Mode: policyMode, Name: "ns/w"})
		}
		if flags&4 != 0 {
			policies["w"] = append(policies["w"], Policy{Strategy: "cl=1,weight=1", Mode: policyMode, Name: "cl-w", Cluster: true, NoSkip: flags&8 != 0, Priority: 1})
		}
		// The CronJob's policies are asked only when the Job has a CronJob.
		if batch && flags&16 != 0 {
			policies["c"] = append(policies["c"], Policy{Strategy: "ns-cron=1,weight=1", Name: "ns/c"})
		}
		if batch && flags&32 != 0 {
			policies["c"] = append(policies["c"], Policy{Strategy: "cl-cron=1,weight=1", Name: "cl-c", Cluster: true})
		}

		reader, pod, chain := fuzzObjects(t, batch, top, tmpl, cron)
		opts := []Option{WithPolicies(policies), WithDefaultMode("preferred")}
		viaPod, err := Resolve(context.Background(), reader, "ns", pod, opts...)
		if err != nil {
			t.Fatal(err)
		}
		viaChain, err := ResolveChain(context.Background(), "ns", chain, opts...)
		if err != nil {
			t.Fatal(err)
		}
		viaChain.Revision = viaPod.Revision
		if !reflect.DeepEqual(viaPod, viaChain) {
			t.Fatalf("the webhook's route and the chain disagree:\npod:   %+v\nchain: %+v", viaPod, viaChain)
		}
		info := viaPod
		if _, ok := annotations.ParseMode(info.Mode); !ok {
			t.Fatalf("mode %q", info.Mode)
		}
		if info.Skip && info.SkipRefused {
			t.Fatalf("skips and refuses the skip: %+v", info)
		}
		_, _, own := findOwn(batch, top, tmpl, cron)
		switch {
		case own && info.Source.Policy != "":
			t.Fatalf("a policy won over an annotation: %+v", info.Source)
		case !own && flags&2 != 0 && info.Source.Policy != "ns/w":
			t.Fatalf("the workload's PlacementPolicy lost to %+v", info.Source)
		case !own && flags&2 == 0 && cron != nil && flags&16 != 0 && info.Source.Policy != "ns/c":
			t.Fatalf("the CronJob's PlacementPolicy lost to %+v", info.Source)
		}
		if info.ModeSource == "" && info.Mode != annotations.ModePreferred {
			t.Fatalf("mode %q from nowhere", info.Mode)
		}
	})
}

// findOwn reports whether any annotation level carries a strategy.
func findOwn(batch bool, top, tmpl, cron map[string]string) (string, string, bool) {
	c := &Chain{Top: fmeta(DeploymentGVK.Kind, top), Template: tmpl}
	if batch {
		c.Top = fmeta(JobGVK.Kind, top)
		if cron != nil {
			c.Parent = fmeta(CronJobGVK.Kind, cron)
		}
	}
	info := &Info{}
	findStrategy(info, c)
	return info.Strategy, info.Source.Annotation, info.Found
}

func fmeta(kind string, ann map[string]string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Annotations: ann}}
	switch kind {
	case JobGVK.Kind:
		m.SetGroupVersionKind(JobGVK)
	case CronJobGVK.Kind:
		m.SetGroupVersionKind(CronJobGVK)
	default:
		m.SetGroupVersionKind(DeploymentGVK)
	}
	return m
}

// fuzzObjects are a Deployment (its ReplicaSet and a pod) or a Job (with
// its CronJob when cron is set, and a pod), in a metadata cache, and the
// same workload as a Chain.
func fuzzObjects(t *testing.T, batch bool, top, tmpl, cron map[string]string) (*memcache.Reader, *corev1.Pod, Chain) {
	scheme := runtime.NewScheme()
	_ = appsv1.AddToScheme(scheme)
	_ = batchv1.AddToScheme(scheme)
	cache := memcache.New(scheme)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Annotations: tmpl}}
	var objs []client.Object
	var chain Chain
	if !batch {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "d", Annotations: top}}
		rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w-1", UID: "rs", OwnerReferences: owner("Deployment", "apps/v1", "w", "d")}}
		pod.OwnerReferences = owner("ReplicaSet", "apps/v1", "w-1", "rs")
		objs = append(objs, d, rs)
		chain.Top = partial(DeploymentGVK, &d.ObjectMeta)
	} else {
		job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", UID: "j", Annotations: top}}
		if cron != nil {
			c := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: "c", Annotations: cron}}
			job.OwnerReferences = owner("CronJob", "batch/v1", "c", "c")
			objs = append(objs, c)
			chain.Parent = partial(CronJobGVK, &c.ObjectMeta)
		}
		pod.OwnerReferences = owner("Job", "batch/v1", "w", types.UID("j"))
		objs = append(objs, job)
		chain.Top = partial(JobGVK, &job.ObjectMeta)
	}
	if err := cache.Add(objs...); err != nil {
		t.Fatal(err)
	}
	chain.Template = tmpl
	return cache, pod, chain
}

func partial(gvk schema.GroupVersionKind, m *metav1.ObjectMeta) *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{ObjectMeta: *m}
	o.SetGroupVersionKind(gvk)
	return o
}
