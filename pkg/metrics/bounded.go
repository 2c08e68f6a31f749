package metrics

import "sync"

// OtherValue is the label value of every value past a Bounded label's cap.
const OtherValue = "other"

// maxValueLen bounds one label value: group keys are user text.
const maxValueLen = 128

// Bounded caps the distinct values a label takes when they come from tenant
// input (group keys of strategies, registry hosts of image references): the
// first max distinct values are kept as they are, every later one is
// counted as OtherValue. A series per value would otherwise let any tenant
// grow the metrics endpoint, and Prometheus with it, without bound.
type Bounded struct {
	mu   sync.Mutex
	max  int
	seen map[string]struct{}
}

// NewBounded returns a cap of limit distinct values.
func NewBounded(limit int) *Bounded {
	return &Bounded{max: limit, seen: make(map[string]struct{}, limit)}
}

// Value is the label value to use for v.
func (b *Bounded) Value(v string) string {
	if len(v) > maxValueLen {
		v = v[:maxValueLen]
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.seen[v]; ok {
		return v
	}
	if len(b.seen) >= b.max {
		return OtherValue
	}
	b.seen[v] = struct{}{}
	return v
}

// Capped caps the objects (workloads) exported with series of their own:
// the first max keys are admitted, later ones are not until an admitted one
// is forgotten. Unlike Bounded, nothing is counted as OtherValue: the
// caller exports nothing for a key not admitted, and deletes the series of a
// key it forgets (a workload gone), so series do not pile up.
type Capped struct {
	mu   sync.Mutex
	max  int
	keys map[string]struct{}
}

// NewCapped returns a cap of limit keys.
func NewCapped(limit int) *Capped {
	return &Capped{max: limit, keys: map[string]struct{}{}}
}

// Admit reports whether key may have series: it was admitted before, or
// there is room (then it is admitted).
func (c *Capped) Admit(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.keys[key]; ok {
		return true
	}
	if len(c.keys) >= c.max {
		return false
	}
	c.keys[key] = struct{}{}
	return true
}

// Forget frees key's place; it reports whether key was admitted.
func (c *Capped) Forget(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.keys[key]
	delete(c.keys, key)
	return ok
}

// Len is the number of keys admitted.
func (c *Capped) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.keys)
}

// Caps of the labels that carry tenant input.
var (
	// Groups bounds the group label of apportion_placement_decisions_total.
	Groups = NewBounded(200)
	// NodePools bounds its nodepool label.
	NodePools = NewBounded(200)
	// Registries bounds the registry label of
	// apportion_image_breaker_open_total.
	Registries = NewBounded(50)
	// Workloads bounds the workloads with series of their own in
	// apportion_workload_drift and apportion_workload_pods.
	Workloads = NewCapped(500)
)
