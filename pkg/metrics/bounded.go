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

// Caps of the labels that carry tenant input.
var (
	// Groups bounds the group label of apportion_placement_decisions_total.
	Groups = NewBounded(200)
	// NodePools bounds its nodepool label.
	NodePools = NewBounded(200)
	// Registries bounds the registry label of
	// apportion_image_breaker_open_total.
	Registries = NewBounded(50)
)
