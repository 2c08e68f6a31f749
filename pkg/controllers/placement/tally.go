package placement

import (
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	podutil "sigs.k8s.io/karpenter/pkg/utils/pod"

	"github.com/apportion-dev/apportion/pkg/capacity"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// Tally counts, per revision (namespace + owner key) and group, the decided
// live pods, so that a decision costs O(groups) however many pods the
// revision holds. It is fed by the pod informer's events (Observe, Forget)
// and by this process's own decisions (Record), which it counts as pending
// until the informer shows them: counting from the cache alone would miss the
// decisions of a burst that the cache has not caught up with, and send the
// next pods to the same group.
//
// A pod counts as decided only when its decision carries apportion's
// signature: decision annotations a client wrote leave it undecided (a stray
// once bound, counted by its node's labels). A pod apportion released beyond
// caps (its signed decision says so, decision.MarkBeyondCaps) counts nowhere:
// neither decided nor a stray. A pod decided in shadow mode
// (a signed apportion.dev/shadow annotation) counts in its group under the
// revision's ShadowRevision, never with the real decisions; once bound, it
// is also a stray of the real revision, which only a workload no longer in
// shadow mode is decided by: its shadow decision changed nothing, so it runs
// wherever the scheduler put it.
//
// Pending decisions end when the informer shows the pod decided, terminating
// or gone, or after pendingMaxAge (the pod was deleted and its event lost).
type Tally struct {
	mu       sync.Mutex
	signer   *decision.Signer
	pods     map[types.UID]tallied
	observed map[string]map[string]int64 // revision -> group -> decided live pods
	pending  map[types.UID]pendingDecision
	byRev    map[string]map[types.UID]string // revision -> pending pod -> group
	strays   map[string]*revStrays           // revision -> its bound undecided pods
	// stamp orders the changes of strays and node labels: the memo of a
	// revision's stray counts is valid while neither moved past it.
	stamp      uint64
	nodesStamp uint64 // stamp of the last node label change
	watchNodes bool   // NodeEventHandler was asked for: nodesStamp follows the nodes
	synced     func() bool
}

type tallied struct {
	rev, group string // group "" while the pod is live but undecided
	node       string // a stray's node: undecided and bound, counted by the node's labels
	strayRev   string // the revision it is a stray of: rev, or a shadow pod's real revision
}

// revStrays are a revision's strays by node, with the last StrayCounts.
type revStrays struct {
	n     int
	nodes map[string]int // node -> strays on it
	stamp uint64         // Tally.stamp at the last change
	memo  *strayMemo
}

type strayMemo struct {
	key               string // NodeGroups.Key
	stamp, nodesStamp uint64
	counts            []int64
}

type pendingDecision struct {
	rev, group string
	at         time.Time
}

const pendingMaxAge = 10 * time.Minute

// NewTally returns an empty tally. Until WithSigner gives it the placement
// controller's Signer, no pod counts as decided but by this process's own
// Record.
func NewTally() *Tally {
	return &Tally{
		pods:     map[types.UID]tallied{},
		observed: map[string]map[string]int64{},
		pending:  map[types.UID]pendingDecision{},
		byRev:    map[string]map[types.UID]string{},
		strays:   map[string]*revStrays{},
	}
}

// WithSigner makes the tally take the decisions s signed (the Signer the
// placement controller signs with); call it before the informer runs.
func (t *Tally) WithSigner(s *decision.Signer) *Tally {
	t.signer = s
	return t
}

// Revision is the key pods are tallied under.
func Revision(namespace, ownerKey string) string { return namespace + "/" + ownerKey }

// Observe takes the informer's current view of a pod (add or update).
func (t *Tally) Observe(pod *corev1.Pod) {
	key := workload.OwnerKey(pod)
	live := key != "" && !podutil.IsTerminating(pod) && !podutil.IsTerminal(pod)
	var group string
	shadow, beyondCaps := false, false
	if live {
		d, _ := t.signer.Read(pod) // outside the lock: an HMAC per event
		group, beyondCaps = d.Group, d.BeyondCaps
		if group == "" && decision.HasShadow(pod) {
			sh, _ := t.signer.ReadShadow(pod)
			group, shadow = sh.Group, sh.Group != ""
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.uncount(pod.UID)
	if !live {
		// Gone, or no longer counted in any revision: a pod that lost its
		// controller reference leaves its old revision.
		delete(t.pods, pod.UID)
		t.dropPending(pod.UID)
		return
	}
	realRev := Revision(pod.Namespace, key)
	rev := realRev
	if shadow {
		// Counted apart, in its revision's shadow split.
		rev = ShadowRevision(pod.Namespace, key)
	}
	tl := tallied{rev: rev, group: group}
	switch {
	case !podutil.IsScheduled(pod):
	case shadow:
		// Bound, a pod decided in shadow mode is a stray of the real
		// revision too: should the workload leave shadow mode without a
		// rollout, the real decisions count it where it runs, and so do
		// their deletion costs (ShadowStrayCounts).
		tl.node, tl.strayRev = pod.Spec.NodeName, realRev
		t.addStray(boundShadows(realRev), tl.node)
	case group == "" && !beyondCaps && !t.isPending(pod.UID):
		// Admitted without a decision (webhook down or failed open,
		// released by the janitor, or a decision a client wrote):
		// counted in the group its node's labels match, so later
		// decisions compensate. Not a pod released beyond caps: it
		// belongs to no group, whatever node it runs on, and counted
		// in a capped group's it would take a place of the group's own
		// pods.
		tl.node, tl.strayRev = pod.Spec.NodeName, realRev
	}
	if tl.node != "" {
		t.addStray(tl.strayRev, tl.node)
	}
	t.pods[pod.UID] = tl
	if group != "" {
		if t.observed[rev] == nil {
			t.observed[rev] = map[string]int64{}
		}
		t.observed[rev][group]++
		t.dropPending(pod.UID)
	}
}

// Forget takes a pod's deletion (the object may be a tombstone).
func (t *Tally) Forget(obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := podcache.View(obj)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.uncount(pod.UID)
	delete(t.pods, pod.UID)
	t.dropPending(pod.UID)
}

// Record notes a decision this process wrote, until the informer shows it.
func (t *Tally) Record(uid types.UID, rev, group string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pods[uid].group != "" {
		return // the informer was faster than us: already counted
	}
	t.pending[uid] = pendingDecision{rev: rev, group: group, at: now}
	if t.byRev[rev] == nil {
		t.byRev[rev] = map[types.UID]string{}
	}
	t.byRev[rev][uid] = group
}

// Unrecord takes back a decision Recorded before its write, when the write
// did not land.
func (t *Tally) Unrecord(uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropPending(uid)
}

// Decided reports whether the pod has a decision, seen or pending.
func (t *Tally) Decided(uid types.UID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, pending := t.pending[uid]
	return pending || t.pods[uid].group != ""
}

// Counts writes the revision's decided pods per group into counts, indexed
// by index (group key -> position); groups not in index are not counted.
func (t *Tally) Counts(rev string, index map[string]int, counts []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for group, n := range t.observed[rev] {
		if i, ok := index[group]; ok {
			counts[i] += n
		}
	}
	for _, group := range t.byRev[rev] {
		if i, ok := index[group]; ok {
			counts[i]++
		}
	}
}

// NodeGroups places a node in a group of a strategy by its labels.
type NodeGroups interface {
	// Key identifies the strategy: NodeGroups with equal keys give a node
	// the same group.
	Key() string
	// Group is the index of the node's group, -1 for none (or a node not
	// known).
	Group(node string) int
}

// StrayCounts counts the revision's bound pods without a decision in the
// group ng gives their node, over groups groups; nil when none falls in a
// group (the usual case, without allocation). Once NodeEventHandler feeds the
// tally, the counts are kept until a stray of the revision or a node's labels
// change, so that a decision costs the same however many strays the revision
// holds; otherwise each call looks up every node that holds a stray.
func (t *Tally) StrayCounts(rev string, groups int, ng NodeGroups) []int64 {
	t.mu.Lock()
	rs := t.strays[rev]
	if rs == nil {
		t.mu.Unlock()
		return nil
	}
	key := ng.Key()
	if m := rs.memo; t.watchNodes && m != nil && m.key == key && m.stamp == rs.stamp && m.nodesStamp == t.nodesStamp && len(m.counts) == groups {
		t.mu.Unlock()
		return slices.Clone(m.counts)
	}
	type onNode struct {
		node string
		n    int
	}
	nodes := make([]onNode, 0, len(rs.nodes))
	for node, n := range rs.nodes {
		nodes = append(nodes, onNode{node, n})
	}
	stamp, nodesStamp := rs.stamp, t.nodesStamp
	t.mu.Unlock()

	// Node look-ups outside the lock: the informer's events wait for none.
	var out []int64
	for _, x := range nodes {
		if i := ng.Group(x.node); i >= 0 && i < groups {
			if out == nil {
				out = make([]int64, groups)
			}
			out[i] += int64(x.n)
		}
	}
	t.mu.Lock()
	if t.watchNodes && t.strays[rev] == rs && rs.stamp == stamp && t.nodesStamp == nodesStamp {
		rs.memo = &strayMemo{key: key, stamp: stamp, nodesStamp: nodesStamp, counts: slices.Clone(out)}
	}
	t.mu.Unlock()
	return out
}

// ShadowStrayCounts counts, among the revision's StrayCounts, its bound pods
// decided in shadow mode: the deletion-cost controller ranks them in the
// group of their node with the decided pods once the workload has left
// shadow mode, so a new pod's cost counts them too.
func (t *Tally) ShadowStrayCounts(rev string, groups int, ng NodeGroups) []int64 {
	return t.StrayCounts(boundShadows(rev), groups, ng)
}

// boundShadows is the key the bound shadow pods of the real revision rev are
// counted under as well, by node: apart from ShadowRevision, whose shadow
// decisions count by group.
func boundShadows(rev string) string { return "bound shadows|" + rev }

// Strays is the number of bound pods of the revision without a decision.
func (t *Tally) Strays(rev string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if rs := t.strays[rev]; rs != nil {
		return rs.n
	}
	return 0
}

// NodeEventHandler feeds the tally from the node (metadata) informer: a
// node's labels changing, or a node coming or going, ends the stray counts
// StrayCounts kept. Register it before relying on them.
func (t *Tally) NodeEventHandler() toolscache.ResourceEventHandler {
	t.mu.Lock()
	t.watchNodes = true
	t.mu.Unlock()
	return capacity.OnLabelChange(func() {
		t.mu.Lock()
		t.stamp++
		t.nodesStamp = t.stamp
		t.mu.Unlock()
	})
}

func (t *Tally) addStray(rev, node string) {
	rs := t.strays[rev]
	if rs == nil {
		rs = &revStrays{nodes: map[string]int{}}
		t.strays[rev] = rs
	}
	rs.n++
	rs.nodes[node]++
	t.stamp++
	rs.stamp = t.stamp
}

func (t *Tally) removeStray(rev, node string) {
	rs := t.strays[rev]
	if rs == nil {
		return
	}
	if rs.n--; rs.n <= 0 {
		delete(t.strays, rev)
		return
	}
	if rs.nodes[node]--; rs.nodes[node] <= 0 {
		delete(rs.nodes, node)
	}
	t.stamp++
	rs.stamp = t.stamp
}

func (t *Tally) isPending(uid types.UID) bool {
	_, ok := t.pending[uid]
	return ok
}

// Expire drops pending decisions older than pendingMaxAge.
func (t *Tally) Expire(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for uid, p := range t.pending {
		if now.Sub(p.at) > pendingMaxAge {
			t.dropPending(uid)
		}
	}
}

// EventHandler feeds the tally from a pod informer (cached objects, read
// through podcache.View).
func (t *Tally) EventHandler() toolscache.ResourceEventHandler {
	return podHandler(t.Observe, t.Forget)
}

// podHandler gives the pods a pod informer adds or updates (as
// podcache.View reads them) to observe, and its deletions to forget.
func podHandler(observe func(*corev1.Pod), forget func(any)) toolscache.ResourceEventHandler {
	view := func(obj any) {
		if pod, ok := podcache.View(obj); ok {
			observe(pod)
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    view,
		UpdateFunc: func(_, obj any) { view(obj) },
		DeleteFunc: forget,
	}
}

func (t *Tally) uncount(uid types.UID) {
	old, ok := t.pods[uid]
	if ok && old.node != "" {
		t.removeStray(old.strayRev, old.node)
		if old.rev != old.strayRev { // a shadow pod
			t.removeStray(boundShadows(old.strayRev), old.node)
		}
	}
	if !ok || old.group == "" {
		return
	}
	if t.observed[old.rev][old.group]--; t.observed[old.rev][old.group] <= 0 {
		delete(t.observed[old.rev], old.group)
		if len(t.observed[old.rev]) == 0 {
			delete(t.observed, old.rev)
		}
	}
}

func (t *Tally) dropPending(uid types.UID) {
	p, ok := t.pending[uid]
	if !ok {
		return
	}
	delete(t.pending, uid)
	delete(t.byRev[p.rev], uid)
	if len(t.byRev[p.rev]) == 0 {
		delete(t.byRev, p.rev)
	}
}

// SetSynced tells the tally how to know that it has seen the informer's
// initial list (the event handler registration's HasSynced). Until then,
// counts would be short and decisions wait.
func (t *Tally) SetSynced(synced func() bool) {
	t.mu.Lock()
	t.synced = synced
	t.mu.Unlock()
}

// Synced reports whether the tally has seen the initial list; a tally
// without a registration (fed by hand) is always synced.
func (t *Tally) Synced() bool {
	t.mu.Lock()
	synced := t.synced
	t.mu.Unlock()
	return synced == nil || synced()
}
