package tools_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/tools"
)

// frozen returns a frozen registry holding the given tools.
func frozen(t *testing.T, ts ...tools.Tool) *tools.Registry {
	t.Helper()
	r := tools.NewRegistry()
	for _, tl := range ts {
		if err := r.Register(tl); err != nil {
			t.Fatalf("Register(%s): %v", keyOf(tl), err)
		}
	}
	r.Freeze()
	return r
}

func keyOf(tl tools.Tool) string {
	d := tl.Declaration()
	return d.Key()
}

func entryKeys(es []*tools.Entry) []string {
	keys := make([]string, len(es))
	for i, e := range es {
		d := e.Declaration()
		keys[i] = d.Key()
	}
	return keys
}

func TestRegistry_Register(t *testing.T) {
	t.Run("nil tool", func(t *testing.T) {
		r := tools.NewRegistry()
		err := r.Register(nil)
		var de *tools.DeclarationError
		if !errors.As(err, &de) || !errors.Is(err, tools.ErrInvalidDeclaration) {
			t.Fatalf("Register(nil) = %v; want *DeclarationError", err)
		}
	})

	t.Run("invalid declaration", func(t *testing.T) {
		r := tools.NewRegistry()
		d := validDecl()
		d.Version = "1.0"
		err := r.Register(rawTool(d))
		var de *tools.DeclarationError
		if !errors.As(err, &de) || de.Field != "version" {
			t.Fatalf("Register = %v; want *DeclarationError for version", err)
		}
		if n := len(r.Entries()); n != 0 {
			t.Errorf("Entries() has %d; want 0", n)
		}
	})

	t.Run("after freeze", func(t *testing.T) {
		r := tools.NewRegistry()
		if err := r.Register(rawTool(withVersion("a.tool", "1.0.0"))); err != nil {
			t.Fatal(err)
		}
		r.Freeze()
		err := r.Register(rawTool(withVersion("b.tool", "1.0.0")))
		if !errors.Is(err, tools.ErrFrozen) {
			t.Fatalf("Register after Freeze = %v; want ErrFrozen", err)
		}
		if _, err := r.Lookup("b.tool", ""); !errors.Is(err, tools.ErrToolNotFound) {
			t.Errorf("Lookup(b.tool) = %v; want ErrToolNotFound", err)
		}
		if got := entryKeys(r.Entries()); !slices.Equal(got, []string{"a.tool@1.0.0"}) {
			t.Errorf("Entries() = %v", got)
		}
	})

	t.Run("duplicate", func(t *testing.T) {
		r := tools.NewRegistry()
		first := withVersion("a.tool", "1.0.0")
		first.Name = "First"
		second := withVersion("a.tool", "1.0.0")
		second.Name = "Second"
		if err := r.Register(rawTool(first)); err != nil {
			t.Fatal(err)
		}
		err := r.Register(rawTool(second))
		if !errors.Is(err, tools.ErrDuplicate) {
			t.Fatalf("second Register = %v; want ErrDuplicate", err)
		}
		r.Freeze()
		e, err := r.Lookup("a.tool", "1.0.0")
		if err != nil {
			t.Fatal(err)
		}
		if got := e.Declaration().Name; got != "First" {
			t.Errorf("Name = %q; want the first registration to stay", got)
		}
		if n := len(r.Entries()); n != 1 {
			t.Errorf("Entries() has %d; want 1", n)
		}
	})

	t.Run("failed register adds nothing", func(t *testing.T) {
		r := tools.NewRegistry()
		badOut := withVersion("a.tool", "1.0.0")
		badOut.OutputSchema = json.RawMessage(`{"type": "object"}`) // no $schema
		if err := r.Register(rawTool(badOut)); err == nil {
			t.Fatal("Register(bad output schema) = nil")
		}
		badIn := withVersion("a.tool", "2.0.0")
		badIn.InputSchema = json.RawMessage(`{`)
		if err := r.Register(rawTool(badIn)); err == nil {
			t.Fatal("Register(bad input schema) = nil")
		}
		if n := len(r.Entries()); n != 0 {
			t.Fatalf("Entries() has %d after failed registrations; want 0", n)
		}
		// The failed version does not block a later, valid registration.
		if err := r.Register(rawTool(withVersion("a.tool", "1.0.0"))); err != nil {
			t.Fatalf("Register after a failed one: %v", err)
		}
		r.Freeze()
		if _, err := r.Lookup("a.tool", "2.0.0"); !errors.Is(err, tools.ErrVersionNotFound) {
			t.Errorf("Lookup(2.0.0) = %v; want ErrVersionNotFound", err)
		}
	})

	t.Run("declaration taken at registration", func(t *testing.T) {
		d := withVersion("a.tool", "1.0.0")
		in := []byte(objSchema)
		d.InputSchema = in
		caps := []capability.Capability{{Name: "filesystem.read"}}
		d.RequiredCapabilities = caps
		r := tools.NewRegistry()
		if err := r.Register(rawTool(d)); err != nil {
			t.Fatal(err)
		}
		// Scribbling over the caller's slices must not reach the entry.
		for i := range in {
			in[i] = ' '
		}
		caps[0].Name = "process.exec"
		r.Freeze()
		e, err := r.Lookup("a.tool", "1.0.0")
		if err != nil {
			t.Fatal(err)
		}
		got := e.Declaration()
		if string(got.InputSchema) != objSchema {
			t.Errorf("InputSchema = %q; want the registered one", got.InputSchema)
		}
		if got.RequiredCapabilities[0].Name != "filesystem.read" {
			t.Errorf("RequiredCapabilities = %v; want the registered ones", got.RequiredCapabilities)
		}
		if err := e.ValidateInput([]byte(`{"msg": "x"}`)); err != nil {
			t.Errorf("ValidateInput: %v", err)
		}
	})
}

