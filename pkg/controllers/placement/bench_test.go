package placement_test

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/controllers/placement"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/internal/memcache"
	"github.com/apportion-dev/apportion/pkg/operator"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/test"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// readOnly serves reads from the in-memory cache and accepts writes without
// doing anything: the benchmark measures the decision, not the API server.
type readOnly struct {
	client.Client
	*memcache.Reader
}

func (r readOnly) Get(ctx context.Context, k client.ObjectKey, o client.Object, opts ...client.GetOption) error {
	return r.Reader.Get(ctx, k, o, opts...)
}

func (r readOnly) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	return r.Reader.List(ctx, l, opts...)
}

func (readOnly) Patch(context.Context, client.Object, client.Patch, ...client.PatchOption) error {
	return nil
}

// benchSigner signs the decisions of the benchmarks' pods.
var benchSigner = decision.RandomSigner()

// cachedCluster builds a cache with `workloads` Deployments of `perWorkload`
// decided pods each (pods stripped as the operator's transform does), and
// `pools` NodePools.
func cachedCluster(b *testing.B, workloads, perWorkload, pools int) (*memcache.Reader, *placement.Tally, *corev1.Pod) {
	tally := placement.NewTally().WithSigner(benchSigner)
	r := memcache.New(test.Scheme())
	groups := []string{"karpenter.sh/capacity-type=on-demand", "karpenter.sh/capacity-type=spot"}
	for w := 0; w < workloads; w++ {
		name := fmt.Sprintf("app-%d", w)
		deploy := test.Deployment(metav1.ObjectMeta{Namespace: "web", Name: name, UID: types.UID("d-" + name), Annotations: map[string]string{annotations.Strategy: seed004}})
		rs := test.ReplicaSet(metav1.ObjectMeta{Namespace: "web", Name: name + "-abc", UID: types.UID("rs-" + name)}, deploy)
		objs := []client.Object{deploy, rs}
		for i := 0; i < perWorkload; i++ {
			objs = append(objs, test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: fmt.Sprintf("%s-abc-%d", name, i), UID: types.UID(fmt.Sprintf("%s-%d", name, i)),
				Labels: map[string]string{workload.PodTemplateHashLabel: "abc", "app": name}},
				Owner: rs, Phase: corev1.PodRunning, Group: groups[i%2], NodePool: "pool-1", Signer: benchSigner}))
		}
		if err := r.Add(objs...); err != nil {
			b.Fatal(err)
		}
		for _, o := range objs {
			if pod, ok := o.(*corev1.Pod); ok {
				tally.Observe(pod)
			}
		}
	}
	for p := 0; p < pools; p++ {
		ct := []string{"on-demand", "spot"}[p%2]
		np := nodePool(fmt.Sprintf("pool-%d", p), int32(p), ct)
		np.Spec.Template.Spec.Requirements = append(np.Spec.Template.Spec.Requirements, test.Requirement(corev1.LabelArchStable, []string{"amd64", "arm64"}[p%4/2]))
		if err := r.Add(np); err != nil {
			b.Fatal(err)
		}
	}
	gated := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "app-0-abc-new", UID: "new",
		Labels: map[string]string{workload.PodTemplateHashLabel: "abc"}}, Owner: app0RS, Gated: true})
	return r, tally, gated
}

