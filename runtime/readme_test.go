package runtime_test

import (
	"os"
	"strings"
	"testing"
)

// The README's embedding example is the body of Example, so it compiles and
// runs with the tests; this keeps the two from drifting apart.
func TestREADME_EmbeddingExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "## Embed it")
	if !ok {
		t.Fatal("README has no '## Embed it' section")
	}
	_, block, ok := strings.Cut(after, "```go\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("no Go block in the README's embedding section")
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, body, ok := strings.Cut(string(src), "func Example() {\n")
	body, _, ok2 = strings.Cut(body, "\n}\n")
	if !ok || !ok2 {
		t.Fatal("no func Example in example_test.go")
	}
	var lines []string
	for _, l := range strings.Split(body, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "\t"))
	}
	if got, want := strings.TrimSpace(block), strings.TrimSpace(strings.Join(lines, "\n")); got != want {
		t.Fatalf("README embedding example differs from Example:\n--- README\n%s\n--- Example\n%s", got, want)
	}
	if n := strings.Count(strings.TrimSpace(block), "\n") + 1; n > 30 {
		t.Errorf("the README example has %d lines; keep it short", n)
	}
}
