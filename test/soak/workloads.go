package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
	"github.com/apportion-dev/apportion/test/framework"
)

// Labels and annotations of the soak's objects.
const (
	// workloadLabel is on every workload and its pods: "Kind.name".
	workloadLabel = "soak.apportion.dev/workload"
	// optInLabel on a pod says whether its workload opted in ("true") or
	// is one of the control workloads that did not ("false").
	optInLabel = "soak.apportion.dev/opt-in"
	// policyGroupLabel on a workload is what its PlacementPolicy selects.
	policyGroupLabel = "soak.apportion.dev/group"
	// policiesLabel on a namespace is what the base ClusterPlacementPolicy
	// selects; churnLabel what the churned one does.
	policiesLabel = "soak.apportion.dev/policies"
	churnLabel    = "soak.apportion.dev/cluster-churn"
	// rolloutAnnotation on a pod template changes it: a rollout.
	rolloutAnnotation = "soak.apportion.dev/rollout"
)

// The soak's namespaces: workloads with a strategy annotation (and the
// control workloads without one), workloads placed by PlacementPolicies
// (the base ClusterPlacementPolicy when none targets them), and workloads
// placed by the churned ClusterPlacementPolicy (the base one while it is
// deleted).
const (
	nsAnnotated = "soak-annotated"
	nsPolicies  = "soak-policies"
	nsCluster   = "soak-cluster"
)

// Strategies the workloads take in turn: the AWS sample webhook's capacity
// spread, an even split over the architectures, an uneven one over zones,
// and capacity and architecture together.
var strategies = []string{
	"karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3",
	"kubernetes.io/arch=amd64,weight=1:kubernetes.io/arch=arm64,weight=1",
	"topology.kubernetes.io/zone=test-zone-a,weight=2:topology.kubernetes.io/zone=test-zone-b,weight=1:topology.kubernetes.io/zone=test-zone-c,weight=1",
	"karpenter.sh/capacity-type=on-demand,kubernetes.io/arch=amd64,base=1,weight=1:karpenter.sh/capacity-type=spot,kubernetes.io/arch=arm64,weight=2",
}

// Workload kinds.
const (
	kindDeployment  = "Deployment"
	kindStatefulSet = "StatefulSet"
	kindJob         = "Job"
	kindCronJob     = "CronJob"
)

// workload is one of the soak's workloads and what the soak last did to it.
type workload struct {
	kind, ns, name string
	// annotation is its strategy annotation; "" when a policy places it
	// (or, with optIn false, nothing does).
	annotation string
	optIn      bool
	// group is the policy group it belongs to in nsPolicies.
	group    string
	replicas int32 // initial replicas (Jobs: parallelism)
	max      int32 // the most scaling gives it

	// Guarded by model.mu.
	// dirty: a policy that applies to it changed and the rollout that
	// brings its pods to the new strategy has not been started yet.
	dirty bool
	// jobs counts the Jobs created for a Job slot.
	jobs int
}

func (w *workload) key() string { return w.kind + "." + w.name }

// scalable reports whether scaling and rollouts apply (and the quota is
// checked on settled samples).
func (w *workload) scalable() bool { return w.kind == kindDeployment || w.kind == kindStatefulSet }

// model is the soak's view of what applies to each workload: the
// precedence of the strategy annotation, then a PlacementPolicy of the
// namespace, then the highest-priority ClusterPlacementPolicy.
type model struct {
	mu        sync.Mutex
	workloads []*workload
	// pp is the strategy of each policy group's PlacementPolicy (absent:
	// deleted); cluster the churned ClusterPlacementPolicy's ("":
	// deleted); base the base ClusterPlacementPolicy's (never deleted).
	pp      map[string]string
	cluster string
	base    string
}

// policyGroups are the PlacementPolicies of nsPolicies, one per group.
var policyGroups = []string{"g0", "g1", "g2"}