func benchmarkDecision(b *testing.B, workloads, perWorkload int, leaseChecked ...bool) {
	r, tally, gated := cachedCluster(b, workloads, perWorkload, 50)
	clk := clocktesting.NewFakeClock(time.Now())
	c := placement.NewController(clk, readOnly{Reader: r}, events.NewFakeRecorder(1<<20), &capacity.NodePoolCapacity{Reader: r}, tally, time.Minute).
		WithSigner(benchSigner)
	if len(leaseChecked) > 0 && leaseChecked[0] {
		c.WithLease(placement.Lease{Holder: cachedHolder(placementLease(self)), Identity: self, Renewed: clk.Now, Duration: leaseDuration})
	}
	ctx := context.Background()
	pods := make([]*corev1.Pod, 1024)
	for i := range pods {
		pods[i] = gated.DeepCopy()
		pods[i].UID = types.UID(fmt.Sprintf("new-%d", i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		// A fresh UID each time: the ledger would skip a pod decided before.
		pod := pods[i%len(pods)]
		pod.UID = types.UID(fmt.Sprintf("new-%d", i))
		i++
		if _, err := c.Reconcile(ctx, pod); err != nil {
			b.Fatal(err)
		}
		// The pod goes away again, so every decision sees the same counts.
		tally.Forget(pod)
	}
}

// BenchmarkDecision10kPods50Pools: 100 Deployments of 100 pods (10,000 pods)
// and 50 NodePools cached; one decision for a pod of one of them.
func BenchmarkDecision10kPods50Pools(b *testing.B) { benchmarkDecision(b, 100, 100) }

// BenchmarkDecision10kPods50PoolsLeaseChecked: the same with leader
// election, the placement Lease checked before the decision and before its
// patch: two atomic loads each, whatever the cluster's size.
func BenchmarkDecision10kPods50PoolsLeaseChecked(b *testing.B) { benchmarkDecision(b, 100, 100, true) }

// BenchmarkDecision10kPodsOneRevision: the worst case, all 10,000 pods in the
// revision being decided.
func BenchmarkDecision10kPodsOneRevision(b *testing.B) { benchmarkDecision(b, 1, 10000) }

// BenchmarkMemoryPerCachedPod reports the heap held per pod by an informer
// store and the tally, for typical Deployment pods as a client decodes them
// (every string its own allocation), with and without the
// operator's transform: 100 pods per ReplicaSet, 20 per node. The per-pod
// figure at 10,000 and 100,000 pods gives the fixed and the per-pod parts
// (CONTRIBUTING.md, "Memory per cached pod").
func BenchmarkMemoryPerCachedPod(b *testing.B) {
	for _, tc := range []struct {
		pods  int
		strip bool
	}{{10000, true}, {10000, false}, {100000, true}} {
		name := fmt.Sprintf("pods=%d/stripped", tc.pods)
		if !tc.strip {
			name = fmt.Sprintf("pods=%d/full", tc.pods)
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				store := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
				tally := placement.NewTally().WithSigner(benchSigner)
				handler := tally.EventHandler()
				for i := 0; i < tc.pods; i++ {
					obj := decodedPod(b, i)
					if tc.strip {
						obj, _ = operator.StripPod(obj)
					}
					if err := store.Add(obj); err != nil {
						b.Fatal(err)
					}
					handler.OnAdd(obj, true)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(tc.pods), "bytes/pod")
				runtime.KeepAlive(store)
				runtime.KeepAlive(tally)
			}
		})
	}
}

// decodedPod is typicalPod(i) written in protobuf and read back, as a
// client reads it from the API server: every string its own allocation.
func decodedPod(b *testing.B, i int) any {
	data, err := typicalPod(i).Marshal()
	if err != nil {
		b.Fatal(err)
	}
	pod := &corev1.Pod{}
	if err := pod.Unmarshal(data); err != nil {
		b.Fatal(err)
	}
	return pod
}

// app0RS is the ReplicaSet of the first workload cachedCluster adds, the
// one the benchmarks' gated pods and strays belong to.
var app0RS = test.ReplicaSet(metav1.ObjectMeta{Namespace: "web", Name: "app-0-abc", UID: "rs-app-0"}, nil)

