package runtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/internal/testdb"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// An approved intent whose proposal and approval cannot be read from the
// audit log, because the log's entries holding them no longer decode, is
// not run: it is refused as corrupt, saying that the audit log is damaged
// (not that the intent disagrees with it), and the refusal names nothing
// the damaged entries would have said.
func TestIntent_ApprovalOnADamagedAuditLogRefused(t *testing.T) {
	testdb.BboltOnly(t, whyTamper)
	ctx := context.Background()
	runs := 0
	counted := tool(decl("test.counted"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		runs++
		return in, nil
	})
	path := filepath.Join(t.TempDir(), "toolgate.db")
	rt, _ := openRuntimeAt(t, path, counted)
	in, err := rt.Propose(ctx, tgruntime.Invocation{Tool: "test.counted", Input: json.RawMessage(`{"msg":"go"}`), Principal: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Approve(ctx, in.ID, "alice"); err != nil {
		t.Fatal(err)
	}
	// Later entries, so that the damaged ones are not the log's last.
	if _, err := rt.Execute(ctx, invoke("test.counted", `{"msg":"other"}`)); err != nil {
		t.Fatal(err)
	}
	ran := runs
	rt.Close(ctx)

	damaged := 0
	tamper(t, path, func(tx *bolt.Tx) error {
		log := tx.Bucket([]byte("audit"))
		type kv struct{ k, v []byte }
		var edits []kv
		if err := log.ForEach(func(k, v []byte) error {
			if len(k) == 8 && bytes.Contains(v, []byte(in.ID)) {
				edits = append(edits, kv{bytes.Clone(k), append(bytes.Clone(v), '}')})
			}
			return nil
		}); err != nil {
			return err
		}
		for _, e := range edits {
			if err := log.Put(e.k, e.v); err != nil {
				return err
			}
		}
		damaged = len(edits)
		return nil
	})
	if damaged == 0 {
		t.Fatal("no audit entry names the intent")
	}

	rt, _ = openRuntimeAt(t, path, counted)
	_, err = execIntent(rt, in.ID, in.Hash)
	if intentCode(err) != "intent_corrupt" || runs != ran {
		t.Fatalf("an approval on a damaged log: err = %v, the tool ran %d times (%d before); want intent_corrupt and no run", err, runs, ran)
	}
	if msg := err.Error(); !strings.Contains(msg, "the audit log is damaged: ") || !strings.Contains(msg, "it was not run") {
		t.Fatalf("the refusal %q does not say that the audit log is damaged", msg)
	}
}
