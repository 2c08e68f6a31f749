package placement

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/apportion-dev/apportion/pkg/annotations"
)

func tallyPod(uid, group string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: uid, UID: types.UID(uid),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs1", Controller: ptr.To(true)}}}}
	if group != "" {
		p.Annotations = map[string]string{annotations.Group: group}
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func TestTallyFollowsEventsAndPendingDecisions(t *testing.T) {
	const rev = "web/rs1"
	index := map[string]int{"a": 0, "b": 1}
	now := time.Now()
	tl := NewTally()
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
	tl := NewTally()
	strays := func() []int64 { return tl.StrayCounts(rev, 2, func(node string) int { return nodes[node] }) }
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