// typicalPod is a decided (signed) Deployment pod with one container, a service
// account volume, probes and a running status, as a cache would receive it:
// the i-th pod of Deployment web-<i/100>, on node <i/20>, in the spot group
// when i is odd, with the deletion cost its rank gives it.
func typicalPod(i int) *corev1.Pod {
	app := fmt.Sprintf("web-%d", i/100)
	rs := app + "-7d9f8c6b5"
	name := fmt.Sprintf("%s-%05d", rs, i)
	uid := types.UID(fmt.Sprintf("0b8e2f3a-1c2d-4e5f-8a9b-%012d", i))
	group, pool := []string{"karpenter.sh/capacity-type=on-demand", "karpenter.sh/capacity-type=spot"}[i%2], []string{"on-demand", "spot"}[i%2]
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: name, GenerateName: rs + "-", UID: uid,
			ResourceVersion: strconv.Itoa(123456789 + i), CreationTimestamp: metav1.Now(),
			Labels: map[string]string{"app": app, workload.PodTemplateHashLabel: "7d9f8c6b5"},
			Annotations: map[string]string{annotations.Group: group, annotations.NodePool: pool, annotations.Decision: `{"strategy":"2c1f0e9a8b7d","revision":"7d9f8c6b5","counts":[2,3],"reason":"quota"}`,
				annotations.Signature: benchSigner.Sign(uid, group, pool), corev1.PodDeletionCost: strconv.Itoa(-(i % 100))},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: types.UID("rs-uid-" + app), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "web", Image: "public.ecr.aws/nginx/nginx:1.27",
				Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 80, Protocol: corev1.ProtocolTCP}},
				Env:            []corev1.EnvVar{{Name: "MODE", Value: "production"}, {Name: "LOG_LEVEL", Value: "info"}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstrFromInt(80)}}},
				VolumeMounts:   []corev1.VolumeMount{{Name: "kube-api-access-abcde", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
			}},
			Volumes:            []corev1.Volume{{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}}}}}}},
			NodeName:           fmt.Sprintf("ip-10-0-%d-%d.ec2.internal", i/20/250, i/20%250),
			ServiceAccountName: "default",
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "karpenter.sh/capacity-type", Operator: corev1.NodeSelectorOpIn, Values: []string{pool}}, {Key: "karpenter.sh/nodepool", Operator: corev1.NodeSelectorOpIn, Values: []string{pool}}}}}}}},
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.1.45", HostIP: "10.0.1.23",
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue}, {Type: corev1.PodInitialized, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Ready: true, Image: "public.ecr.aws/nginx/nginx:1.27", ImageID: "public.ecr.aws/nginx/nginx@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", ContainerID: "containerd://0123456789abcdef"}},
		},
	}
}

func intstrFromInt(i int) intstr.IntOrString { return intstr.FromInt32(int32(i)) }

// BenchmarkDecisionWithStrays: one decision in a revision of 100 decided pods
// that also holds strays (bound pods without a decision, counted by their
// node's labels), 10 strays per node, with the nodes' metadata cached.
func BenchmarkDecisionWithStrays(b *testing.B) {
	for _, strays := range []int{0, 10000} {
		b.Run(fmt.Sprintf("strays=%d", strays), func(b *testing.B) {
			r, tally, gated := cachedCluster(b, 1, 100, 50)
			// As the operator does: the node informer's events reach the
			// tally (none here: the nodes do not change).
			tally.NodeEventHandler()
			addStrays(b, r, tally, strays, 10)
			clk := clocktesting.NewFakeClock(time.Now())
			c := placement.NewController(clk, readOnly{Reader: r}, events.NewFakeRecorder(1<<20), &capacity.NodePoolCapacity{Reader: r}, tally, time.Minute).
				WithNodes(r).WithSigner(benchSigner)
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				pod := gated.DeepCopy()
				pod.UID = types.UID(fmt.Sprintf("new-%d", i))
				i++
				if _, err := c.Reconcile(ctx, pod); err != nil {
					b.Fatal(err)
				}
				tally.Forget(pod)
			}
		})
	}
}

// addStrays adds n bound pods without a decision to app-0's revision,
// perNode on each node, half the nodes on-demand and half spot.
func addStrays(b *testing.B, r *memcache.Reader, tally *placement.Tally, n, perNode int) {
	b.Helper()
	for i := 0; i < n; i++ {
		node := fmt.Sprintf("node-%d", i/perNode)
		if i%perNode == 0 {
			ct := []string{"on-demand", "spot"}[(i/perNode)%2]
			if err := r.Add(test.Node(node, map[string]string{karpv1.CapacityTypeLabelKey: ct})); err != nil {
				b.Fatal(err)
			}
		}
		pod := test.Pod(test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: fmt.Sprintf("stray-%d", i), UID: types.UID(fmt.Sprintf("stray-%d", i)),
			Labels: map[string]string{workload.PodTemplateHashLabel: "abc"}}, Owner: app0RS, NodeName: node, Phase: corev1.PodRunning})
		tally.Observe(pod)
	}
}

