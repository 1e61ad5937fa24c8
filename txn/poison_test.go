package txn_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/txn"
)

// The error of a poisoned store says what to fix before reopening: while
// the cause persists (a full disk, a read-only file system), reopening
// only fails again, so "reopen" alone is never the advice.
func TestStore_PoisonSaysWhatToFix(t *testing.T) {
	if onPostgres() {
		t.Skip("about bbolt's I/O errors; Postgres: TestPostgresWriterConnectionLost")
	}
	for _, tc := range []struct {
		cause error
		want  string
	}{
		{syscall.ENOSPC, "full: free space on it, then reopen"},
		{syscall.EDQUOT, "quota"},
		{syscall.EROFS, "read-only: make it writable, then reopen"},
		{syscall.EFBIG, "largest size"},
		{syscall.EIO, "check the disk, then reopen"},
		{fmt.Errorf("something else"), "find and fix the cause, then reopen"},
	} {
		t.Run(tc.cause.Error(), func(t *testing.T) {
			s := openStore(t)
			txn.SetFailpoint(s, func(st string) error {
				if st == txn.StepCommit {
					return &os.PathError{Op: "write", Path: "toolgate.db", Err: tc.cause}
				}
				return nil
			})
			err := s.Put(context.Background(), newRecord("a", "t", "FAILED"))
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "; reopen") {
				t.Errorf("poisoned by %v: %v; want it to say %q, not just reopen", tc.cause, err, tc.want)
			}
		})
	}
}
