package tools

import (
	"os"
	"sync"
)

// scratch makes and removes the fresh empty working directories of the
// processes run without a cwd.
//
// Each process gets a directory of its own, made in the temporary
// directory (TMPDIR) and never given to another, removed with what the
// process left in it once its process group has ended and been reaped.
// Neither step is on the path of the call: the directory a call takes was
// made in the background after the previous call took one (the spare; a
// call that finds none makes its own), and the removal runs in the
// background once Run has its result. On ext4 mounted with discard, rmdir
// waits for the device to discard the directory's block, and mkdir, under
// the churn of one directory per call, scans past the inodes freed in the
// last seconds: together a few hundred microseconds, more than the rest of
// the call. WaitProcessDirs, which Runtime.Close calls, waits for the
// removals and removes the spares. A process killed before that (SIGKILL)
// leaves its spare, empty, beside the directory of the process it was
// running, which it left before there was a spare.
var scratch = newScratchDirs()

type scratchDirs struct {
	mu     sync.Mutex
	idle   *sync.Cond        // signalled when busy drops to 0
	busy   int               // removals and spares being made
	spares map[string]string // temporary directory -> a fresh directory made in it for the next call
	making map[string]bool   // temporary directories whose spare is being made
}

func newScratchDirs() *scratchDirs {
	s := &scratchDirs{spares: map[string]string{}, making: map[string]bool{}}
	s.idle = sync.NewCond(&s.mu)
	return s
}

// make returns a fresh empty directory in the temporary directory, and
// starts making the next one.
func (s *scratchDirs) make() (string, error) {
	tmp := os.TempDir()
	s.mu.Lock()
	dir, ok := s.spares[tmp]
	delete(s.spares, tmp)
	s.mu.Unlock()
	if ok {
		// Still there as it was made (a temporary-file cleaner may have
		// removed it since): a directory, not a link in its place.
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			ok = false
		}
	}
	if !ok {
		var err error
		if dir, err = os.MkdirTemp(tmp, "toolgate-proc-"); err != nil {
			return "", err
		}
	}
	s.makeSpare(tmp)
	return dir, nil
}

// makeSpare makes the next directory of tmp in the background, unless one
// is there or being made.
func (s *scratchDirs) makeSpare(tmp string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.spares[tmp]; ok || s.making[tmp] {
		return
	}
	s.making[tmp] = true
	s.busy++
	go func() {
		dir, err := os.MkdirTemp(tmp, "toolgate-proc-")
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.making, tmp)
		if err == nil {
			s.spares[tmp] = dir
		}
		s.done()
	}()
}

// remove removes dir, and whatever the process left in it, in the
// background.
func (s *scratchDirs) remove(dir string) {
	s.mu.Lock()
	s.busy++
	s.mu.Unlock()
	go func() {
		_ = os.RemoveAll(dir)
		s.mu.Lock()
		s.done()
		s.mu.Unlock()
	}()
}

// done ends one background step; s.mu is held.
func (s *scratchDirs) done() {
	if s.busy--; s.busy == 0 {
		s.idle.Broadcast()
	}
}

// waitIdle waits until nothing runs in the background.
func (s *scratchDirs) waitIdle() {
	s.mu.Lock()
	for s.busy > 0 {
		s.idle.Wait()
	}
	s.mu.Unlock()
}

// settle waits until nothing runs in the background, then removes the
// spares.
func (s *scratchDirs) settle() {
	s.mu.Lock()
	for s.busy > 0 {
		s.idle.Wait()
	}
	spares := s.spares
	s.spares = map[string]string{}
	s.mu.Unlock()
	for _, dir := range spares {
		_ = os.Remove(dir) // empty: no process ran in it
	}
}

// WaitProcessDirs removes what is left of the fresh working directories of
// the processes Env.Run ran without a cwd: it waits for the removals Run
// leaves in the background once a process has ended, and removes the
// directory made ahead for the next such process. Runtime.Close calls it; a
// program that calls Env.Run itself calls it before it exits.
func WaitProcessDirs() { scratch.settle() }
