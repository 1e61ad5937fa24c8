package explain_test

import (
	"slices"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/explain"
	"github.com/toolgate/toolgate/tools"
)

func fileRead(t *testing.T) tools.Declaration {
	for _, tl := range tools.Builtins() {
		if d := tl.Declaration(); d.ID == "file.read" {
			return d
		}
	}
	t.Fatal("no file.read")
	return tools.Declaration{}
}

// A grant that covers the requirement is named as meeting it, and its
// place is resolved; a principal without it is denied with the missing
// capability.
func TestExplain(t *testing.T) {
	dir := t.TempDir()
	p, err := capability.NewPolicy(map[string][]capability.Capability{"alice": {capability.MustParse("filesystem.read:" + dir)}})
	if err != nil {
		t.Fatal(err)
	}
	decl := fileRead(t)
	v := explain.Explain(p, "alice", decl, nil, time.Now())
	if !v.Allowed || len(v.Requirements) != 1 || !slices.Equal(v.Requirements[0].MetBy, []string{"filesystem.read:" + dir}) {
		t.Fatalf("alice: %+v", v)
	}
	if len(v.Places) != 1 || v.Places[0].Kind != "directory" {
		t.Fatalf("places: %+v", v.Places)
	}
	v = explain.Explain(p, "bob", decl, nil, time.Now())
	if v.Allowed || len(v.Missing) != 1 || len(v.Requirements[0].MetBy) != 0 || len(v.Places) != 0 {
		t.Fatalf("bob: %+v", v)
	}
	if v := explain.Explain(nil, "alice", decl, nil, time.Now()); v.Allowed {
		t.Fatal("a nil policy allowed")
	}
}
