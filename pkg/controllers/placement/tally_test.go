package placement

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/test"
)

// tallySigner signs the fixtures' decisions; newTally gives it to the tally.
var tallySigner = decision.RandomSigner()

// tallyRS owns the tally's pods.
var tallyRS = test.ReplicaSet(metav1.ObjectMeta{Namespace: "web", Name: "rs", UID: "rs1"}, nil)

func newTally() *Tally { return NewTally().WithSigner(tallySigner) }

// tallyPod is a pod of ReplicaSet rs1, decided for group (signed) unless
// group is empty.
func tallyPod(uid, group string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	o := test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: uid, UID: types.UID(uid)}, Owner: tallyRS}
	if group != "" {
		o.Group, o.Signer = group, tallySigner
	}
	p := test.Pod(o)
	for _, m := range mutate {
		m(p)
	}
	return p
}

// groupsFunc is a NodeGroups over a function, counting its look-ups.
type groupsFunc struct {
	key     string
	group   func(node string) int
	lookups *int
}

func (g groupsFunc) Key() string { return g.key }

func (g groupsFunc) Group(node string) int {
	if g.lookups != nil {
		*g.lookups++
	}
	return g.group(node)
}

func TestTallyFollowsEventsAndPendingDecisions(t *testing.T) {
	const rev = "web/rs1"
	index := map[string]int{"a": 0, "b": 1}
	now := time.Now()
	tl := newTally()
	counts := func() [2]int64 {
		c := make([]int64, 2)
		tl.Counts(rev, index, c)
		return [2]int64{c[0], c[1]}
	}
	step := func(what string, want [2]int64) {
		t.Helper()
		if got := counts(); got != want {
			t.Fatalf("%s: counts %v, want %v", what, got, want)
		}
	}
	tl.Observe(tallyPod("p1", "a"))
	tl.Observe(tallyPod("p2", "b"))
	tl.Observe(tallyPod("p3", ""))
	step("two decided, one undecided", [2]int64{1, 1})

	tl.Record("p3", rev, "a", now)
	step("decision pending", [2]int64{2, 1})
	if !tl.Decided("p3") || tl.Decided("p9") {
		t.Fatal("Decided is wrong")
	}
	tl.Observe(tallyPod("p3", ""))
	step("a stale event does not drop the pending decision", [2]int64{2, 1})
	tl.Observe(tallyPod("p3", "a"))
	step("the informer shows the decision: counted once", [2]int64{2, 1})

	tl.Observe(tallyPod("p4", "b"))
	tl.Record("p4", rev, "b", now)
	step("informer faster than Record: counted once", [2]int64{2, 2})

	tl.Observe(tallyPod("p1", "a", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now} }))
	step("terminating pods do not count", [2]int64{1, 2})
	tl.Observe(tallyPod("p2", "b", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }))
	step("finished pods do not count", [2]int64{1, 1})
	tl.Forget(toolscache.DeletedFinalStateUnknown{Obj: tallyPod("p3", "a")})
	step("deleted (tombstone)", [2]int64{0, 1})

	tl.Observe(tallyPod("p5", ""))
	tl.Record("p5", rev, "a", now)
	tl.Forget(tallyPod("p5", ""))
	step("deleted before its decision was seen", [2]int64{0, 1})

	tl.Record("p6", rev, "a", now)
	tl.Expire(now.Add(pendingMaxAge + time.Second))
	step("a pending decision whose pod never showed up expires", [2]int64{0, 1})

	tl.Observe(tallyPod("p7", "old-group"))
	step("groups outside the strategy are not counted", [2]int64{0, 1})
	if len(tl.pending) != 0 || len(tl.byRev) != 0 {
		t.Errorf("pending left: %v %v", tl.pending, tl.byRev)
	}
}

