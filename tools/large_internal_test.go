package tools

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/capability"
)

// Large values the fast path cannot prove valid are decoded in full at
// most largeSlots at a time per registry: 16 concurrent 1 MiB invalid
// inputs never have more than two trees of 20-80 times their size alive
// at once. Each is still refused with its problems.
func TestEntry_LargeInvalidInputsAreGated(t *testing.T) {
	schema := `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","additionalProperties":{"type":"integer","description":"n"},"maxProperties":10}`
	reg := NewRegistry()
	err := reg.Register(NewRaw(Declaration{ID: "t.big", Version: "1.0.0", Name: "big", Description: "takes objects",
		InputSchema: json.RawMessage(schema), OutputSchema: json.RawMessage(schema),
		RequiredCapabilities: []capability.Capability{}, ResourceLimits: ResourceLimits{MaxExecutionTime: 1e9}},
		nil))
	if err != nil {
		t.Fatal(err)
	}
	reg.Freeze()
	e, err := reg.Lookup("t.big", "")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i := 0; b.Len() < 1<<20; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + strconv.Itoa(i) + `":1`)
	}
	b.WriteByte('}')
	big := b.Bytes()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if err := e.ValidateInput(big); err == nil {
				t.Error("an object of too many members was accepted")
			}
		})
	}
	wg.Wait()
	if p := e.large.peak.Load(); p < 1 || p > largeSlots {
		t.Fatalf("%d large values were decoded at once; want 1 to %d", p, largeSlots)
	}
	// Small values are not gated.
	if err := e.ValidateInput([]byte(`{"a":"x"}`)); err == nil || e.large.active.Load() != 0 {
		t.Fatalf("a small invalid value: %v, %d in the gate", err, e.large.active.Load())
	}
}
