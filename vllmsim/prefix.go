package vllmsim

import (
	"sync"

	"github.com/tidwall/gjson"
)

// defaultBlockSize is vLLM's default --block-size, in tokens.
const defaultBlockSize = 16

// The prefix cache models vLLM's automatic prefix caching (APC, on by
// default in vLLM v1): the KV cache is kept in blocks of BlockSize tokens,
// and a full block is identified by a hash chained over every token before
// it (vllm/v1/core/kv_cache_utils.py hash_block_tokens). When a request is
// scheduled, vLLM counts its leading blocks already cached
// (KVCacheManager.get_computed_blocks) and computes only the rest; at most
// prompt_tokens − 1 tokens hit, since the last one is recomputed for its
// logits, and only whole blocks count. Blocks are cached as they are
// scheduled, and a finished request frees its blocks tail first, so the
// leading blocks, shared by most requests, are evicted last.
//
// The simulator's tokenizer is a quarter of the prompt's bytes, so a block
// is 4 × BlockSize bytes of the prompt as vLLM's chat template would lay it
// out: the tool definitions first (chat templates render them into the
// system turn), then the system prompt, then each message's text in order.
// Role names and template markup are not hashed (they would change neither
// what is shared nor, much, where blocks end). Two requests that share
// their tools, system prompt and first messages byte for byte share their
// leading blocks, as they would in vLLM.

// blockHasher hashes a prompt's bytes into chained block hashes: block i's
// hash is 64-bit FNV-1a over every byte up to the end of block i, which is
// the same as hashing block i's bytes seeded with block i−1's hash, as
// vLLM chains its block hashes. A nil *blockHasher ignores writes, so the
// parsers can feed it unconditionally when the cache is off.
type blockHasher struct {
	h       uint64
	n       int // bytes (or token ids) in the block being filled
	size    int // bytes (or token ids) per block
	blocks  []uint64
	stopped bool // the rest of the prompt is not hashed (see stop)
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
	// tokenIDSeed starts the hash of prompts given as token ids, so that
	// their blocks never collide with those of a text prompt.
	tokenIDSeed = fnvOffset ^ 0x9e3779b97f4a7c15
)

// newBlockHasher returns a hasher for a text prompt, or nil when the
// Server has no prefix cache.
func (s *Server) newBlockHasher() *blockHasher {
	if s.prefix == nil {
		return nil
	}
	return &blockHasher{h: fnvOffset, size: 4 * s.prefix.blockSize}
}

// newTokenIDHasher returns a hasher for a prompt given as token ids, or
// nil when the Server has no prefix cache.
func (s *Server) newTokenIDHasher() *blockHasher {
	if s.prefix == nil {
		return nil
	}
	return &blockHasher{h: tokenIDSeed, size: s.prefix.blockSize}
}

// write hashes s, the next bytes of the prompt.
func (bh *blockHasher) write(s string) {
	if bh == nil || bh.stopped {
		return
	}
	h, n := bh.h, bh.n
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
		if n++; n == bh.size {
			bh.blocks = append(bh.blocks, h)
			n = 0
		}
	}
	bh.h, bh.n = h, n
}

// writeTokenID hashes one token id of a prompt given as token ids (raw is
// its JSON number); a block is then BlockSize ids.
func (bh *blockHasher) writeTokenID(raw string) {
	if bh == nil || bh.stopped {
		return
	}
	for i := 0; i < len(raw); i++ {
		bh.h = (bh.h ^ uint64(raw[i])) * fnvPrime
	}
	bh.h = (bh.h ^ ',') * fnvPrime
	if bh.n++; bh.n == bh.size {
		bh.blocks = append(bh.blocks, bh.h)
		bh.n = 0
	}
}

// writeContent hashes a message's content as contentText counts it: a
// string, or the text of each part.
func (bh *blockHasher) writeContent(c gjson.Result) {
	if bh == nil {
		return
	}
	if c.Type == gjson.String {
		bh.write(c.Str)
		return
	}
	c.ForEach(func(_, part gjson.Result) bool {
		if t := part.Get("text"); t.Type == gjson.String {
			bh.write(t.Str)
		}
		return true
	})
}

