// Package compiled turns a strategy's text into what the controllers decide
// with: Strategy holds the parsed strategy, the apportioning Method over its
// groups, the Index of each group key (how the tally and the decisions name
// a group) and the Hash decision records carry. Parse and New compile once;
// Cache keeps the results per text, errors included, bounded because the
// texts are user input. It imports no client: the controllers, the policy
// status and the offline preview (pkg/plan) share it.
package compiled

import (
	"time"

	"github.com/jellydator/ttlcache/v3"

	"github.com/apportion-dev/apportion/pkg/apportion"
	"github.com/apportion-dev/apportion/pkg/decision"
	"github.com/apportion-dev/apportion/pkg/strategy"
)

// Strategy is a strategy ready to apportion with. Its fields are shared by
// every caller of a Cache: read them, never modify them.
type Strategy struct {
	Strategy *strategy.Strategy
	Method   *apportion.Method
	// Index maps each group key (strategy.Group.Key) to its group's index.
	Index map[string]int
	// Hash is decision.StrategyHash of the strategy.
	Hash string
}

// Parse parses raw and compiles it. Errors are the parser's and the
// engine's own, unwrapped: they reach users verbatim in Events and status
// conditions, and strategy.Error stays reachable with errors.As.
func Parse(raw string) (*Strategy, error) {
	s, err := strategy.Parse(raw)
	if err != nil {
		return nil, err
	}
	return New(s)
}

// New compiles a parsed strategy.
func New(s *strategy.Strategy) (*Strategy, error) {
	groups := make([]apportion.Group, len(s.Groups))
	for i, g := range s.Groups {
		groups[i] = apportion.Group{Base: int64(g.Base), Weight: int64(g.Weight), Max: int64(g.Max)}
	}
	m, err := apportion.New(groups)
	if err != nil {
		return nil, err
	}
	index := make(map[string]int, len(s.Groups))
	for i, k := range s.Keys() {
		index[k] = i
	}
	return &Strategy{Strategy: s, Method: m, Index: index, Hash: decision.StrategyHash(s)}, nil
}

// DefaultSize bounds a Cache: one entry per distinct strategy text in the
// cluster, far fewer than pods; a tenant writing many distinct ones only
// evicts the least recently used.
const DefaultSize = 4096

// ttl lets a strategy no workload uses any more go even below the bound.
const ttl = time.Hour

// Cache compiles each strategy text once. It is safe for concurrent use; two
// callers missing the same text at once both compile it, and either result
// is kept.
type Cache struct {
	items *ttlcache.Cache[string, result]
}

// result is a compiled strategy or why the text does not compile: a bad
// annotation on a workload of 1,000 pods is parsed once, not 1,000 times.
type result struct {
	strategy *Strategy
	err      error
}

// NewCache returns a cache of at most size texts.
func NewCache(size uint64) *Cache {
	return &Cache{items: ttlcache.New(ttlcache.WithTTL[string, result](ttl), ttlcache.WithCapacity[string, result](size))}
}

// Get returns raw compiled, or the error Parse returns for it.
func (c *Cache) Get(raw string) (*Strategy, error) {
	if item := c.items.Get(raw); item != nil {
		r := item.Value()
		return r.strategy, r.err
	}
	s, err := Parse(raw)
	c.items.Set(raw, result{strategy: s, err: err}, ttlcache.DefaultTTL)
	return s, err
}

// Len is the number of texts cached.
func (c *Cache) Len() int { return c.items.Len() }
