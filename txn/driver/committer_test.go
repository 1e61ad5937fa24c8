package driver_test

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/txn/driver"
)

// The committer groups the writes that arrive while a group commits, gives
// each its own outcome, and after Close refuses new writes once those in
// progress are answered.
func TestCommitter(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var (
		mu     sync.Mutex
		groups [][]int
	)
	c := &driver.Committer[int]{}
	c.Commit = func(group []*driver.Request[int]) {
		var g []int
		for _, r := range group {
			g = append(g, r.R)
			if r.R%2 == 1 {
				r.Err = fmt.Errorf("odd %d", r.R)
			}
		}
		mu.Lock()
		groups = append(groups, g)
		first := len(groups) == 1
		mu.Unlock()
		if first {
			close(started)
			<-release // the first group holds the committer while the others queue
		}
	}
	errs := make([]error, 9)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); errs[0] = c.Write(&driver.Request[int]{R: 0}) }()
	<-started
	for i := 1; i < 9; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.Write(&driver.Request[int]{R: i}) }()
	}
	waitQueued(c, 8)
	close(release)
	wg.Wait()
	if len(groups) != 2 || len(groups[0]) != 1 || len(groups[1]) != 8 {
		t.Fatalf("groups = %v, want [0] then the 8 that queued meanwhile", groups)
	}
	for i, err := range errs {
		if (i%2 == 1) != (err != nil) || err != nil && err.Error() != fmt.Sprintf("odd %d", i) {
			t.Errorf("write %d = %v", i, err)
		}
	}
	if !c.Close() || c.Close() {
		t.Error("Close reports the first close only")
	}
	if err := c.Write(&driver.Request[int]{R: 10}); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Write after Close = %v, want ErrClosed", err)
	}
}

func waitQueued(c *driver.Committer[int], n int) {
	for c.Queued() != n {
		runtime.Gosched()
	}
}
