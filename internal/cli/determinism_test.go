package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/txn"
)

// stats names the inputs of a deterministic tool that gave different
// outputs, and only those.
func TestStats_Nondeterministic(t *testing.T) {
	workdir(t)
	store, err := txn.Open(theDB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now().Add(-time.Minute)
	put := func(id, tool, version, in, out string) {
		t.Helper()
		must(t, store.Put(ctx, &txn.Record{ExecutionID: id, CallID: "c-" + id, Attempt: 1, ToolID: tool, ToolVersion: version,
			State: "COMPLETED", InputHash: in, OutputHash: out, StartedAt: start, EndedAt: start.Add(time.Millisecond),
			Transitions: []txn.Transition{{From: "EXECUTING", To: "COMPLETED", Event: "ok", At: start}}}))
	}
	h := func(c string) string { return strings.Repeat(c, 64) }
	put("e1", "file.read", "1.0.0", h("a"), h("1"))
	put("e2", "file.read", "1.0.0", h("a"), h("2")) // same input, another output: a violation
	put("e3", "file.read", "1.0.0", h("b"), h("3"))
	put("e4", "file.read", "1.0.0", h("b"), h("3")) // same input, same output: fine
	put("e5", "exec", "1.0.0", h("c"), h("4"))      // not declared deterministic
	put("e6", "exec", "1.0.0", h("c"), h("5"))
	store.Close()

	r := toolgate(t, "", "stats", "--json")
	var rep statsReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if len(rep.Nondeterministic) != 1 {
		t.Fatalf("nondeterministic = %+v; want the one input of file.read", rep.Nondeterministic)
	}
	d := rep.Nondeterministic[0]
	if d.Tool != "file.read@1.0.0" || d.InputHash != h("a") || d.Outputs != 2 || strings.Join(d.Executions, ",") != "e1,e2" {
		t.Errorf("divergence %+v", d)
	}
	if r := toolgate(t, "", "stats"); !strings.Contains(r.stdout, "Not deterministic: 1 inputs") || !strings.Contains(r.stdout, "e1, e2") {
		t.Errorf("stats:\n%s", r.stdout)
	}
}
