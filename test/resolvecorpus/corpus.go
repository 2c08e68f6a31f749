// Package resolvecorpus generates workloads, namespaces and policies that
// exercise how apportion resolves a workload's strategy: every workload kind
// (CronJob and Argo Workflow included) with strategy, mode and opt-out
// annotations on the workload, its pod template and a CronJob, typos among
// them, PlacementPolicies targeting by name, kind and selector, and
// ClusterPlacementPolicies with priorities (ties too), kinds, workload
// selectors and namespace selectors over the namespace's labels. The
// differential tests hand the same cases to `apportion plan -f` (offline)
// and to `apportion explain` (on a cluster holding them) and compare the
// answers.
//
// Each case lives in its own namespace; its cluster policies select only
// that namespace (by the label CaseLabel), so cases do not see each other.
// Policies are listed in the order of their names, and created in that
// order, so that "the oldest, then the first by name" picks the same one
// offline (no creation times) and on a cluster (one-second creation times).
package resolvecorpus

import (
	"fmt"
	"io"
	"math/rand/v2"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/apportion-dev/apportion/pkg/apis/v1alpha1"
)

// CaseLabel is the namespace label a case's cluster policies select.
const CaseLabel = "apportion.dev/test-case"

// Kinds are the workload kinds of the corpus, as plan names them.
var Kinds = []string{"Deployment", "StatefulSet", "ReplicaSet", "Rollout", "Job", "CronJob", "Workflow"}

// Case is one workload with what may place it.
type Case struct {
	Namespace string
	// Kind and Name are the workload's, as plan reports it.
	Kind, Name string
	// Objects are the namespace, the PlacementPolicies, the
	// ClusterPlacementPolicies and the workload, in the order to create
	// them; for a CronJob, Job is one of its Jobs, made as the CronJob
	// controller makes it (created by the test on a cluster: plan resolves
	// a CronJob as such a Job).
	Objects []client.Object
	Job     *batchv1.Job
}

// ExplainKind is the kind explain is asked about: a CronJob's Job for a
// CronJob.
func (c *Case) ExplainKind() string {
	if c.Kind == "CronJob" {
		return "Job"
	}
	return c.Kind
}

// gen draws the choices of one case.
type gen struct{ r *rand.Rand }

func (g gen) pick(options ...string) string { return options[g.r.IntN(len(options))] }
func (g gen) chance(p float64) bool         { return g.r.Float64() < p }

// strategies: valid ones, the legacy annotation's syntax, and invalid ones
// (a typo of a reserved key, a bad weight).
var strategies = []string{
	"karpenter.sh/capacity-type=on-demand,base=2,weight=1:karpenter.sh/capacity-type=spot,weight=3",
	"kubernetes.io/arch=arm64,weight=1:kubernetes.io/arch=amd64,weight=1",
	"zone=a,weight=1,max=2:zone=b,weight=1",
	"a=b,weight=x",
	"team=1,bsae=2,weight=1",
}