// newModel lays out the workloads: 58, replicas multiplied by scale.
func newModel(scale int) *model {
	m := &model{pp: map[string]string{}, base: strategies[0], cluster: strategies[1]}
	s := int32(scale)
	add := func(w *workload) {
		w.replicas *= s
		w.max *= s
		m.workloads = append(m.workloads, w)
	}
	for i := range 20 {
		add(&workload{kind: kindDeployment, ns: nsAnnotated, name: fmt.Sprintf("deploy-%02d", i), annotation: strategies[i%len(strategies)],
			optIn: true, replicas: int32(3 + i%5), max: 10})
	}
	for i := range 6 {
		add(&workload{kind: kindStatefulSet, ns: nsAnnotated, name: fmt.Sprintf("sts-%02d", i), annotation: strategies[i%len(strategies)],
			optIn: true, replicas: int32(2 + i%3), max: 6})
	}
	for i := range 6 {
		add(&workload{kind: kindJob, ns: nsAnnotated, name: fmt.Sprintf("job-%02d", i), annotation: strategies[i%2], optIn: true, replicas: 3, max: 3})
	}
	for i := range 4 {
		add(&workload{kind: kindCronJob, ns: nsAnnotated, name: fmt.Sprintf("cron-%02d", i), annotation: strategies[i%2], optIn: true, replicas: 2, max: 2})
	}
	for i := range 2 {
		add(&workload{kind: kindDeployment, ns: nsAnnotated, name: fmt.Sprintf("plain-%02d", i), replicas: 3, max: 6})
	}
	for i, g := range policyGroups {
		m.pp[g] = strategies[(i+1)%len(strategies)]
	}
	for i := range 12 {
		kind := kindDeployment
		if i >= 10 {
			kind = kindStatefulSet
		}
		add(&workload{kind: kind, ns: nsPolicies, name: fmt.Sprintf("pp-%02d", i), optIn: true,
			group: policyGroups[i%len(policyGroups)], replicas: int32(3 + i%4), max: 8})
	}
	for i := range 8 {
		add(&workload{kind: kindDeployment, ns: nsCluster, name: fmt.Sprintf("cpp-%02d", i), optIn: true, replicas: int32(3 + i%4), max: 8})
	}
	return m
}

// strategyOf is the strategy that applies to w now ("" for none).
func (m *model) strategyOf(w *workload) string {
	switch {
	case !w.optIn:
		return ""
	case w.annotation != "":
		return w.annotation
	case w.ns == nsPolicies && m.pp[w.group] != "":
		return m.pp[w.group]
	case w.ns == nsCluster && m.cluster != "":
		return m.cluster
	default:
		return m.base
	}
}

// workloadView is what the model says of a Deployment or StatefulSet that
// opted in, at one moment.
type workloadView struct {
	key, ns, strategy string
	dirty             bool
}

// views returns the model's view of the workloads the quota is checked on.
func (m *model) views() []workloadView {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []workloadView
	for _, w := range m.workloads {
		if w.scalable() && w.optIn {
			out = append(out, workloadView{key: w.key(), ns: w.ns, strategy: m.strategyOf(w), dirty: w.dirty})
		}
	}
	return out
}

// podSpec is a workload's pod: the framework's app container, labelled.
func (e *env) podTemplate(w *workload) corev1.PodTemplateSpec {
	t := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
			"app": w.name, workloadLabel: w.key(), optInLabel: fmt.Sprint(w.optIn),
		}, Annotations: map[string]string{}},
		Spec: framework.AppPodSpec(e.image),
	}
	if w.kind == kindJob || w.kind == kindCronJob {
		// A Job's strategy is on its pod template: the Jobs a CronJob
		// creates carry it too.
		t.Annotations[annotations.Strategy] = w.annotation
		t.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	return t
}

func (e *env) objectMeta(w *workload, name string) metav1.ObjectMeta {
	meta := metav1.ObjectMeta{Namespace: w.ns, Name: name, Labels: map[string]string{"app": w.name, workloadLabel: w.key()}}
	if w.group != "" {
		meta.Labels[policyGroupLabel] = w.group
	}
	if w.annotation != "" && w.scalable() {
		meta.Annotations = map[string]string{annotations.Strategy: w.annotation}
	}
	return meta
}