// cacheGet reads pods as controller-runtime's cache reader does for a
// client's Get: the stored object deep-copied (a cached podcache.Pod
// expanded into a full *corev1.Pod), then copied into the caller's.
type cacheGet struct {
	client.Client
	store toolscache.Store
}

func (g cacheGet) Get(_ context.Context, key client.ObjectKey, out client.Object, _ ...client.GetOption) error {
	obj, ok, err := g.store.GetByKey(key.Namespace + "/" + key.Name)
	if err != nil {
		return err
	}
	if !ok {
		return apierrors.NewNotFound(corev1.Resource("pods"), key.Name)
	}
	reflect.Indirect(reflect.ValueOf(out)).Set(reflect.Indirect(reflect.ValueOf(obj.(k8sruntime.Object).DeepCopyObject())))
	out.GetObjectKind().SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	return nil
}

// readers are the two ways a reconcile gets its pod from store: the
// client's Get (reconcile.AsReconciler, what the manager ran before), and
// the shared view (placement.ViewReconciler, what it runs).
func readers(store toolscache.Store, rec reconcile.ObjectReconciler[*corev1.Pod]) []namedReconciler {
	return []namedReconciler{
		{"get", reconcile.AsReconciler[*corev1.Pod](cacheGet{store: store}, rec)},
		{"view", placement.ViewReconciler(store, rec)},
	}
}

type namedReconciler struct {
	name string
	reconcile.Reconciler
}

// gatedTypicalPod is typicalPod(0) as its ReplicaSet creates it and the
// webhook gates it: no decision yet, unbound, pending.
func gatedTypicalPod() *corev1.Pod {
	pod := typicalPod(0)
	pod.Annotations = nil
	pod.Spec.NodeName, pod.Spec.Affinity = "", nil
	pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: annotations.PlacementGate}}
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending}
	return pod
}

// BenchmarkReconcileRead: what a reconcile spends to read its pod, a gated
// Deployment pod cached as the operator caches it (StripPod), before
// Reconcile does anything with it.
func BenchmarkReconcileRead(b *testing.B) {
	cached, _ := operator.StripPod(gatedTypicalPod())
	store := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	if err := store.Add(cached); err != nil {
		b.Fatal(err)
	}
	pod, _ := podcache.View(cached)
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pod)}
	var h handed
	for _, r := range readers(store, &h) {
		b.Run(r.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				h.pod = nil
				if _, err := r.Reconcile(ctx, req); err != nil || h.pod == nil {
					b.Fatalf("pod not read: %v", err)
				}
			}
		})
	}
}

// BenchmarkDecision10kPods50PoolsRead: BenchmarkDecision10kPods50Pools with
// the pod read as the manager reads it, each way.
func BenchmarkDecision10kPods50PoolsRead(b *testing.B) {
	r, tally, gated := cachedCluster(b, 100, 100, 50)
	c := placement.NewController(clocktesting.NewFakeClock(time.Now()), readOnly{Reader: r}, events.NewFakeRecorder(1<<20), &capacity.NodePoolCapacity{Reader: r}, tally, time.Minute).
		WithSigner(benchSigner)
	cached, _ := operator.StripPod(gated)
	store := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	if err := store.Add(cached); err != nil {
		b.Fatal(err)
	}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(gated)}
	for _, rec := range readers(store, c) {
		b.Run(rec.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if res, err := rec.Reconcile(ctx, req); err != nil || res != (reconcile.Result{}) {
					b.Fatalf("Reconcile = %+v, %v", res, err)
				}
				// The pod goes away again, so every decision sees the same
				// counts.
				tally.Forget(cached)
			}
		})
	}
}
