package capability_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/capability"
)

// A policy file names its Cedar files relative to its own directory, not to
// the directory the program runs in; a file that cannot be loaded fails the
// policy; a group's name is checked like a principal's.
func TestLoadPolicy_CedarFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "conf")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, data string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("shop.cedar", `forbid(principal in Toolgate::Group::"interns", action in Toolgate::Action::"refund", resource);`+"\n")

	t.Run("relative to the policy file", func(t *testing.T) {
		p, err := capability.LoadPolicy(write("policy.json", `{"version": 1, "cedar": ["shop.cedar"], "groups": {"interns": ["ann"]}}`))
		if err != nil {
			t.Fatalf("LoadPolicy: %v (the test runs in %s, not %s)", err, must(os.Getwd()), dir)
		}
		if p.Rules() == nil {
			t.Fatal("the policy has no Cedar rules")
		}
	})
	t.Run("a missing Cedar file", func(t *testing.T) {
		_, err := capability.LoadPolicy(write("missing.json", `{"version": 1, "cedar": ["nothere.cedar"]}`))
		if !errors.Is(err, capability.ErrPolicy) || !strings.Contains(err.Error(), "nothere.cedar") {
			t.Fatalf("err = %v, want ErrPolicy naming nothere.cedar", err)
		}
	})
	t.Run("a group's name", func(t *testing.T) {
		_, err := capability.LoadPolicy(write("group.json", `{"version": 1, "cedar": ["shop.cedar"], "groups": {"in terns": ["ann"]}}`))
		if !errors.Is(err, capability.ErrPolicy) || !strings.Contains(err.Error(), `group.json:1:53: `) || !strings.Contains(err.Error(), "group") {
			t.Fatalf("err = %v, want ErrPolicy at the group's name (1:53)", err)
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
