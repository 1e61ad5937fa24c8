package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/toolgate/toolgate/capability"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// The README's embedding example: open the embedded store, grant a
// principal one directory, and run the built-in file.read.
func Example() {
	dir, _ := os.MkdirTemp("", "toolgate-example")
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hello"), 0o600)

	rt, err := tgruntime.Open(filepath.Join(dir, "toolgate.db"), &tgruntime.Options{
		Grants: map[string][]capability.Capability{
			"agent": {{Name: "filesystem.read", Scope: dir}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close(context.Background())

	res, err := rt.Execute(context.Background(), tgruntime.Invocation{
		Tool:      "file.read",
		Principal: "agent",
		Input:     json.RawMessage(`{"path":"` + filepath.Join(dir, "notes.txt") + `"}`),
	})
	fmt.Println(res.State, string(res.Output), err)
	// Output: COMPLETED {"content":"hello","size":5,"offset":0,"length":5,"eof":true} <nil>
}

// A typed tool that keeps a counter in the state transaction: the write
// becomes visible only when the attempt commits.
func ExampleRuntime_Execute_typedTool() {
	type In struct {
		By int `json:"by"`
	}
	type Out struct {
		Total int `json:"total"`
	}
	schema := func(prop string) json.RawMessage {
		return json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
			"properties":{"` + prop + `":{"type":"integer","description":"` + prop + `"}},
			"required":["` + prop + `"],"additionalProperties":false}`)
	}
	counter := tools.NewTyped(tools.Declaration{
		ID: "counter.add", Version: "1.0.0", Name: "Counter", Description: "Adds to a counter",
		InputSchema: schema("by"), OutputSchema: schema("total"),
		RequiredCapabilities: []capability.Capability{{Name: "state.write", Scope: "counters"}},
		ResourceLimits:       tools.ResourceLimits{MaxExecutionTime: time.Second},
	}, func(ctx context.Context, env *tools.Env, in In) (Out, error) {
		var total int
		if v, ok, err := env.State.Get("counters", "c"); err != nil {
			return Out{}, err
		} else if ok {
			json.Unmarshal(v, &total)
		}
		total += in.By
		b, _ := json.Marshal(total)
		return Out{Total: total}, env.State.Put("counters", "c", b)
	})

	reg := tools.NewRegistry()
	if err := reg.Register(counter); err != nil {
		log.Fatal(err)
	}
	dir, _ := os.MkdirTemp("", "toolgate-example")
	defer os.RemoveAll(dir)
	rt, err := tgruntime.Open(filepath.Join(dir, "toolgate.db"), &tgruntime.Options{
		Registry: reg,
		Grants:   map[string][]capability.Capability{"worker": {capability.MustParse("state.write:counters")}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close(context.Background())

	for _, by := range []string{`{"by":2}`, `{"by":3}`, `{"by":"x"}`} {
		res, err := rt.Execute(context.Background(), tgruntime.Invocation{Tool: "counter.add", Principal: "worker", Input: json.RawMessage(by)})
		fmt.Println(res.State, string(res.Output), err != nil)
	}
	// Output:
	// COMPLETED {"total":2} false
	// COMPLETED {"total":5} false
	// FAILED  true
}

// A store the program opens itself: a runtime made by New runs on it, and
// the program keeps it. It closes the runtime first, then the store, and
// may read it meanwhile through a Reader.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "toolgate-example")
	defer os.RemoveAll(dir)

	store, err := txn.Open(filepath.Join(dir, "toolgate.db"), &txn.Options{Timeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close() // after the runtime's Close: deferred calls run last first

	rt, err := tgruntime.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close(context.Background())

	recs, err := tgruntime.NewReader(store).Executions(context.Background(), txn.Filter{})
	fmt.Println(len(recs), err)
	// Output: 0 <nil>
}
