package txn

import (
	"slices"
	"sync"
)

// bufPool recycles the buffers of encoded records and audit groups. They
// are garbage as soon as the update that stored them has committed (bbolt
// copies values into its pages), and at a few kilobytes per invocation they
// were a sixth of the runtime's allocations, and so of its GC work.
var bufPool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooled bounds the buffers kept, so that one huge record does not pin
// its memory.
const maxPooled = 64 << 10

// getBuf returns a pooled buffer, emptied, with at least n bytes of
// capacity. Store the grown slice back in *p before putBuf(p).
func getBuf(n int) *[]byte {
	p := bufPool.Get().(*[]byte)
	*p = slices.Grow((*p)[:0], n)
	return p
}

// putBuf returns p to the pool. Nothing may use *p afterwards. A nil p is
// ignored.
func putBuf(p *[]byte) {
	if p == nil || cap(*p) > maxPooled {
		return
	}
	bufPool.Put(p)
}
