package models

import (
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// entryOverhead is what the cache counts for one entry beyond its key and vector: the map
// slot, the list element and the slice and string headers, rounded up.
const entryOverhead = 128

// cached is one input's answer as the cache keeps it. vec belongs to the cache: it is copied
// in by add and out by get, so that no caller holds storage another request reads.
type cached struct {
	vec       []float32
	truncated bool // the input was cut to the maximum length to get vec
}

func entrySize(key string, c cached) int64 {
	return int64(len(key)) + 4*int64(len(c.vec)) + entryOverhead
}

// cache is one version's response cache: a least-recently-used map from the exact text and
// the options that change its answer to that answer, bounded in bytes (see entrySize). It is
// safe for concurrent use; the lock is held only to look up and to insert, never while a
// text is tokenized or run. A nil *cache caches nothing.
//
// simplelru bounds entries, not bytes, so it is made unbounded in entries and the byte
// bound is kept here with RemoveOldest.
type cache struct {
	max   int64
	mu    sync.Mutex
	lru   *simplelru.LRU[string, cached]
	bytes int64 // sum of entrySize over lru
}

// newCache returns a cache of at most maxBytes, or nil (no cache) when maxBytes ≤ 0.
func newCache(maxBytes int64) *cache {
	if maxBytes <= 0 {
		return nil
	}
	lru, err := simplelru.NewLRU[string, cached](math.MaxInt, nil)
	if err != nil {
		panic(err) // only for a size ≤ 0
	}
	return &cache{max: maxBytes, lru: lru}
}

// cacheKey is the input prefixed with one byte of the options that change its answer (a):
// embed's normalize or classify's and rerank's raw (a model does one task, so they never share
// a cache), truncate, since a text over the maximum length has an answer only when it is
// cut, and, when it is, the side it is cut from. A pair's key has a flag of its own and the
// first text's length in bytes before the two texts, so that no pair's key is another's, nor
// a single text's.
func cacheKey(in Input, a answer) string {
	var flags byte
	if a.cut.Truncate {
		flags |= 1
		if a.cut.Left {
			flags |= 8
		}
	}
	if a.variant {
		flags |= 2
	}
	if !in.Pair {
		return string(rune('0'+flags)) + in.Text
	}
	flags |= 4
	return string(rune('0'+flags)) + strconv.Itoa(len(in.Text)) + ":" + in.Text + in.Second
}

// get returns a copy of key's answer, which the caller owns, and marks it recently used.
func (c *cache) get(key string) (cached, bool) {
	if c == nil {
		return cached{}, false
	}
	c.mu.Lock()
	e, ok := c.lru.Get(key)
	c.mu.Unlock()
	if ok {
		// The slice is never written after add, so it may be copied outside the lock.
		e.vec = slices.Clone(e.vec)
	}
	return e, ok
}

// add stores a copy of e under key, evicting the least recently used entries until the
// cache is back within its bound. An entry larger than the whole bound is not stored.
func (c *cache) add(key string, e cached) {
	if c == nil {
		return
	}
	size := entrySize(key, e)
	if size > c.max {
		return
	}
	e.vec = slices.Clone(e.vec)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lru.Contains(key) {
		// Another request computed the same answer meanwhile; keep the one stored.
		return
	}
	c.lru.Add(key, e)
	c.bytes += size
	for c.bytes > c.max {
		k, old, ok := c.lru.RemoveOldest()
		if !ok {
			break
		}
		c.bytes -= entrySize(k, old)
	}
}

// usage returns the entries and bytes held, for tests.
func (c *cache) usage() (entries int, bytes int64) {
	if c == nil {
		return 0, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.bytes
}
