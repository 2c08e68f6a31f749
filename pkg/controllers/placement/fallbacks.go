package placement

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	podutil "sigs.k8s.io/karpenter/pkg/utils/pod"

	"github.com/apportion-dev/apportion/pkg/annotations"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/podcache"
	"github.com/apportion-dev/apportion/pkg/workload"
)

// fallbackPods counts, per revision and group, the live pods placed by
// capacity fallback, fed by the pod informer and by this process's own
// fallback decisions until the informer shows them (as the Tally does for
// every decision). The Tally counts these pods in their groups, but the
// deletion costs number them apart from the split: the placement controller
// subtracts them to tell a new pod's cost.
type fallbackPods struct {
	mu      sync.Mutex
	signer  *decision.Signer
	pods    map[types.UID]fallbackPod
	byRev   map[string]map[string]int64 // revision -> group -> fallback pods
	pending map[types.UID]time.Time     // decided here, not shown by the informer yet
	synced  func() bool
}

type fallbackPod struct{ rev, group string }

func newFallbackPods() *fallbackPods {
	return &fallbackPods{pods: map[types.UID]fallbackPod{}, byRev: map[string]map[string]int64{}, pending: map[types.UID]time.Time{}}
}

// observe takes the informer's current view of a pod.
func (f *fallbackPods) observe(pod *corev1.Pod) {
	var fp fallbackPod
	key := workload.OwnerKey(pod)
	live := key != "" && !podutil.IsTerminating(pod) && !podutil.IsTerminal(pod)
	placed := live && pod.Annotations[annotations.Fallback] != ""
	if placed {
		// Only a pod with a fallback annotation costs an HMAC.
		d, ok := f.signer.Read(pod)
		placed = ok && d.Group != "" && d.Fallback != nil
		fp = fallbackPod{rev: Revision(pod.Namespace, key), group: d.Group}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, pending := f.pending[pod.UID]; pending && live && !placed {
		return // decided here; the informer still shows the gated pod
	}
	f.remove(pod.UID)
	if placed {
		f.add(pod.UID, fp)
	}
}

// forget takes a pod's deletion (the object may be a tombstone).
func (f *fallbackPods) forget(obj any) {
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if pod, ok := podcache.View(obj); ok {
		f.mu.Lock()
		f.remove(pod.UID)
		f.mu.Unlock()
	}
}

// record notes a fallback decision this process wrote.
func (f *fallbackPods) record(uid types.UID, rev, group string, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.pods[uid]; !ok {
		f.add(uid, fallbackPod{rev: rev, group: group})
		f.pending[uid] = now
	}
}

// unrecord takes back a fallback decision recorded before its write, when
// the write did not land.
func (f *fallbackPods) unrecord(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, pending := f.pending[uid]; pending {
		f.remove(uid)
	}
}

// counts adds the revision's fallback pods per group into counts (indexed by
// index; groups not in index are not counted) and returns how many it added.
// ok is false until the informer's initial list is in.
func (f *fallbackPods) counts(rev string, index map[string]int, counts []int64, now time.Time) (n int64, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.synced != nil && !f.synced() {
		return 0, false
	}
	for uid, at := range f.pending {
		if now.Sub(at) > pendingMaxAge {
			f.remove(uid) // deleted before the informer showed it
		}
	}
	for group, k := range f.byRev[rev] {
		if i, in := index[group]; in {
			counts[i] += k
			n += k
		}
	}
	return n, true
}

func (f *fallbackPods) add(uid types.UID, fp fallbackPod) {
	f.pods[uid] = fp
	if f.byRev[fp.rev] == nil {
		f.byRev[fp.rev] = map[string]int64{}
	}
	f.byRev[fp.rev][fp.group]++
}

func (f *fallbackPods) remove(uid types.UID) {
	fp, ok := f.pods[uid]
	if !ok {
		return
	}
	delete(f.pods, uid)
	delete(f.pending, uid)
	if f.byRev[fp.rev][fp.group]--; f.byRev[fp.rev][fp.group] <= 0 {
		delete(f.byRev[fp.rev], fp.group)
		if len(f.byRev[fp.rev]) == 0 {
			delete(f.byRev, fp.rev)
		}
	}
}

// eventHandler feeds the counts from a pod informer.
func (f *fallbackPods) eventHandler() toolscache.ResourceEventHandler {
	return podHandler(f.observe, f.forget)
}