// TestTallyCountsStraysByNode: bound pods without a decision count in the
// group their node's labels give, once bound, and stop counting when they go.
func TestTallyCountsStraysByNode(t *testing.T) {
	const rev = "web/rs1"
	nodes := map[string]int{"spot-1": 1, "od-1": 0, "other": -1}
	tl := newTally()
	strays := func() []int64 {
		return tl.StrayCounts(rev, 2, groupsFunc{key: "s", group: func(node string) int { return nodes[node] }})
	}
	bound := func(node string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Spec.NodeName = node } }
	tl.Observe(tallyPod("s1", ""))
	if got := strays(); got != nil {
		t.Fatalf("unbound stray counted: %v", got)
	}
	tl.Observe(tallyPod("s1", "", bound("spot-1")))
	tl.Observe(tallyPod("s2", "", bound("od-1")))
	tl.Observe(tallyPod("s3", "", bound("other")))
	tl.Observe(tallyPod("d1", "b", bound("spot-1")))
	if got := strays(); len(got) != 2 || got[0] != 1 || got[1] != 1 || tl.Strays(rev) != 3 {
		t.Fatalf("strays %v of %d, want [1 1] of 3", got, tl.Strays(rev))
	}
	c := make([]int64, 2)
	tl.Counts(rev, map[string]int{"a": 0, "b": 1}, c)
	if c[0] != 0 || c[1] != 1 {
		t.Errorf("Counts holds decided pods only: %v", c)
	}
	tl.Forget(tallyPod("s1", "", bound("spot-1")))
	tl.Observe(tallyPod("s2", "", bound("od-1"), func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Now()} }))
	if got := strays(); got != nil || tl.Strays(rev) != 1 {
		t.Fatalf("after the strays went: %v of %d", got, tl.Strays(rev))
	}
}

// TestTallyIgnoresUnsignedDecisions: decision annotations a client wrote
// (no signature, a signature copied from another pod, or a group changed
// after signing) do not count as decisions: the pod is a stray, counted by
// its node's labels once bound.
func TestTallyIgnoresUnsignedDecisions(t *testing.T) {
	const rev = "web/rs1"
	index := map[string]int{"a": 0, "b": 1}
	bound := func(p *corev1.Pod) { p.Spec.NodeName = "node-b" }
	signed := tallyPod("signed", "a", bound)
	forged := []*corev1.Pod{
		tallyPod("unsigned", "", bound, func(p *corev1.Pod) { p.Annotations = map[string]string{annotations.Group: "a"} }),
		tallyPod("copied", "", bound, func(p *corev1.Pod) { p.Annotations = maps.Clone(signed.Annotations) }),
		tallyPod("changed", "a", bound, func(p *corev1.Pod) { p.Annotations[annotations.Group] = "b" }),
		tallyPod("other-key", "", bound, func(p *corev1.Pod) {
			p.Annotations = map[string]string{annotations.Group: "a", annotations.Signature: decision.RandomSigner().Sign(p.UID, "a", "")}
		}),
	}
	tl := newTally()
	tl.Observe(signed)
	for _, p := range forged {
		tl.Observe(p)
		if tl.Decided(p.UID) {
			t.Errorf("%s: decided", p.Name)
		}
	}
	c := make([]int64, 2)
	tl.Counts(rev, index, c)
	if c[0] != 1 || c[1] != 0 {
		t.Errorf("counts %v, want [1 0]: only the signed decision", c)
	}
	strays := tl.StrayCounts(rev, 2, groupsFunc{key: "s", group: func(string) int { return 1 }})
	if tl.Strays(rev) != len(forged) || len(strays) != 2 || strays[1] != int64(len(forged)) {
		t.Errorf("strays %v of %d, want the %d forged pods in group b, by their node", strays, tl.Strays(rev), len(forged))
	}
	bare := NewTally()
	if bare.Observe(signed); bare.Decided(signed.UID) {
		t.Error("a tally without a Signer takes a decision")
	}
}

// beyondCaps marks a pod released beyond caps, signed by signer.
func beyondCaps(signer *decision.Signer) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		decision.MarkBeyondCaps(p, decision.Record{Reason: RecordBeyondCaps}, signer.SignBeyondCaps(p.UID), nil)
	}
}

// TestTallyBeyondCapsPodsAreNotStrays: a bound pod apportion released beyond
// caps counts nowhere, not in the group its node serves; one whose mark does
// not verify (written by a client, another key's, or with a group added
// after signing) is a stray like any pod without a decision.
func TestTallyBeyondCapsPodsAreNotStrays(t *testing.T) {
	const rev = "web/rs1"
	bound := func(p *corev1.Pod) { p.Spec.NodeName = "spot-1" }
	tl := newTally()
	tl.Observe(tallyPod("d1", "b", bound))
	tl.Observe(tallyPod("beyond-1", "", beyondCaps(tallySigner), bound))
	tl.Observe(tallyPod("beyond-2", "", beyondCaps(tallySigner), bound))
	tl.Observe(tallyPod("unbound", "", beyondCaps(tallySigner)))
	forged := []*corev1.Pod{
		tallyPod("unsigned", "", bound, func(p *corev1.Pod) {
			p.Annotations = map[string]string{annotations.BeyondCaps: "true"}
		}),
		tallyPod("other-key", "", beyondCaps(decision.RandomSigner()), bound),
		tallyPod("grouped", "", beyondCaps(tallySigner), bound, func(p *corev1.Pod) { p.Annotations[annotations.Group] = "b" }),
	}
	for _, p := range forged {
		tl.Observe(p)
	}
	strays := tl.StrayCounts(rev, 2, groupsFunc{key: "s", group: func(string) int { return 1 }})
	if tl.Strays(rev) != len(forged) || len(strays) != 2 || strays[1] != int64(len(forged)) {
		t.Errorf("strays %v of %d, want the %d forged marks only, in group b by their node", strays, tl.Strays(rev), len(forged))
	}
	c := make([]int64, 2)
	tl.Counts(rev, map[string]int{"a": 0, "b": 1}, c)
	if c[0] != 0 || c[1] != 1 {
		t.Errorf("counts %v, want [0 1]: the decided pod alone", c)
	}
	if tl.Decided("beyond-1") {
		t.Error("a pod beyond caps counts as decided into a group")
	}
}

