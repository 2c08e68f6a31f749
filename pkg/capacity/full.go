package capacity

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"

	"github.com/apportion-dev/apportion/pkg/metrics"
)

// ReasonFull is why a NodePool is left out before a pod is placed in it:
// its own state shows it cannot take the pod (a metric label value, as the
// Tracker's reasons are).
const ReasonFull = "full"

// ErrFull is wrapped by the answer for a NodePool that is full.
var ErrFull = errors.New("full")

// FullRefresh is how long the answer of which NodePools are full is kept
// when no NodePool changes (Invalidate ends it at once): the NodeClaims
// that count against a pool's limits come and go without one.
const FullRefresh = 2 * time.Second

// fullPools answers, from the cache only, which NodePools cannot take a
// pod: their own state shows that no new node can launch
// (LimitsBacked: a limit leaves less than the smallest instance type the
// pool allows, or, when that is unknown, nothing of nodes, cpu or memory,
// or less than nothing of any resource), and they have no node to run it
// on (no NodeClaim, launched or on its way, that is not being deleted). A
// pool with a node is taken to have room on it: the pod cache keeps no
// requests to tell otherwise, and unknown never leaves a pool out. The
// answer is computed at most once per FullRefresh (or after Invalidate),
// from one list of the cached NodeClaims, for every pool at once, and only
// when some pool has limits.
type fullPools struct {
	mu     sync.Mutex
	at     time.Time
	stale  bool
	full   map[string]string // NodePool -> why it is full
	failed bool              // the last list failed (logged once)
}

func (f *fullPools) invalidate() {
	f.mu.Lock()
	f.stale = true
	f.mu.Unlock()
}

// get returns the full pools among pools (the cached NodePools), reading
// the NodeClaims from r when the last answer is older than FullRefresh or
// a NodePool changed since. A list that fails leaves no pool out.
func (f *fullPools) get(ctx context.Context, r client.Reader, clk clock.PassiveClock, pools []*karpv1.NodePool) map[string]string {
	now := clk.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stale && !f.at.IsZero() && now.Sub(f.at) < FullRefresh {
		return f.full
	}
	f.stale, f.at = false, now
	limited := false
	for _, np := range pools {
		limited = limited || len(np.Spec.Limits) > 0
	}
	if !limited {
		f.full = nil
		return nil
	}
	var claims karpv1.NodeClaimList
	if err := r.List(ctx, &claims, client.UnsafeDisableDeepCopy); err != nil {
		if !f.failed {
			log.FromContext(ctx).Info("cannot read the NodeClaims: no NodePool is left out as full", "error", err.Error())
		}
		f.failed, f.full = true, nil
		return nil
	}
	f.failed = false
	full := Full(pools, claims.Items)
	for pool, why := range full {
		if _, was := f.full[pool]; !was {
			metrics.CapacityUnavailableTotal.WithLabelValues(KindNodePool, "cluster", ReasonFull).Inc()
			log.FromContext(ctx).Info("NodePool full: left out of new decisions", "nodepool", pool, "detail", why)
		}
	}
	f.full = full
	return full
}

// Full returns, of the NodePools, those whose own state shows they cannot
// take a pod, with why: LimitsBacked on the usage of their NodeClaims
// (claims, all of the cluster's) and the instance types the cluster has
// launched, and no NodeClaim of theirs that is not being deleted. The
// work is one pass over claims, plus the pools that have limits.
func Full(pools []*karpv1.NodePool, claims []karpv1.NodeClaim) map[string]string {
	byPool := map[string][]karpv1.NodeClaim{}
	for i := range claims {
		if pool := claims[i].Labels[karpv1.NodePoolLabelKey]; pool != "" {
			byPool[pool] = append(byPool[pool], claims[i])
		}
	}
	var known map[string]*cloudprovider.InstanceType
	var full map[string]string
	for _, np := range pools {
		if len(np.Spec.Limits) == 0 || np.DeletionTimestamp != nil || hasNode(byPool[np.Name]) {
			continue
		}
		if known == nil {
			known = KnownTypes(claims)
		}
		used := Usage(np, byPool[np.Name])
		if !LimitsBacked(np, used, AllowedTypes(np, known).Least) {
			continue
		}
		if full == nil {
			full = map[string]string{}
		}
		full[np.Name] = fmt.Sprintf("its limits leave no room for a new node (%s) and it has no node", Headroom(np, used, nil))
	}
	return full
}

// hasNode reports whether some NodeClaim is not being deleted: a node, or
// one on its way, that a pod may still run on.
func hasNode(claims []karpv1.NodeClaim) bool {
	for i := range claims {
		if claims[i].DeletionTimestamp == nil {
			return true
		}
	}
	return false
}