// stop ends hashing: the prompt's later bytes are not known to the
// simulator in the order vLLM lays them out, so no block after this point
// can hit (they are computed, and not cached).
func (bh *blockHasher) stop() {
	if bh != nil {
		bh.stopped = true
	}
}

// clone is an independent copy of bh (nil for nil).
func (bh *blockHasher) clone() *blockHasher {
	if bh == nil {
		return nil
	}
	c := *bh
	c.blocks = append([]uint64(nil), bh.blocks...)
	return &c
}

// cachedPrompt is one prompt of a request as the prefix cache sees it.
type cachedPrompt struct {
	tokens int      // prompt tokens
	blocks []uint64 // hashes of its full blocks, in order
}

// cacheable records the prompt bh hashed, of tokens tokens, as p's only
// prompt; it does nothing when bh is nil (no prefix cache).
func (p *plan) cacheable(bh *blockHasher, tokens int) {
	if bh != nil {
		p.cache = append(p.cache, cachedPrompt{tokens: tokens, blocks: bh.blocks})
	}
}

// prefixCache is one replica's cache of prompt blocks: a hash index and an
// LRU list, bounded to capacity blocks. It stands apart from KVCacheTokens
// (which reports the running requests' share); vLLM's prefix cache is the
// KV cache's blocks themselves, so a preset sizes it to the KV capacity.
type prefixCache struct {
	blockSize, capacity int

	mu    sync.Mutex
	index map[uint64]*cacheBlock // guarded by mu
	// head is the most recently used block, tail the next to be evicted;
	// guarded by mu.
	head, tail *cacheBlock
}

// cacheBlock is one cached block, a node of the LRU list.
type cacheBlock struct {
	hash       uint64
	prev, next *cacheBlock
}

func newPrefixCache(blockSize, capacity int) *prefixCache {
	return &prefixCache{blockSize: blockSize, capacity: capacity, index: make(map[uint64]*cacheBlock, min(capacity, 1<<16))}
}

// admit looks the prompts up as vLLM does when it schedules a request and
// caches their blocks. It returns the tokens queried (every prompt token)
// and the tokens found cached: per prompt, the leading run of cached full
// blocks, at most prompt tokens − 1.
func (c *prefixCache) admit(prompts []cachedPrompt) (queried, hit int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, pr := range prompts {
		queried += pr.tokens
		full := min(len(pr.blocks), pr.tokens/c.blockSize)
		limit := min(full, max(0, pr.tokens-1)/c.blockSize)
		n := 0
		for n < limit && c.index[pr.blocks[n]] != nil {
			n++
		}
		hit += n * c.blockSize
		// Tail first, so the leading blocks end up most recently used and
		// are evicted last, as vLLM frees a request's blocks in reverse.
		for i := full - 1; i >= 0; i-- {
			c.touch(pr.blocks[i])
		}
	}
	return queried, hit
}

// touch makes the block hash the most recently used, caching it (and
// evicting the least recently used block when full) if it is not cached.
// c.mu is held.
func (c *prefixCache) touch(hash uint64) {
	b := c.index[hash]
	switch {
	case b != nil:
		if b == c.head {
			return
		}
		c.unlink(b)
	case len(c.index) >= c.capacity:
		// Reuse the evicted node for the new block.
		b = c.tail
		c.unlink(b)
		delete(c.index, b.hash)
		b.hash = hash
		c.index[hash] = b
	default:
		b = &cacheBlock{hash: hash}
		c.index[hash] = b
	}
	b.next = c.head
	if c.head != nil {
		c.head.prev = b
	}
	c.head = b
	if c.tail == nil {
		c.tail = b
	}
}

// unlink takes b out of the LRU list. c.mu is held.
func (c *prefixCache) unlink(b *cacheBlock) {
	if b.prev != nil {
		b.prev.next = b.next
	} else {
		c.head = b.next
	}
	if b.next != nil {
		b.next.prev = b.prev
	} else {
		c.tail = b.prev
	}
	b.prev, b.next = nil, nil
}