// TestTallyForgetsPodThatLostItsOwner: a pod whose controller reference is
// removed (orphaned) leaves its revision's counts and strays.
func TestTallyForgetsPodThatLostItsOwner(t *testing.T) {
	const rev = "web/rs1"
	orphan := func(p *corev1.Pod) { p.OwnerReferences = nil }
	bound := func(p *corev1.Pod) { p.Spec.NodeName = "node-a" }
	tl := newTally()
	tl.Observe(tallyPod("d1", "a"))
	tl.Observe(tallyPod("s1", "", bound))
	tl.Record("p1", rev, "a", time.Now())
	tl.Observe(tallyPod("d1", "a", orphan))
	tl.Observe(tallyPod("s1", "", bound, orphan))
	tl.Observe(tallyPod("p1", "", orphan))
	c := make([]int64, 1)
	tl.Counts(rev, map[string]int{"a": 0}, c)
	if c[0] != 0 || tl.Strays(rev) != 0 {
		t.Fatalf("counts %v, %d strays: want the orphans out of the revision", c, tl.Strays(rev))
	}
	if len(tl.pods) != 0 || len(tl.pending) != 0 {
		t.Errorf("orphans still tracked: %v, pending %v", tl.pods, tl.pending)
	}
}

// TestTallyStrayCountsFollowNodes: with the node informer's events, the
// stray counts are kept between decisions, and a stray coming or going, a
// node relabelled or another strategy computes them again from the nodes'
// current labels.
func TestTallyStrayCountsFollowNodes(t *testing.T) {
	const rev = "web/rs1"
	labels := map[string]string{"n1": "spot", "n2": "spot", "n3": "od"}
	group := func(node string) int {
		switch labels[node] {
		case "od":
			return 0
		case "spot":
			return 1
		}
		return -1
	}
	lookups := 0
	ng := groupsFunc{key: "od:spot", group: group, lookups: &lookups}
	tl := newTally()
	nodes := tl.NodeEventHandler()
	node := func(name, ct string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"ct": ct}}}
	}
	on := func(n string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Spec.NodeName = n } }
	for i, n := range []string{"n1", "n1", "n2", "n3"} {
		tl.Observe(tallyPod(fmt.Sprintf("s%d", i), "", on(n)))
	}
	want := func(what string, od, spot int64, wantLookups int) {
		t.Helper()
		lookups = 0
		got := tl.StrayCounts(rev, 2, ng)
		if len(got) != 2 || got[0] != od || got[1] != spot {
			t.Fatalf("%s: strays %v, want [%d %d]", what, got, od, spot)
		}
		if lookups != wantLookups {
			t.Fatalf("%s: %d node look-ups, want %d", what, lookups, wantLookups)
		}
		got[0] = 99 // the caller's copy
	}
	want("first count: one look-up per node", 1, 3, 3)
	want("nothing changed: no look-up", 1, 3, 0)

	labels["n1"] = "od"
	nodes.OnUpdate(node("n1", "spot"), node("n1", "od"))
	want("n1 relabelled to on-demand", 3, 1, 3)
	nodes.OnUpdate(node("n1", "od"), node("n1", "od"))
	want("a node update without a label change", 3, 1, 0)

	tl.Observe(tallyPod("s9", "", on("n2")))
	want("a stray more on n2", 3, 2, 3)
	tl.Forget(tallyPod("s0", "", on("n1")))
	want("a stray less on n1", 2, 2, 3)

	delete(labels, "n3")
	nodes.OnDelete(node("n3", "od"))
	want("n3 gone", 1, 2, 3)

	lookups = 0
	other := groupsFunc{key: "spot:od", group: func(n string) int { return 1 - group(n) }, lookups: &lookups}
	if got := tl.StrayCounts(rev, 2, other); len(got) != 2 || got[0] != 2 || got[1] != 1 || lookups != 3 {
		t.Fatalf("another strategy: strays %v after %d look-ups, want [2 1] after 3", got, lookups)
	}

	// Without the node events, every call looks the nodes up.
	plain := newTally()
	plain.Observe(tallyPod("s1", "", on("n1")))
	for range 2 {
		lookups = 0
		if got := plain.StrayCounts(rev, 2, ng); len(got) != 2 || got[0] != 1 || lookups != 1 {
			t.Fatalf("without node events: strays %v after %d look-ups, want [1 0] after 1", got, lookups)
		}
	}
}

