package proc

import (
	"bytes"
	"sync"
)

// Output is what was captured of one output stream.
type Output struct {
	Data      []byte // the first bytes of the stream, at most the cap
	Truncated bool   // the stream wrote more than the cap
	Total     int64  // bytes the stream wrote in all, kept or not
}

// capture is the io.Writer os/exec copies a child's pipe into. It keeps the
// first max bytes and counts and discards the rest, so the pipe is always
// drained (the child never blocks on a full pipe) and memory stays bounded.
// Write never fails. It may scan the whole stream for markers (see
// evidence.go) without keeping it.
//
// os/exec writes from one goroutine, but after WaitDelay Wait may return
// while that goroutine is still running, so the fields are guarded.
type capture struct {
	mu        sync.Mutex
	max       int64
	buf       []byte
	total     int64
	truncated bool
	onExceed  func()      // called once, outside the lock, when the cap is first passed
	onWrite   func(n int) // called with each write's size, outside the lock
	scan      *scanner
}

func newCapture(max int64) *capture {
	// Preallocate modestly; append grows it up to max.
	return &capture{max: max, buf: make([]byte, 0, min(max, 4096))}
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.total += int64(len(p))
	if room := c.max - int64(len(c.buf)); room > 0 {
		c.buf = append(c.buf, p[:min(int64(len(p)), room)]...)
	}
	var fire func()
	if c.total > c.max && !c.truncated {
		c.truncated = true
		fire = c.onExceed
	}
	if c.scan != nil {
		c.scan.write(p)
	}
	c.mu.Unlock()
	if c.onWrite != nil {
		c.onWrite(len(p))
	}
	if fire != nil {
		fire()
	}
	return len(p), nil
}

func (c *capture) output() Output {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Output{Data: bytes.Clone(c.buf), Truncated: c.truncated, Total: c.total}
}

func (c *capture) found(m marker) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.scan == nil {
		return ""
	}
	return c.scan.found[m]
}