// annotations draws the apportion annotations of one level.
func (g gen) annotations() map[string]string {
	out := map[string]string{}
	if g.chance(0.35) {
		out[g.pick("apportion.dev/strategy", "apportion.dev/strategy", "custom-pod-schedule-strategy", "apportion.dev/stratgy")] = g.pick(strategies...)
	}
	if g.chance(0.3) {
		out["apportion.dev/mode"] = g.pick("required", "preferred", "shadow", "shadw", "Preferred")
	}
	if g.chance(0.15) {
		out["apportion.dev/skip"] = g.pick("true", "false", "ture")
	}
	if g.chance(0.1) {
		out["apportion.dev/architectures"] = "auto"
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func (g gen) labels() map[string]string {
	l := map[string]string{"app": "w"}
	if g.chance(0.5) {
		l["team"] = g.pick("a", "b")
	}
	return l
}

// Generate returns n cases drawn from seed; the kinds take turns.
func Generate(seed uint64, n int) []Case {
	g := gen{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	out := make([]Case, n)
	for i := range out {
		out[i] = g.generate(i, Kinds[i%len(Kinds)])
	}
	return out
}

func (g gen) generate(i int, kind string) Case {
	c := Case{Namespace: fmt.Sprintf("rc-%d", i), Kind: kind, Name: "w"}
	ns := &corev1.Namespace{TypeMeta: typeMeta("v1", "Namespace"), ObjectMeta: metav1.ObjectMeta{Name: c.Namespace, Labels: map[string]string{CaseLabel: c.Namespace}}}
	if g.chance(0.6) {
		ns.Labels["team"] = g.pick("a", "b")
	}
	if g.chance(0.3) {
		ns.Labels["env"] = "prod"
	}
	c.Objects = append(c.Objects, ns)
	for j := range g.r.IntN(3) {
		c.Objects = append(c.Objects, g.policy(c.Namespace, fmt.Sprintf("p%d", j), kind))
	}
	for j := range g.r.IntN(4) {
		c.Objects = append(c.Objects, g.clusterPolicy(c.Namespace, fmt.Sprintf("%s-c%d", c.Namespace, j)))
	}
	c.Objects = append(c.Objects, g.workload(&c))
	return c
}

func typeMeta(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

func (g gen) strategy() *v1alpha1.Strategy {
	if g.chance(0.25) {
		capped := ptr.To(int32(g.r.IntN(3) + 1))
		return &v1alpha1.Strategy{Groups: []v1alpha1.Group{
			{Labels: map[string]string{"zone": "a"}, Base: int32(g.r.IntN(2)), Weight: 1, Max: capped},
			{Labels: map[string]string{"zone": "b"}, Weight: int32(g.r.IntN(3))}}}
	}
	return &v1alpha1.Strategy{Text: g.pick(strategies...)}
}

func (g gen) mode() v1alpha1.Mode {
	return v1alpha1.Mode(g.pick("", "", "required", "preferred", "shadow"))
}

// policy targets the workload by name (its kind, or for a CronJob's Job
// the CronJob), by kind and selector, or another workload.
func (g gen) policy(namespace, name, kind string) *v1alpha1.PlacementPolicy {
	p := &v1alpha1.PlacementPolicy{TypeMeta: typeMeta(v1alpha1.GroupVersion.String(), "PlacementPolicy"),
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       v1alpha1.PlacementPolicySpec{Strategy: g.strategy(), Mode: g.mode()}}
	targetKind := kind
	if kind == "CronJob" && g.chance(0.5) {
		targetKind = "Job"
	}
	switch g.r.IntN(4) {
	case 0, 1:
		p.Spec.Target = v1alpha1.Target{Kind: targetKind, Name: "w"}
	case 2:
		p.Spec.Target = v1alpha1.Target{Kind: targetKind, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": g.pick("a", "b")}}}
	default:
		p.Spec.Target = v1alpha1.Target{Kind: targetKind, Name: "other"}
	}
	return p
}

// clusterPolicy selects the case's namespace, sometimes only with a label
// the namespace may lack; some name kinds or select workloads by label.
func (g gen) clusterPolicy(namespace, name string) *v1alpha1.ClusterPlacementPolicy {
	sel := metav1.LabelSelector{MatchLabels: map[string]string{CaseLabel: namespace}}
	if g.chance(0.4) {
		sel.MatchLabels["team"] = g.pick("a", "b")
	}
	if g.chance(0.2) {
		sel.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpDoesNotExist}}
	}
	p := &v1alpha1.ClusterPlacementPolicy{TypeMeta: typeMeta(v1alpha1.GroupVersion.String(), "ClusterPlacementPolicy"),
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ClusterPlacementPolicySpec{NamespaceSelector: sel, Strategy: *g.strategy(), Mode: g.mode(),
			Priority: int32(g.r.IntN(3))}}
	if g.chance(0.4) {
		p.Spec.Target.Kinds = []string{g.pick(Kinds...)}
		if k := g.pick(Kinds...); k != p.Spec.Target.Kinds[0] {
			p.Spec.Target.Kinds = append(p.Spec.Target.Kinds, k)
		}
	}
	if g.chance(0.3) {
		p.Spec.Target.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": g.pick("a", "b")}}
	}
	if g.chance(0.3) {
		p.Spec.AllowSkip = ptr.To(false)
	}
	return p
}

func podTemplate(annotations map[string]string, restart corev1.RestartPolicy) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "w"}, Annotations: annotations},
		Spec: corev1.PodSpec{RestartPolicy: restart, Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}}}
}

