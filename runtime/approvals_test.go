package runtime_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/testdb"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

func newKey(t *testing.T, name string) *audit.SigningKey {
	t.Helper()
	k, err := audit.GenerateSigningKey(rand.Reader, name)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// keyedPolicy is grantAll with approval keys: approver -> keys.
func keyedPolicy(t *testing.T, keys map[string][]*audit.SigningKey) *capability.Policy {
	t.Helper()
	p, err := capability.NewPolicy(grantAll)
	if err != nil {
		t.Fatal(err)
	}
	if keys == nil {
		return p
	}
	raw := map[string][]string{}
	for who, ks := range keys {
		for _, k := range ks {
			raw[who] = append(raw[who], k.Verifier().String())
		}
	}
	if p, err = p.WithApprovalKeys(raw); err != nil {
		t.Fatal(err)
	}
	return p
}

// approvalsDB is a database and a counted tool, opened by runtimes with
// different policies and keys: one process that signs, another (the
// database's other writer) that does not hold the keys.
type approvalsDB struct {
	t    *testing.T
	path string
	runs int
}

func (db *approvalsDB) open(policy *capability.Policy, key *audit.SigningKey) *tgruntime.Runtime {
	db.t.Helper()
	reg := tools.NewRegistry()
	counted := tool(decl("test.counted"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		db.runs++
		return in, nil
	})
	if err := reg.Register(counted); err != nil {
		db.t.Fatal(err)
	}
	rt, err := tgruntime.Open(db.path, &tgruntime.Options{Registry: reg, Policy: policy, ApprovalKey: key, NoSync: true})
	if err != nil {
		db.t.Fatal(err)
	}
	return rt
}

func (db *approvalsDB) verify(policy *capability.Policy) []tgruntime.Discrepancy {
	db.t.Helper()
	s, err := txn.Open(db.path, &txn.Options{ReadOnly: true})
	if err != nil {
		db.t.Fatal(err)
	}
	defer s.Close()
	var out []tgruntime.Discrepancy
	if _, err := tgruntime.NewReader(s).VerifyRecordsUnder(context.Background(), policy, func(d tgruntime.Discrepancy) error {
		out = append(out, d)
		return nil
	}); err != nil {
		db.t.Fatal(err)
	}
	return out
}

func propose(t *testing.T, rt *tgruntime.Runtime) *tgruntime.Intent {
	t.Helper()
	in, err := rt.Propose(context.Background(), tgruntime.Invocation{Tool: "test.counted", Input: json.RawMessage(`{"msg":"go"}`), Principal: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// Under a policy with approval keys, an approval signed by a key listed
// for its approver runs, once; its audit event carries the signature, and
// audit verify finds nothing to report.
func TestApprovals_SignedRuns(t *testing.T) {
	ctx := context.Background()
	alice, server := newKey(t, "alice"), newKey(t, "server")
	policy := keyedPolicy(t, map[string][]*audit.SigningKey{"alice": {alice}, "*": {server}})
	db := &approvalsDB{t: t, path: testdb.Path(t, "tg.db")}

	for _, tc := range []struct {
		name, approver string
		key            *audit.SigningKey
	}{
		{"the approver's own key", "alice", alice},
		{"a key listed for any approver", "bob", server},
	} {
		rt := db.open(policy, tc.key)
		in := propose(t, rt)
		if _, err := rt.Approve(ctx, in.ID, tc.approver); err != nil {
			t.Fatalf("%s: approve: %v", tc.name, err)
		}
		before := db.runs
		if res, err := execIntent(rt, in.ID, in.Hash); err != nil || res.State != "COMPLETED" || db.runs != before+1 {
			t.Fatalf("%s: run: %+v, %v (ran %d)", tc.name, res, err, db.runs-before)
		}
		rt.Close(ctx)
	}
	if ds := db.verify(policy); len(ds) != 0 {
		t.Errorf("audit verify: %v", ds)
	}
	// The decision events are signed by the keys that approved.
	s, err := txn.Open(db.path, &txn.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var signers []string
	entries, err := s.AuditLog(ctx, 1, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		var ev audit.Event
		if json.Unmarshal(e.Event, &ev) == nil && ev.Intent != nil && ev.Intent.Action == audit.IntentApproved {
			k, err := audit.VerifyDecision(&ev)
			if err != nil {
				t.Errorf("the approval by %s: %v", ev.UserID, err)
			} else {
				signers = append(signers, k.Name())
			}
		}
	}
	if strings.Join(signers, ",") != "alice,server" {
		t.Errorf("approvals signed by %v, want alice then server", signers)
	}
}

// Approvals the policy would not count are refused before anything is
// recorded: no approval key here, or one not listed for the approver.
// Rejections need no signature.
func TestApprovals_UnsignableRefused(t *testing.T) {
	ctx := context.Background()
	alice, mallory := newKey(t, "alice"), newKey(t, "mallory")
	policy := keyedPolicy(t, map[string][]*audit.SigningKey{"alice": {alice}})
	db := &approvalsDB{t: t, path: testdb.Path(t, "tg.db")}
	for _, tc := range []struct {
		name, approver string
		key            *audit.SigningKey
		want           string
	}{
		{"no key", "alice", nil, "no approval key is set"},
		{"a key not listed", "alice", mallory, "is not listed for alice"},
		{"the key of another approver", "bob", alice, "is not listed for bob"},
	} {
		rt := db.open(policy, tc.key)
		in := propose(t, rt)
		_, err := rt.Approve(ctx, in.ID, tc.approver)
		if intentCode(err) != "intent_unsigned" || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want intent_unsigned saying %q", tc.name, err, tc.want)
		}
		if got, _ := rt.Intent(ctx, in.ID); got.Status != tgruntime.IntentPending {
			t.Errorf("%s: the refused approval was recorded: %s", tc.name, got.Status)
		}
		if _, err := rt.Reject(ctx, in.ID, tc.approver, "not now"); err != nil {
			t.Errorf("%s: reject: %v", tc.name, err)
		}
		rt.Close(ctx)
	}
}

// The attack the keys close: whoever can write the database but holds no
// listed key (here, a toolgate process under a policy without approval
// keys, or one with its own key) records a well-formed approval, which
// the audit chain then proves. A runtime under the keyed policy refuses
// to run it, records the refusal, and audit verify under that policy
// names it; without the policy's keys it would have run.
func TestApprovals_ForgedByAnotherWriterRefused(t *testing.T) {
	ctx := context.Background()
	alice, mallory := newKey(t, "alice"), newKey(t, "mallory")
	policy := keyedPolicy(t, map[string][]*audit.SigningKey{"alice": {alice}})
	for _, tc := range []struct {
		name string
		key  *audit.SigningKey // the forger's
		want string
	}{
		{"unsigned", nil, "is not signed"},
		{"signed by an unlisted key", mallory, "signed by key mallory+"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := &approvalsDB{t: t, path: testdb.Path(t, "tg.db")}
			forger := db.open(keyedPolicy(t, nil), tc.key) // the same database, no approval keys
			in := propose(t, forger)
			if _, err := forger.Approve(ctx, in.ID, "alice"); err != nil {
				t.Fatal(err)
			}
			forger.Close(ctx)

			rt := db.open(policy, alice)
			_, err := execIntent(rt, in.ID, in.Hash)
			if intentCode(err) != "intent_unsigned" || !strings.Contains(err.Error(), tc.want) || db.runs != 0 {
				t.Fatalf("a forged approval: %v (ran %d times); want intent_unsigned saying %q and no run", err, db.runs, tc.want)
			}
			got, _ := rt.Intent(ctx, in.ID)
			if len(got.Refusals) != 1 || got.Refusals[0].Code != "intent_unsigned" {
				t.Errorf("the refusal is not in the intent's history: %+v", got.Refusals)
			}
			rt.Close(ctx)
			if ds := db.verify(policy); !hasDiscrepancy(ds, "intent", in.ID, "signature") {
				t.Errorf("audit verify under the keyed policy: %v, want the approval named", ds)
			}
			if ds := db.verify(nil); len(ds) != 0 {
				t.Errorf("audit verify without keys: %v", ds)
			}
			// Without approval keys in its policy, a runtime runs it: the
			// keys are what refuse it.
			open := db.open(keyedPolicy(t, nil), nil)
			defer open.Close(ctx)
			if res, err := execIntent(open, in.ID, in.Hash); err != nil || res.State != "COMPLETED" {
				t.Errorf("without keys: %+v, %v", res, err)
			}
		})
	}
}

// A malformed key in the policy stops Open, naming it.
func TestApprovals_MalformedPolicyKey(t *testing.T) {
	p, err := capability.NewPolicy(grantAll)
	if err != nil {
		t.Fatal(err)
	}
	if p, err = p.WithApprovalKeys(map[string][]string{"alice": {"alice+00000000+AQ=="}}); err != nil {
		t.Fatal(err)
	}
	_, err = tgruntime.Open(testdb.Path(t, "tg.db"), &tgruntime.Options{Policy: p, NoSync: true})
	if err == nil || !strings.Contains(err.Error(), `approval key "alice+00000000+AQ==" for "alice"`) {
		t.Fatalf("Open: %v", err)
	}
}

// The stored decision names its signer, as its event does: a signer
// removed from the stored decision (to pass a signed approval off as
// another's, or hide who signed) is a discrepancy.
func TestApprovals_StoredSignerMatchesTheLog(t *testing.T) {
	ctx := context.Background()
	alice := newKey(t, "alice")
	policy := keyedPolicy(t, map[string][]*audit.SigningKey{"alice": {alice}})
	db := &approvalsDB{t: t, path: testdb.Path(t, "tg.db")}
	rt := db.open(policy, alice)
	in := propose(t, rt)
	got, err := rt.Approve(ctx, in.ID, "alice")
	if err != nil || got.Decision.Signer != alice.Verifier().String() {
		t.Fatalf("approve: %+v, %v; want the decision signed by alice's key", got.Decision, err)
	}
	rt.Close(ctx)
	tamper(t, db.path, func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("state")).Bucket([]byte("toolgate.intent.decisions"))
		var d map[string]any
		if err := json.Unmarshal(b.Get([]byte(in.ID)), &d); err != nil {
			return err
		}
		delete(d, "signer")
		v, _ := json.Marshal(d)
		return b.Put([]byte(in.ID), v)
	})
	if ds := db.verify(nil); !hasDiscrepancy(ds, "intent", in.ID, "decision") {
		t.Errorf("a signer removed from the stored decision: %v", ds)
	}
}
