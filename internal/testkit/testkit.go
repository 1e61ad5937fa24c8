// Package testkit checks, when a test ends, what the test left behind: a
// runtime whose Close fails, or a database whose audit log or records
// `toolgate audit verify` would refuse, fails the test. Tests only: it
// imports the testing package.
//
// A suite's runtime opener calls [Check] on each runtime it opens (or
// [Open] opens one on a fresh database of the backend
// TOOLGATE_TEST_BACKEND selects, see internal/testdb). A test that changes
// records or the audit log below the runtime's API on purpose says so
// with [Tampers], and its databases are then not verified.
package testkit

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/testdb"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// closeTimeout bounds the Close of a test's runtime at its end: calls
// still running then are aborted, and Close's error fails the test.
const closeTimeout = 30 * time.Second

var (
	mu      sync.Mutex
	optOuts = map[testing.TB]*optOut{} // kept after the test: a cleanup removing it could run before Check's
)

// optOut is what a test said [Check] is not to check of its runtimes.
type optOut struct {
	tampers    string // why the test changes records or the log on purpose
	closeFails string // why the test's runtime is closed with an error on purpose
}

// Tampers says that t changes execution records, intents or the audit log
// below the runtime's API on purpose (as someone with write access to the
// database could), so that what [Check] verifies at its end fails:
// the databases of t's runtimes are not verified. why says what t does;
// it is logged.
func Tampers(t testing.TB, why string) {
	t.Helper()
	optOutOf(t, why).tampers = why
}

// CloseFails says that t closes its runtime with an error on purpose (a
// Close whose context ends while calls run, which the test checks
// itself): [Check] does not fail t on Close's error, which Close returns
// again. why says what t does; it is logged.
func CloseFails(t testing.TB, why string) {
	t.Helper()
	optOutOf(t, why).closeFails = why
}

func optOutOf(t testing.TB, why string) *optOut {
	t.Helper()
	if strings.TrimSpace(why) == "" {
		t.Fatal("testkit: an opt-out says why")
	}
	mu.Lock()
	defer mu.Unlock()
	o := optOuts[t]
	if o == nil {
		o = &optOut{}
		optOuts[t] = o
	}
	return o
}

func optOutsOf(t testing.TB) optOut {
	mu.Lock()
	defer mu.Unlock()
	if o := optOuts[t]; o != nil {
		return *o
	}
	return optOut{}
}

// Open opens a runtime on a fresh database (testdb.Path) with opts and
// checks it at t's end ([Check]). It returns the runtime and the
// database's path.
func Open(t testing.TB, opts *tgruntime.Options) (*tgruntime.Runtime, string) {
	t.Helper()
	path := testdb.Path(t, "toolgate.db")
	rt, err := tgruntime.Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	Check(t, rt, path)
	return rt, path
}

// Check closes rt when t ends, failing t on Close's error, and then
// verifies the database at path as `toolgate audit verify` does: the audit
// log's chain (audit.Verifier over the log as stored), and every execution
// record and intent against its audit events (runtime.VerifyRecords, under
// rt's policy, so that an approval its listed keys did not sign is found
// too). Each discrepancy fails t. A test opts out of the first check with
// [CloseFails], of the second with [Tampers], saying why.
//
// Register Check before cleanups that must run while rt is open (they run
// first: cleanups run last registered first).
func Check(t testing.TB, rt *tgruntime.Runtime, path string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		o := optOutsOf(t)
		if err := rt.Close(ctx); err != nil && o.closeFails == "" {
			t.Errorf("testkit: closing the runtime at the end of the test: %v", err)
		} else if err != nil {
			t.Logf("testkit: Close's error is not checked (%s): %v", o.closeFails, err)
		}
		if o.tampers != "" {
			t.Logf("testkit: the database is not verified: the test tampers: %s", o.tampers)
			return
		}
		for _, p := range Verify(context.Background(), path, rt.Policy()) {
			t.Errorf("testkit: audit verify: %s", p)
		}
	})
}

// Verify checks the closed database at path as `toolgate audit verify`
// does under policy (nil: no approval keys) and returns each problem found
// (nil: none). A database that does not exist is empty: nothing to find.
func Verify(ctx context.Context, path string, policy *capability.Policy) []string {
	store, err := txn.Open(path, &txn.Options{ReadOnly: true, Timeout: 10 * time.Second})
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, txn.ErrNoSchema):
		return nil
	case err != nil:
		return []string{fmt.Sprintf("open the database read-only: %v", err)}
	}
	defer store.Close()
	var found []string
	v := &audit.Verifier{}
	err = store.AuditRaw(ctx, v.Add)
	if err == nil {
		err = v.Finish()
	}
	if err != nil {
		found = append(found, fmt.Sprintf("the audit log: %v", err))
	}
	_, err = tgruntime.NewReader(store).VerifyRecordsUnder(ctx, policy, func(d tgruntime.Discrepancy) error {
		found = append(found, fmt.Sprintf("%s %s: %s: %s", d.Kind, d.ID, d.Field, d.Detail))
		return nil
	})
	if err != nil {
		found = append(found, fmt.Sprintf("checking the records against the audit log: %v", err))
	}
	return found
}
