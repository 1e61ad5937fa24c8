package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// intentsInEveryStatus proposes four intents through the CLI and leaves
// them pending, approved, rejected and executed, with refusals; it returns
// their ids.
func intentsInEveryStatus(t *testing.T) []string {
	t.Helper()
	var ids []string
	for range 4 {
		id, _ := propose(t, "file.read", "--input", `{"path":"hello.txt"}`)
		ids = append(ids, id)
	}
	for _, args := range [][]string{
		{"intent", "approve", ids[1], "--yes"},
		{"intent", "reject", ids[2], "--reason", "not today"},
		{"intent", "approve", ids[3], "--yes"},
	} {
		if r := toolgate(t, "", args...); r.code != ExitCompleted {
			t.Fatalf("%q: exit %d\n%s", args, r.code, r.stderr)
		}
	}
	// Refused while pending, refused once rejected, executed, replayed
	// once executed (the stored COMPLETED, exit 0); the approved one stays
	// approved.
	for i, id := range []string{ids[0], ids[2], ids[3], ids[3]} {
		r := toolgate(t, "", "intent", "show", id, "--json")
		var v struct{ Hash string }
		must(t, json.Unmarshal([]byte(r.stdout), &v))
		code := ExitDenied
		if i >= 2 {
			code = ExitCompleted
		}
		if r := toolgate(t, "", "run", "--intent", id, "--hash", v.Hash, "--allow", "filesystem.read:."); r.code != code {
			t.Fatalf("run --intent %s: exit %d\n%s", id, r.code, r.stderr)
		}
	}
	return ids
}

// The CLI reads intents read-only exactly as the runtime reads them.
func TestReadIntents_AgreesWithRuntime(t *testing.T) {
	workdir(t)
	ids := intentsInEveryStatus(t)
	path := theDB()
	ctx := context.Background()

	store, err := txn.Open(path, &txn.Options{ReadOnly: true})
	must(t, err)
	var cli []any
	for _, status := range []string{"", tgruntime.IntentPending, tgruntime.IntentApproved, tgruntime.IntentRejected, tgruntime.IntentExecuted} {
		all, err := readIntents(ctx, store, status)
		must(t, err)
		cli = append(cli, all)
	}
	for _, id := range ids {
		it, err := readIntent(ctx, store, id)
		must(t, err)
		cli = append(cli, it)
	}
	must(t, store.Close())

	rt, err := tgruntime.Open(path, nil)
	must(t, err)
	defer rt.Close(ctx)
	var want []any
	for _, status := range []string{"", tgruntime.IntentPending, tgruntime.IntentApproved, tgruntime.IntentRejected, tgruntime.IntentExecuted} {
		all, err := rt.Intents(ctx, tgruntime.IntentFilter{Status: status})
		must(t, err)
		want = append(want, all)
	}
	for _, id := range ids {
		it, err := rt.Intent(ctx, id)
		must(t, err)
		want = append(want, it)
	}
	got, _ := json.MarshalIndent(cli, "", " ")
	exp, _ := json.MarshalIndent(want, "", " ")
	if string(got) != string(exp) {
		t.Fatalf("the CLI reads:\n%s\nthe runtime:\n%s", got, exp)
	}
	for _, s := range []string{`"pending"`, `"approved"`, `"rejected"`, `"executed"`, `"intent_already_executed"`, `"intent_pending"`} {
		if !strings.Contains(string(got), s) {
			t.Errorf("the fixture lacks %s", s)
		}
	}
}

// intent show and intent list open the database read-only: beside another
// reader they work; beside a writer they fail with a clear "locked" error.
func TestIntent_ShowListReadOnly(t *testing.T) {
	bboltOnly(t, whyLock)
	workdir(t)
	id, _ := propose(t, "file.read", "--input", `{"path":"hello.txt"}`)
	path := theDB()

	reader, err := txn.Open(path, &txn.Options{ReadOnly: true})
	must(t, err)
	if r := toolgate(t, "", "intent", "show", id); r.code != ExitCompleted || !strings.Contains(r.stdout, id) {
		t.Errorf("show beside a reader: exit %d\n%s", r.code, r.stderr)
	}
	if r := toolgate(t, "", "intent", "list"); r.code != ExitCompleted || !strings.Contains(r.stdout, id) {
		t.Errorf("list beside a reader: exit %d\n%s", r.code, r.stderr)
	}
	must(t, reader.Close())

	writer, err := txn.Open(path, nil)
	must(t, err)
	defer writer.Close()
	for _, args := range [][]string{{"intent", "show", id}, {"intent", "list"}} {
		r := toolgate(t, "", args...)
		if r.code != ExitInternal || !strings.Contains(r.stderr, "locked by another process") {
			t.Errorf("%q beside a writer: exit %d %q", args, r.code, r.stderr)
		}
	}
}