func TestRegistry_Lookup(t *testing.T) {
	t.Run("not frozen", func(t *testing.T) {
		r := tools.NewRegistry()
		if err := r.Register(rawTool(withVersion("a.tool", "1.0.0"))); err != nil {
			t.Fatal(err)
		}
		if r.Frozen() {
			t.Fatal("Frozen() = true before Freeze")
		}
		for _, v := range []string{"", "1.0.0"} {
			e, err := r.Lookup("a.tool", v)
			if !errors.Is(err, tools.ErrNotFrozen) || e != nil {
				t.Errorf("Lookup(a.tool, %q) before Freeze = %v, %v; want nil, ErrNotFrozen", v, e, err)
			}
		}
		r.Freeze()
		r.Freeze() // idempotent
		if !r.Frozen() {
			t.Fatal("Frozen() = false after Freeze")
		}
		if _, err := r.Lookup("a.tool", "1.0.0"); err != nil {
			t.Errorf("Lookup after Freeze: %v", err)
		}
	})

	// Registered out of order on purpose: 1.10.0 must beat 1.9.x and 1.2.0
	// (semver, not string order) and a release beats its own pre-release.
	r := frozen(t,
		rawTool(withVersion("a.tool", "1.10.0")),
		rawTool(withVersion("a.tool", "1.2.0")),
		rawTool(withVersion("a.tool", "1.9.0-rc.1")),
		rawTool(withVersion("b.tool", "2.0.0-rc.1")),
		rawTool(withVersion("b.tool", "2.0.0-beta")),
		rawTool(withVersion("c.tool", "0.1.0")),
	)
	tests := []struct {
		id, version string
		want        string // key of the entry, or "" for an error
		wantErr     error
	}{
		{id: "a.tool", version: "", want: "a.tool@1.10.0"},
		{id: "a.tool", version: "1.2.0", want: "a.tool@1.2.0"},
		{id: "a.tool", version: "1.9.0-rc.1", want: "a.tool@1.9.0-rc.1"},
		{id: "a.tool", version: "1.10.0", want: "a.tool@1.10.0"},
		{id: "b.tool", version: "", want: "b.tool@2.0.0-rc.1"},
		{id: "c.tool", version: "", want: "c.tool@0.1.0"},
		{id: "a.tool", version: "1.9.0", wantErr: tools.ErrVersionNotFound},
		{id: "a.tool", version: "1.2", wantErr: tools.ErrVersionNotFound},
		{id: "a.tool", version: "v1.2.0", wantErr: tools.ErrVersionNotFound},
		{id: "a.tool", version: "2.0.0", wantErr: tools.ErrVersionNotFound},
		{id: "unknown", version: "", wantErr: tools.ErrToolNotFound},
		{id: "unknown", version: "1.0.0", wantErr: tools.ErrToolNotFound},
		{id: "", version: "", wantErr: tools.ErrToolNotFound},
		{id: "A.tool", version: "", wantErr: tools.ErrToolNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.id+"@"+tt.version, func(t *testing.T) {
			e, err := r.Lookup(tt.id, tt.version)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || e != nil {
					t.Fatalf("Lookup = %v, %v; want nil, %v", e, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Lookup = %v", err)
			}
			d := e.Declaration()
			if d.Key() != tt.want {
				t.Errorf("Lookup = %s; want %s", d.Key(), tt.want)
			}
		})
	}
}

func TestRegistry_Entries(t *testing.T) {
	r := tools.NewRegistry()
	if got := r.Entries(); len(got) != 0 {
		t.Fatalf("Entries() of an empty registry = %v", got)
	}
	for _, k := range [][2]string{
		{"b.tool", "1.0.0"},
		{"a.tool", "2.0.0"},
		{"c.tool", "1.0.0"},
		{"a.tool", "1.10.0"},
		{"a.tool", "1.9.0"},
		{"a.tool", "2.0.0-rc.1"},
	} {
		if err := r.Register(rawTool(withVersion(k[0], k[1]))); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"a.tool@1.9.0", "a.tool@1.10.0", "a.tool@2.0.0-rc.1", "a.tool@2.0.0", "b.tool@1.0.0", "c.tool@1.0.0"}
	// Entries works before and after Freeze.
	if got := entryKeys(r.Entries()); !slices.Equal(got, want) {
		t.Errorf("Entries() before Freeze = %v; want %v", got, want)
	}
	r.Freeze()
	got := r.Entries()
	if keys := entryKeys(got); !slices.Equal(keys, want) {
		t.Errorf("Entries() = %v; want %v", keys, want)
	}
	// The returned slice is the caller's: changing it changes nothing.
	got[0] = nil
	if keys := entryKeys(r.Entries()); !slices.Equal(keys, want) {
		t.Errorf("Entries() after the caller changed its slice = %v", keys)
	}
}

func TestEntry_Declaration(t *testing.T) {
	r := frozen(t, tools.FileRead())
	e, err := r.Lookup("file.read", "")
	if err != nil {
		t.Fatal(err)
	}
	orig := e.Declaration()
	origJSON, _ := json.Marshal(orig)

	d := e.Declaration()
	d.Name = "changed"
	d.ResourceLimits.MaxFileSize = 1
	for i := range d.InputSchema {
		d.InputSchema[i] = 'x'
	}
	for i := range d.OutputSchema {
		d.OutputSchema[i] = 'x'
	}
	d.RequiredCapabilities[0] = capability.Capability{Name: "process.exec"}
	_ = append(d.RequiredCapabilities[:0], capability.Capability{Name: "network.http"})

	again := e.Declaration()
	if !reflect.DeepEqual(again, orig) {
		t.Errorf("Declaration() after mutating a copy = %+v; want %+v", again, orig)
	}
	if b, _ := json.Marshal(again); string(b) != string(origJSON) {
		t.Errorf("declaration changed:\n%s\nwant\n%s", b, origJSON)
	}
	// The compiled schema is unaffected too.
	if err := e.ValidateInput([]byte(`{"path": "a.txt"}`)); err != nil {
		t.Errorf("ValidateInput: %v", err)
	}
}

func TestEntry_Tool(t *testing.T) {
	tl := rawTool(withVersion("a.tool", "1.0.0"))
	r := frozen(t, tl)
	e, err := r.Lookup("a.tool", "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if e.Tool() != tl {
		t.Errorf("Tool() = %v; want the registered tool", e.Tool())
	}
	out, err := e.Tool().Execute(t.Context(), &tools.Env{}, json.RawMessage(`{"msg":"hi"}`))
	if err != nil || string(out) != `{"msg":"hi"}` {
		t.Errorf("Execute = %s, %v", out, err)
	}
}

func TestEntry_MarshalJSON(t *testing.T) {
	r := frozen(t, tools.FileRead())
	e, err := r.Lookup("file.read", "1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := compactJSON(t, b), compactJSON(t, appendixAWithPath(t)); got != want {
		t.Errorf("MarshalJSON =\n%s\nwant appendix A with its path's input capability\n%s", got, want)
	}
}

func TestRegistry_Lookup_concurrent(t *testing.T) {
	var ts []tools.Tool
	for i := range 5 {
		ts = append(ts, rawTool(withVersion("a.tool", fmt.Sprintf("1.%d.0", i))))
	}
	ts = append(ts, tools.FileRead())
	r := frozen(t, ts...)

	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				e, err := r.Lookup("a.tool", "")
				if err != nil {
					t.Errorf("Lookup: %v", err)
					return
				}
				if d := e.Declaration(); d.Version != "1.4.0" {
					t.Errorf("Lookup(a.tool, \"\") = %s; want 1.4.0", d.Version)
				}
				v := fmt.Sprintf("1.%d.0", (g+i)%5)
				if _, err := r.Lookup("a.tool", v); err != nil {
					t.Errorf("Lookup(%s): %v", v, err)
				}
				if _, err := r.Lookup("a.tool", "9.9.9"); !errors.Is(err, tools.ErrVersionNotFound) {
					t.Errorf("Lookup(9.9.9) = %v", err)
				}
				fr, err := r.Lookup("file.read", "")
				if err != nil {
					t.Errorf("Lookup(file.read): %v", err)
					return
				}
				if err := fr.ValidateInput([]byte(`{"path": "a"}`)); err != nil {
					t.Errorf("ValidateInput: %v", err)
				}
				if err := fr.ValidateInput([]byte(`{"path": "a b"}`)); err == nil {
					t.Errorf("ValidateInput(a b) = nil")
				}
				if n := len(r.Entries()); n != 6 {
					t.Errorf("Entries() has %d", n)
				}
				if _, err := json.Marshal(fr); err != nil {
					t.Errorf("Marshal: %v", err)
				}
			}
		})
	}
	// A concurrent refused Register must not disturb readers.
	wg.Go(func() {
		if err := r.Register(rawTool(withVersion("z.tool", "1.0.0"))); !errors.Is(err, tools.ErrFrozen) {
			t.Errorf("Register on a frozen registry = %v", err)
		}
	})
	wg.Wait()
}