// workload is the case's workload with no pods to run: no replicas, or
// suspended.
func (g gen) workload(c *Case) client.Object {
	meta := metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name, Labels: g.labels(), Annotations: g.annotations()}
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "w"}}
	template := podTemplate(g.annotations(), corev1.RestartPolicyAlways)
	switch c.Kind {
	case "Deployment":
		return &appsv1.Deployment{TypeMeta: typeMeta("apps/v1", "Deployment"), ObjectMeta: meta,
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: selector, Template: template}}
	case "StatefulSet":
		return &appsv1.StatefulSet{TypeMeta: typeMeta("apps/v1", "StatefulSet"), ObjectMeta: meta,
			Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](0), Selector: selector, Template: template}}
	case "ReplicaSet":
		return &appsv1.ReplicaSet{TypeMeta: typeMeta("apps/v1", "ReplicaSet"), ObjectMeta: meta,
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](0), Selector: selector, Template: template}}
	case "Rollout":
		return unstructuredOf("argoproj.io/v1alpha1", "Rollout", meta, map[string]any{
			"replicas": int64(0), "selector": map[string]any{"matchLabels": map[string]any{"app": "w"}}, "template": toMap(template)})
	case "Job":
		template.Spec.RestartPolicy = corev1.RestartPolicyNever
		return &batchv1.Job{TypeMeta: typeMeta("batch/v1", "Job"), ObjectMeta: meta,
			Spec: batchv1.JobSpec{Suspend: ptr.To(true), Parallelism: ptr.To[int32](2), Template: template}}
	case "CronJob":
		template.Spec.RestartPolicy = corev1.RestartPolicyNever
		jobMeta := metav1.ObjectMeta{Labels: g.labels(), Annotations: g.annotations()}
		cron := &batchv1.CronJob{TypeMeta: typeMeta("batch/v1", "CronJob"), ObjectMeta: meta,
			Spec: batchv1.CronJobSpec{Schedule: "0 1 * * *", Suspend: ptr.To(true), JobTemplate: batchv1.JobTemplateSpec{ObjectMeta: jobMeta,
				Spec: batchv1.JobSpec{Parallelism: ptr.To[int32](2), Template: template}}}}
		c.Job = &batchv1.Job{TypeMeta: typeMeta("batch/v1", "Job"),
			ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name, Labels: jobMeta.Labels, Annotations: jobMeta.Annotations},
			Spec:       batchv1.JobSpec{Suspend: ptr.To(true), Parallelism: ptr.To[int32](2), Template: template}}
		return cron
	case "Workflow":
		return unstructuredOf("argoproj.io/v1alpha1", "Workflow", meta, map[string]any{
			"entrypoint": "main", "podMetadata": map[string]any{"annotations": anyMap(template.Annotations)},
			"templates": []any{map[string]any{"name": "main", "container": map[string]any{"image": "registry.example/app:1"}}}})
	}
	panic("resolvecorpus: unknown kind " + c.Kind)
}

func anyMap(m map[string]string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func toMap(v any) map[string]any {
	raw, err := yaml.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out map[string]any
	if err := yaml.Unmarshal(raw, &out); err != nil {
		panic(err)
	}
	return out
}

func unstructuredOf(apiVersion, kind string, meta metav1.ObjectMeta, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "spec": spec}}
	u.SetNamespace(meta.Namespace)
	u.SetName(meta.Name)
	u.SetLabels(meta.Labels)
	u.SetAnnotations(meta.Annotations)
	return u
}

// WriteYAML writes every case's objects (a CronJob's Job aside: plan makes
// its own) as one YAML stream, for `apportion plan -f`.
func WriteYAML(w io.Writer, cases []Case) error {
	for _, c := range cases {
		for _, o := range c.Objects {
			raw, err := yaml.Marshal(o)
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(w, "---\n%s", raw); err != nil {
				return err
			}
		}
	}
	return nil
}

// OwnedJob is c's Job controlled by c's CronJob (the last of c.Objects,
// with its UID set once created).
func OwnedJob(c Case) *batchv1.Job {
	job := c.Job.DeepCopy()
	cron := c.Objects[len(c.Objects)-1]
	job.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "CronJob", Name: cron.GetName(), UID: cron.GetUID(), Controller: ptr.To(true)}}
	return job
}
