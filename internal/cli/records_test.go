package cli

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/txn"
)

// Execution records are under the audit chain: a record edited, deleted or
// moved in the database file itself (below the store's API) is reported by
// audit verify, naming the execution and the field, and show does not
// present it as fact.
func TestAuditVerify_TamperedRecords(t *testing.T) {
	bboltOnly(t, "it edits the records in the bbolt file's buckets, below the store's API")
	for _, tc := range []struct {
		name  string
		edit  func(b *bolt.Bucket, ok, denied *txn.Record) error
		id    func(ok, denied *txn.Record) string
		field string
	}{
		{"changed output", func(b *bolt.Bucket, ok, _ *txn.Record) error {
			ok.Output = json.RawMessage(`{"content":"forged"}`)
			return putEncoded(b, ok.ExecutionID, ok)
		}, func(ok, _ *txn.Record) string { return ok.ExecutionID }, "output"},
		{"changed state", func(b *bolt.Bucket, _, denied *txn.Record) error {
			denied.State = "FAILED"
			denied.Transitions[len(denied.Transitions)-1].To = "FAILED"
			return putEncoded(b, denied.ExecutionID, denied)
		}, func(_, denied *txn.Record) string { return denied.ExecutionID }, "state"},
		{"deleted record", func(b *bolt.Bucket, ok, _ *txn.Record) error {
			return b.Delete([]byte(ok.ExecutionID))
		}, func(ok, _ *txn.Record) string { return ok.ExecutionID }, "record"},
		{"record moved to another id", func(b *bolt.Bucket, ok, _ *txn.Record) error {
			data := append([]byte(nil), b.Get([]byte(ok.ExecutionID))...)
			if err := b.Put([]byte(movedID), data); err != nil {
				return err
			}
			return b.Delete([]byte(ok.ExecutionID))
		}, func(ok, _ *txn.Record) string { return movedID }, "record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			workdir(t)
			r := toolgate(t, "", "run", "file.read", "--allow", "filesystem.read:.", "--input", `{"path":"hello.txt"}`, "--json")
			var res struct {
				ExecutionID string `json:"executionId"`
			}
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &res) != nil {
				t.Fatalf("run: exit %d %s %s", r.code, r.stdout, r.stderr)
			}
			okID := res.ExecutionID
			r = toolgate(t, "", "run", "file.read", "--input", `{"path":"hello.txt"}`, "--json")
			if r.code != ExitDenied || json.Unmarshal([]byte(r.stdout), &res) != nil {
				t.Fatalf("denied run: exit %d %s %s", r.code, r.stdout, r.stderr)
			}
			deniedID := res.ExecutionID
			if r := toolgate(t, "", "audit", "verify"); r.code != 0 || !strings.Contains(r.stdout, "2 execution records and 0 intents match") {
				t.Fatalf("untouched: exit %d %s %s", r.code, r.stdout, r.stderr)
			}
			ok, denied := readRecord(t, okID), readRecord(t, deniedID)
			id := tc.id(ok, denied)

			db, err := bolt.Open(os.Getenv("TOOLGATE_DB"), 0o600, &bolt.Options{Timeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(func(tx *bolt.Tx) error { return tc.edit(tx.Bucket([]byte("executions")), ok, denied) }); err != nil {
				t.Fatal(err)
			}
			db.Close()

			r = toolgate(t, "", "audit", "verify")
			if r.code != ExitVerify || !strings.Contains(r.stdout, "execution "+id+": "+tc.field+": ") {
				t.Fatalf("audit verify: exit %d, want %d naming execution %s field %s\nstdout: %s\nstderr: %s", r.code, ExitVerify, id, tc.field, r.stdout, r.stderr)
			}
			r = toolgate(t, "", "audit", "verify", "--json")
			var out verifyJSON
			if r.code != ExitVerify || json.Unmarshal([]byte(r.stdout), &out) != nil || out.Valid || out.Records == nil || out.Records.Discrepancy == 0 {
				t.Fatalf("audit verify --json: exit %d %s", r.code, r.stdout)
			}
			if tc.name == "deleted record" {
				return // nothing to show
			}
			r = toolgate(t, "", "show", id)
			if tc.name == "record moved to another id" {
				// The record names another execution: not shown at all.
				if r.code != ExitVerify || r.stdout != "" || !strings.Contains(r.stderr, "cannot be shown") {
					t.Fatalf("show of a moved record: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
				}
				return
			}
			if r.code != ExitVerify || !strings.Contains(r.stdout+r.stderr, "audit log") {
				t.Fatalf("show presents a tampered record as fact: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
			}
			if !strings.HasPrefix(r.stdout, "NOT PROVEN") {
				t.Errorf("show does not say first that the record is not proven:\n%s", r.stdout)
			}
		})
	}
}

const movedID = "0199e4a1-0000-7000-8000-000000000001"

func putEncoded(b *bolt.Bucket, key string, rec *txn.Record) error {
	data, err := txn.EncodeRecord(rec)
	if err != nil {
		return err
	}
	return b.Put([]byte(key), data)
}

func readRecord(t *testing.T, id string) *txn.Record {
	t.Helper()
	r := toolgate(t, "", "show", id, "--json")
	var rec txn.Record
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rec) != nil {
		t.Fatalf("show %s: exit %d %s %s", id, r.code, r.stdout, r.stderr)
	}
	return &rec
}