func TestRegistry_Register_concurrent(t *testing.T) {
	r := tools.NewRegistry()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			// Every goroutine also tries a duplicate: exactly one of each
			// version must win.
			_ = r.Register(rawTool(withVersion("a.tool", fmt.Sprintf("1.0.%d", i%10))))
		})
	}
	wg.Wait()
	r.Freeze()
	if n := len(r.Entries()); n != 10 {
		t.Fatalf("Entries() has %d; want 10", n)
	}
	e, err := r.Lookup("a.tool", "")
	if err != nil {
		t.Fatal(err)
	}
	if d := e.Declaration(); d.Version != "1.0.9" {
		t.Errorf("highest = %s; want 1.0.9", d.Version)
	}
}

func TestRegistry_zeroValue(t *testing.T) {
	var r tools.Registry
	if err := r.Register(rawTool(withVersion("a.tool", "1.0.0"))); err != nil {
		t.Fatal(err)
	}
	r.Freeze()
	if _, err := r.Lookup("a.tool", ""); err != nil {
		t.Fatal(err)
	}
}

// Build metadata does not make another version (semver precedence), and a
// bare lookup prefers the highest release over a newer pre-release.
func TestRegistry_versionPrecedence(t *testing.T) {
	r := tools.NewRegistry()
	if err := r.Register(rawTool(withVersion("a.tool", "1.0.0+build.1"))); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(rawTool(withVersion("a.tool", "1.0.0+build.2"))); !errors.Is(err, tools.ErrDuplicate) {
		t.Fatalf("Register(1.0.0+build.2) = %v, want ErrDuplicate", err)
	}
	for _, v := range []string{"1.9.0", "2.0.0-rc.1"} {
		if err := r.Register(rawTool(withVersion("a.tool", v))); err != nil {
			t.Fatal(err)
		}
	}
	r.Freeze()
	if e, err := r.Lookup("a.tool", ""); err != nil || e.Declaration().Version != "1.9.0" {
		t.Fatalf("Lookup(\"\") = %v, %v; want 1.9.0", e.Declaration().Version, err)
	}
	if e, err := r.Lookup("a.tool", "2.0.0-rc.1"); err != nil || e.Declaration().Version != "2.0.0-rc.1" {
		t.Fatalf("explicit pre-release lookup: %v", err)
	}
}
