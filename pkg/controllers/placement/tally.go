package placement

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/apportion-dev/apportion/pkg/annotations"
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
// Pending decisions end when the informer shows the pod decided, terminating
// or gone, or after pendingMaxAge (the pod was deleted and its event lost).
type Tally struct {
	mu       sync.Mutex
	pods     map[types.UID]tallied
	observed map[string]map[string]int64 // revision -> group -> decided live pods
	pending  map[types.UID]pendingDecision
	byRev    map[string]map[types.UID]string // revision -> pending pod -> group
	strays   map[string]map[types.UID]string // revision -> bound undecided pod -> node
	synced   func() bool
}

type tallied struct {
	rev, group string // group "" while the pod is live but undecided
	stray      bool   // undecided and bound: counted by its node's labels
}

type pendingDecision struct {
	rev, group string
	at         time.Time
}

const pendingMaxAge = 10 * time.Minute

// NewTally returns an empty tally.
func NewTally() *Tally {
	return &Tally{
		pods:     map[types.UID]tallied{},
		observed: map[string]map[string]int64{},
		pending:  map[types.UID]pendingDecision{},
		byRev:    map[string]map[types.UID]string{},
		strays:   map[string]map[types.UID]string{},
	}
}

// Revision is the key pods are tallied under.
func Revision(namespace, ownerKey string) string { return namespace + "/" + ownerKey }

// Observe takes the informer's current view of a pod (add or update).
func (t *Tally) Observe(pod *corev1.Pod) {
	key := workload.OwnerKey(pod)
	if key == "" {
		return
	}
	rev := Revision(pod.Namespace, key)
	live := pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
	t.mu.Lock()
	defer t.mu.Unlock()
	t.uncount(pod.UID)
	if !live {
		delete(t.pods, pod.UID)
		t.dropPending(pod.UID)
		return
	}
	group := pod.Annotations[annotations.Group]
	stray := group == "" && pod.Spec.NodeName != "" && !t.isPending(pod.UID)
	t.pods[pod.UID] = tallied{rev: rev, group: group, stray: stray}
	if stray {
		// Admitted without a decision (webhook down or failed open,
		// released by the janitor): counted in the group its node's
		// labels match, so later decisions compensate.
		if t.strays[rev] == nil {
			t.strays[rev] = map[types.UID]string{}
		}
		t.strays[rev][pod.UID] = pod.Spec.NodeName
	}
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
	pod, ok := obj.(*corev1.Pod)
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

// StrayCounts counts the revision's bound pods without a decision in the
// group groupOf returns for their node (-1: none), over groups groups; nil
// when the revision has none (the usual case, without allocation).
func (t *Tally) StrayCounts(rev string, groups int, groupOf func(node string) int) []int64 {
	t.mu.Lock()
	nodes := make([]string, 0, len(t.strays[rev]))
	for _, node := range t.strays[rev] {
		nodes = append(nodes, node)
	}
	t.mu.Unlock()
	if len(nodes) == 0 {
		return nil
	}
	var out []int64
	for _, node := range nodes {
		if i := groupOf(node); i >= 0 && i < groups {
			if out == nil {
				out = make([]int64, groups)
			}
			out[i]++
		}
	}
	return out
}

// Strays is the number of bound pods of the revision without a decision.
func (t *Tally) Strays(rev string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.strays[rev])
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

// EventHandler feeds the tally from a pod informer.
func (t *Tally) EventHandler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				t.Observe(pod)
			}
		},
		UpdateFunc: func(_, obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				t.Observe(pod)
			}
		},
		DeleteFunc: t.Forget,
	}
}

func (t *Tally) uncount(uid types.UID) {
	old, ok := t.pods[uid]
	if ok && old.stray {
		delete(t.strays[old.rev], uid)
		if len(t.strays[old.rev]) == 0 {
			delete(t.strays, old.rev)
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