// shadowed is a mutation giving a pod a shadow decision for group, signed by
// signer (nil: unsigned).
func shadowed(group string, signer *decision.Signer) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		sh := decision.Shadow{Group: group, NodePool: "pool"}
		if signer != nil {
			sh.Signature = signer.SignShadow(p.UID, group, "pool")
		}
		decision.WriteShadow(p, sh)
	}
}

// TestTallyCountsShadowDecisionsApart: a signed shadow decision counts in
// its group under the revision's ShadowRevision, not in the real counts (a
// bound one is a stray of the real revision, by its node); a forged one (no
// signature, another key's, or a decision's signature) counts nowhere but as
// a stray, like any undecided bound pod.
func TestTallyCountsShadowDecisionsApart(t *testing.T) {
	const rev = "web/rs1"
	shadowRev := ShadowRevision("web", "rs1")
	index := map[string]int{"a": 0, "b": 1}
	bound := func(p *corev1.Pod) { p.Spec.NodeName = "node-b" }
	tl := newTally()
	signed := tallyPod("shadow", "", bound, shadowed("a", tallySigner))
	tl.Observe(signed)
	forged := []*corev1.Pod{
		tallyPod("unsigned", "", bound, shadowed("a", nil)),
		tallyPod("other-key", "", bound, shadowed("a", decision.RandomSigner())),
		tallyPod("decision-signature", "", bound, func(p *corev1.Pod) {
			decision.WriteShadow(p, decision.Shadow{Group: "a", NodePool: "pool", Signature: tallySigner.Sign(p.UID, "a", "pool")})
		}),
		tallyPod("copied", "", bound, func(p *corev1.Pod) { p.Annotations = maps.Clone(signed.Annotations) }),
	}
	for _, p := range forged {
		if tl.Observe(p); tl.Decided(p.UID) {
			t.Errorf("%s: a forged shadow decision counts", p.Name)
		}
	}
	if !tl.Decided(signed.UID) {
		t.Error("the signed shadow decision does not count")
	}
	counts, shadow := make([]int64, 2), make([]int64, 2)
	tl.Counts(rev, index, counts)
	tl.Counts(shadowRev, index, shadow)
	if counts[0] != 0 || counts[1] != 0 || shadow[0] != 1 || shadow[1] != 0 {
		t.Errorf("real %v shadow %v, want [0 0] and [1 0]", counts, shadow)
	}
	if tl.Strays(rev) != len(forged)+1 || tl.Strays(shadowRev) != 0 {
		t.Errorf("strays %d and %d, want the %d forged pods and the shadow one, of the real revision only", tl.Strays(rev), tl.Strays(shadowRev), len(forged))
	}
	// A pending shadow decision ends when the informer shows it.
	next := tallyPod("next", "", bound)
	tl.Record(next.UID, shadowRev, "b", time.Now())
	tl.Observe(next) // bound before its shadow decision shows: not a stray
	if tl.Strays(rev) != len(forged)+1 {
		t.Errorf("a pod with a pending shadow decision counts as a stray")
	}
	shadowed("b", tallySigner)(next)
	tl.Observe(next)
	shadow = make([]int64, 2)
	tl.Counts(shadowRev, index, shadow)
	if shadow[0] != 1 || shadow[1] != 1 {
		t.Errorf("shadow %v, want [1 1]: the pending decision counted once", shadow)
	}
	// Bound shadow pods are strays of the real revision by their node,
	// until they go.
	ng := groupsFunc{key: "s", group: func(node string) int {
		if node == "node-b" {
			return 1
		}
		return -1
	}}
	if got := tl.StrayCounts(rev, 2, ng); !slices.Equal(got, []int64{0, int64(len(forged)) + 2}) {
		t.Errorf("stray counts %v, want the forged pods and the 2 shadow ones on node-b", got)
	}
	tl.Forget(signed)
	tl.Forget(next)
	if tl.Strays(rev) != len(forged) {
		t.Errorf("%d strays after the shadow pods went, want %d", tl.Strays(rev), len(forged))
	}
}

