package runtime

import "time"

// workerIdle is how long an idle worker waits for the next tool call.
const workerIdle = time.Second

// workers runs tool bodies on goroutines that outlive one call, so a tool
// starts on a stack that earlier calls already grew instead of a fresh one
// that grows (and is copied) on every call. A worker busy with an abandoned
// tool is simply not idle; a new one is started when none is.
type workers struct {
	work chan func() // unbuffered: a send succeeds only if a worker is idle
	stop chan struct{}
}

func newWorkers() *workers {
	return &workers{work: make(chan func()), stop: make(chan struct{})}
}

// run runs fn on an idle worker or a new one.
func (w *workers) run(fn func()) {
	select {
	case w.work <- fn:
	default:
		go w.loop(fn)
	}
}

func (w *workers) loop(fn func()) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		fn()
		t.Reset(workerIdle)
		select {
		case fn = <-w.work:
		case <-t.C:
			return
		case <-w.stop:
			return
		}
	}
}

// close lets idle workers exit; busy ones exit when their call returns.
func (w *workers) close() { close(w.stop) }