// object is w's object as the soak creates it (a Job slot: its next Job).
func (e *env) object(w *workload) client.Object {
	tmpl := e.podTemplate(w)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{workloadLabel: w.key()}}
	switch w.kind {
	case kindDeployment:
		return &appsv1.Deployment{ObjectMeta: e.objectMeta(w, w.name), Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(w.replicas), Selector: sel, Template: tmpl}}
	case kindStatefulSet:
		return &appsv1.StatefulSet{ObjectMeta: e.objectMeta(w, w.name), Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To(w.replicas), Selector: sel, Template: tmpl, ServiceName: w.name,
			PodManagementPolicy: appsv1.ParallelPodManagement}}
	case kindJob:
		w.jobs++
		return &batchv1.Job{ObjectMeta: e.objectMeta(w, fmt.Sprintf("%s-%d", w.name, w.jobs)), Spec: jobSpec(w, tmpl)}
	default:
		return &batchv1.CronJob{ObjectMeta: e.objectMeta(w, w.name), Spec: batchv1.CronJobSpec{
			Schedule: "* * * * *", ConcurrencyPolicy: batchv1.ForbidConcurrent,
			SuccessfulJobsHistoryLimit: ptr.To[int32](1), FailedJobsHistoryLimit: ptr.To[int32](1),
			JobTemplate: batchv1.JobTemplateSpec{Spec: jobSpec(w, tmpl)}}}
	}
}

// jobSpec runs 2 × parallelism short pods (kwok completes them), and the
// Job is removed a minute after it finished.
func jobSpec(w *workload, tmpl corev1.PodTemplateSpec) batchv1.JobSpec {
	return batchv1.JobSpec{Parallelism: ptr.To(w.replicas), Completions: ptr.To(2 * w.replicas),
		TTLSecondsAfterFinished: ptr.To[int32](60), Template: tmpl}
}

// deploy creates the namespaces, the policies and every workload.
func (e *env) deploy(ctx context.Context, m *model) error {
	for ns, labels := range map[string]map[string]string{
		nsAnnotated: nil,
		nsPolicies:  {policiesLabel: "true"},
		nsCluster:   {policiesLabel: "true", churnLabel: "true"},
	} {
		err := e.kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	m.mu.Lock()
	objs := []client.Object{clusterPolicy("soak-base", policiesLabel, m.base, 0), clusterPolicy("soak-churn", churnLabel, m.cluster, 10)}
	for _, g := range policyGroups {
		objs = append(objs, placementPolicy(g, m.pp[g]))
	}
	m.mu.Unlock()
	for _, o := range objs {
		if err := e.kube.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	// Let the policies reach apportion's caches before their workloads'
	// first pods.
	if err := sleep(ctx, 5*time.Second); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.workloads {
		o := e.object(w)
		if err := e.kube.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %s %s/%s: %w", w.kind, w.ns, o.GetName(), err)
		}
	}
	return nil
}

// clusterPolicy covers the Deployments and StatefulSets of the namespaces
// labelled label.
func clusterPolicy(name, label, text string, priority int32) *v1alpha1.ClusterPlacementPolicy {
	return &v1alpha1.ClusterPlacementPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.ClusterPlacementPolicySpec{
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{label: "true"}},
		Target:            v1alpha1.ClusterTarget{Kinds: []string{kindDeployment, kindStatefulSet}},
		Strategy:          v1alpha1.Strategy{Text: text}, Priority: priority,
	}}
}

// placementPolicy targets the workloads of nsPolicies in group g.
func placementPolicy(g, text string) *v1alpha1.PlacementPolicy {
	return &v1alpha1.PlacementPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: nsPolicies, Name: "soak-" + g},
		Spec: v1alpha1.PlacementPolicySpec{
			Target:   v1alpha1.Target{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{policyGroupLabel: g}}},
			Strategy: &v1alpha1.Strategy{Text: text},
		}}
}
