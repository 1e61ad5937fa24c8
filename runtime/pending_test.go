package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/internal/testdb"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// One proposer may have at most MaxPendingIntents pending: one more is
// refused (intent_limit) and nothing is stored, also under concurrent
// proposals; another proposer is not affected; a decision frees a place.
func TestPropose_PendingLimit(t *testing.T) {
	ctx := context.Background()
	reg := tools.NewRegistry()
	if err := reg.Register(tool(decl("test.counted"), func(ctx context.Context, env *tools.Env, in msg) (msg, error) { return in, nil })); err != nil {
		t.Fatal(err)
	}
	rt, err := tgruntime.Open(testdb.Path(t, "tg.db"), &tgruntime.Options{Registry: reg, Grants: grantAll, NoSync: true, MaxPendingIntents: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	propose := func(who string, i int) (*tgruntime.Intent, error) {
		return rt.Propose(ctx, tgruntime.Invocation{Tool: "test.counted", Input: json.RawMessage(fmt.Sprintf(`{"msg":"%d"}`, i)), Principal: who})
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var made []*tgruntime.Intent
	refused := 0
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in, err := propose("agent", i)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				made = append(made, in)
			case intentCode(err) == "intent_limit":
				refused++
			default:
				t.Errorf("propose: %v", err)
			}
		}()
	}
	wg.Wait()
	if len(made) != 5 || refused != 15 {
		t.Fatalf("20 concurrent proposals under a limit of 5: %d made, %d refused", len(made), refused)
	}
	if all, _ := rt.Intents(ctx, tgruntime.IntentFilter{}); len(all) != 5 {
		t.Fatalf("%d intents stored, want 5", len(all))
	}
	if _, err := propose("other", 0); err != nil {
		t.Fatalf("another proposer: %v", err)
	}
	if _, err := rt.Approve(ctx, made[0].ID, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Reject(ctx, made[1].ID, "alice", "no"); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // the two places the decisions freed
		if _, err := propose("agent", 100+i); err != nil {
			t.Fatalf("after decisions, proposal %d: %v", i, err)
		}
	}
	if _, err := propose("agent", 200); intentCode(err) != "intent_limit" {
		t.Fatalf("over the limit again: %v", err)
	}
}