// jobPod is a pod of the Job (or, with kind Workflow, the Argo Workflow)
// uid, decided for group (signed) unless group is empty.
func jobPod(kind, owner, uid, group string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	apiVersion := "batch/v1"
	if kind == "Workflow" {
		apiVersion = "argoproj.io/v1alpha1"
	}
	o := test.PodOptions{ObjectMeta: metav1.ObjectMeta{Namespace: "ci", Name: uid, UID: types.UID(uid),
		OwnerReferences: test.OwnedBy(apiVersion, kind, owner, types.UID(owner))}}
	if group != "" {
		o.Group, o.Signer = group, tallySigner
	}
	p := test.Pod(o)
	for _, m := range mutate {
		m(p)
	}
	return p
}

func phase(ph corev1.PodPhase) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Status.Phase = ph } }

// TestTallyCountsLiveBatchPods: a Job's or a Workflow's pods are counted
// under their owner, and a pod that completes (Succeeded or Failed, an
// informer update) leaves the count, so that the next pods are decided from
// the live ones.
func TestTallyCountsLiveBatchPods(t *testing.T) {
	index := map[string]int{"a": 0, "b": 1}
	tl := newTally()
	counts := func(rev string) [2]int64 {
		c := make([]int64, 2)
		tl.Counts(rev, index, c)
		return [2]int64{c[0], c[1]}
	}
	for _, kind := range []string{"Job", "Workflow"} {
		rev := Revision("ci", kind+"-uid")
		tl.Observe(jobPod(kind, kind+"-uid", kind+"1", "a", phase(corev1.PodRunning)))
		tl.Observe(jobPod(kind, kind+"-uid", kind+"2", "a", phase(corev1.PodRunning)))
		tl.Observe(jobPod(kind, kind+"-uid", kind+"3", "b", phase(corev1.PodRunning)))
		if got := counts(rev); got != [2]int64{2, 1} {
			t.Fatalf("%s: live counts %v, want [2 1]", kind, got)
		}
		tl.Observe(jobPod(kind, kind+"-uid", kind+"1", "a", phase(corev1.PodSucceeded)))
		tl.Observe(jobPod(kind, kind+"-uid", kind+"3", "b", phase(corev1.PodFailed)))
		if got := counts(rev); got != [2]int64{1, 0} {
			t.Errorf("%s: after two pods completed, counts %v, want [1 0]", kind, got)
		}
	}
}

// TestTallyForgetsJobsThatCameAndWent: 200 Jobs, each with decided pods, a
// pending decision and a stray, run and complete; the tally then holds
// nothing about any of them.
func TestTallyForgetsJobsThatCameAndWent(t *testing.T) {
	tl := newTally()
	now := time.Now()
	bound := func(p *corev1.Pod) { p.Spec.NodeName = "n1" }
	for j := range 200 {
		job := fmt.Sprintf("job-%d", j)
		rev := Revision("ci", job)
		pods := []*corev1.Pod{
			jobPod("Job", job, job+"-a", "a", phase(corev1.PodRunning), bound),
			jobPod("Job", job, job+"-b", "b", phase(corev1.PodRunning), bound),
			jobPod("Job", job, job+"-stray", "", phase(corev1.PodRunning), bound),
			jobPod("Job", job, job+"-pending", "", phase(corev1.PodPending)),
		}
		for _, p := range pods {
			tl.Observe(p)
		}
		tl.Record(pods[3].UID, rev, "a", now)
		if tl.Strays(rev) != 1 || !tl.Decided(pods[3].UID) {
			t.Fatalf("%s: strays %d, pending decided %v", job, tl.Strays(rev), tl.Decided(pods[3].UID))
		}
		// Half of the Jobs' pods complete and are deleted with their Job
		// later; the others are deleted as they complete.
		for i, p := range pods {
			done := p.DeepCopy()
			done.Status.Phase = corev1.PodSucceeded
			if i == 1 {
				done.Status.Phase = corev1.PodFailed
			}
			tl.Observe(done)
			if j%2 == 0 {
				tl.Forget(done)
			}
		}
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if n := len(tl.pods) + len(tl.observed) + len(tl.pending) + len(tl.byRev) + len(tl.strays); n != 0 {
		t.Errorf("after 200 Jobs came and went the tally holds %d pods, %d revisions observed, %d pending, %d revisions pending, %d with strays",
			len(tl.pods), len(tl.observed), len(tl.pending), len(tl.byRev), len(tl.strays))
	}
}
