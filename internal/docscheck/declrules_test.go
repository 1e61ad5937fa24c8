package docscheck

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/tools"
)

// docs/embedding.md states the declaration rules in one
// table, so an embedder does not discover them one error per run. Each row
// of that table is a rule Register enforces: for every row there are
// declarations breaking it, each refused with an error naming the field,
// and every rule the cases below exercise has its row. A rule dropped from
// the code, or a row written for a rule the code does not have, fails here.
func TestDocs_DeclarationRules(t *testing.T) {
	rows := declarationRuleRows(t)

	base := func() tools.Declaration {
		return tools.Declaration{
			ID: "demo.tool", Version: "1.0.0", Name: "Demo", Description: "A tool for the rules",
			InputSchema:    json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"x":{"type":"string","description":"x"}},"required":["x"]}`),
			OutputSchema:   json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"y":{"type":"string","description":"y"}},"required":[]}`),
			ResourceLimits: tools.ResourceLimits{MaxExecutionTime: time.Second},
		}
	}
	fn := func(context.Context, *tools.Env, json.RawMessage) (json.RawMessage, error) { return nil, nil }
	schema := func(body string) json.RawMessage {
		return json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema",` + body + `}`)
	}
	type in struct {
		X string `json:"x"`
	}
	type wrongOut struct {
		Z string `json:"z"`
	}

	cases := []struct {
		row   string // the README row (its first cell) this case breaks
		name  string
		tool  func() tools.Tool
		field string // what the error must name
	}{
		{"`id`", "capitals", withDecl(base, fn, func(d *tools.Declaration) { d.ID = "File.Read" }), "id"},
		{"`id`", "space", withDecl(base, fn, func(d *tools.Declaration) { d.ID = "file read" }), "id"},
		{"`version`", "v prefix", withDecl(base, fn, func(d *tools.Declaration) { d.Version = "v1.0.0" }), "version"},
		{"`version`", "two parts", withDecl(base, fn, func(d *tools.Declaration) { d.Version = "1.0" }), "version"},
		{"`name`, `description`", "no name", withDecl(base, fn, func(d *tools.Declaration) { d.Name = " " }), "name"},
		{"`name`, `description`", "no description", withDecl(base, fn, func(d *tools.Declaration) { d.Description = "" }), "description"},
		{"`inputSchema`, `outputSchema`", "no input schema", withDecl(base, fn, func(d *tools.Declaration) { d.InputSchema = nil }), "inputSchema"},
		{"`inputSchema`, `outputSchema`", "no output schema", withDecl(base, fn, func(d *tools.Declaration) { d.OutputSchema = nil }), "outputSchema"},
		{"`inputSchema`, `outputSchema`", "draft 7", withDecl(base, fn, func(d *tools.Declaration) {
			d.InputSchema = json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`)
		}), "/$schema"},
		{"`inputSchema`, `outputSchema`", "no root type", withDecl(base, fn, func(d *tools.Declaration) { d.OutputSchema = schema(`"properties":{}`) }), "/type"},
		{"`inputSchema`, `outputSchema`", "input not an object", withDecl(base, fn, func(d *tools.Declaration) { d.InputSchema = schema(`"type":"string"`) }), "/type"},
		{"`properties`", "no required", withDecl(base, fn, func(d *tools.Declaration) {
			d.InputSchema = schema(`"type":"object","properties":{"x":{"type":"string","description":"x"}}`)
		}), "/required"},
		{"`properties`", "property without type", withDecl(base, fn, func(d *tools.Declaration) {
			d.InputSchema = schema(`"type":"object","properties":{"x":{"description":"x"}},"required":[]`)
		}), "/properties/x/type"},
		{"`properties`", "nested property without description", withDecl(base, fn, func(d *tools.Declaration) {
			d.InputSchema = schema(`"type":"object","required":[],"properties":{"x":{"type":"object","description":"x","required":[],"properties":{"y":{"type":"string"}}}}`)
		}), "/properties/x/properties/y/description"},
		{"`resourceLimits.maxExecutionTime`", "no deadline", withDecl(base, fn, func(d *tools.Declaration) { d.ResourceLimits.MaxExecutionTime = 0 }), "resourceLimits.maxExecutionTime"},
		{"`resourceLimits.maxMemory`, `maxFileSize`, `maxOutputBytes`, `maxConcurrent`", "negative memory", withDecl(base, fn, func(d *tools.Declaration) { d.ResourceLimits.MaxMemory = -1 }), "resourceLimits.maxMemory"},
		{"`resourceLimits.maxMemory`, `maxFileSize`, `maxOutputBytes`, `maxConcurrent`", "negative file size", withDecl(base, fn, func(d *tools.Declaration) { d.ResourceLimits.MaxFileSize = -1 }), "resourceLimits.maxFileSize"},
		{"`resourceLimits.maxMemory`, `maxFileSize`, `maxOutputBytes`, `maxConcurrent`", "negative output", withDecl(base, fn, func(d *tools.Declaration) { d.ResourceLimits.MaxOutputBytes = -1 }), "resourceLimits.maxOutputBytes"},
		{"`resourceLimits.maxMemory`, `maxFileSize`, `maxOutputBytes`, `maxConcurrent`", "negative concurrency", withDecl(base, fn, func(d *tools.Declaration) { d.ResourceLimits.MaxConcurrent = -1 }), "resourceLimits.maxConcurrent"},
		{"`requiredCapabilities`", "bad capability", withDecl(base, fn, func(d *tools.Declaration) {
			d.RequiredCapabilities = []capability.Capability{{Name: "file system"}}
		}), "requiredCapabilities[0]"},
		{"typed tools", "Go output type disagrees with the schema", func() tools.Tool {
			return tools.NewTyped(base(), func(context.Context, *tools.Env, in) (wrongOut, error) { return wrongOut{}, nil })
		}, "/properties"},
	}

	// The base declaration is valid, so each refusal below is its case's.
	if err := tools.NewRegistry().Register(withDecl(base, fn, func(*tools.Declaration) {})()); err != nil {
		t.Fatalf("the base declaration is refused: %v", err)
	}
	if err := tools.NewRegistry().Register(tools.NewTyped(base(), func(context.Context, *tools.Env, in) (struct {
		Y string `json:"y"`
	}, error) {
		return struct {
			Y string `json:"y"`
		}{}, nil
	})); err != nil {
		t.Fatalf("the base typed tool is refused: %v", err)
	}

	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.row] = true
		if !rows[c.row] {
			t.Errorf("%s: docs/embedding.md's declaration rules have no row %s", c.name, c.row)
		}
		err := tools.NewRegistry().Register(c.tool())
		if !errors.Is(err, tools.ErrInvalidDeclaration) {
			t.Errorf("%s: Register = %v, want an invalid declaration", c.name, err)
			continue
		}
		if !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: the error does not name %s: %v", c.name, c.field, err)
		}
	}

	// The rules that are not a declaration's fields.
	reg := tools.NewRegistry()
	if err := reg.Register(withDecl(base, fn, func(*tools.Declaration) {})()); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(withDecl(base, fn, func(d *tools.Declaration) { d.Version = "1.0.0+build.7" })()); !errors.Is(err, tools.ErrDuplicate) {
		t.Errorf("the same version registered twice: %v, want ErrDuplicate", err)
	}
	reg.Freeze()
	if err := reg.Register(withDecl(base, fn, func(d *tools.Declaration) { d.Version = "2.0.0" })()); !errors.Is(err, tools.ErrFrozen) {
		t.Errorf("Register after Freeze: %v, want ErrFrozen", err)
	}

	for row := range rows {
		if !covered[row] {
			t.Errorf("docs/embedding.md's declaration rules have a row %s that no case here breaks: add one", row)
		}
	}
}

func withDecl(base func() tools.Declaration, fn tools.RawFunc, edit func(*tools.Declaration)) func() tools.Tool {
	return func() tools.Tool {
		d := base()
		edit(&d)
		return tools.NewRaw(d, fn)
	}
}

// declarationRuleRows returns the first cells of docs/embedding.md's declaration
// rules table.
func declarationRuleRows(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../docs/embedding.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "`Register` checks a declaration")
	if !ok {
		t.Fatal("docs/embedding.md states no declaration rules (\"`Register` checks a declaration ...\")")
	}
	_, table, ok := strings.Cut(after, "| field | rule |\n|---|---|\n")
	if !ok {
		t.Fatal("docs/embedding.md's declaration rules have no | field | rule | table")
	}
	rows := map[string]bool{}
	rowRE := regexp.MustCompile(`^\| (.+?) \| .+ \|$`)
	for _, line := range strings.Split(table, "\n") {
		m := rowRE.FindStringSubmatch(line)
		if m == nil {
			break
		}
		rows[m[1]] = true
	}
	if len(rows) == 0 {
		t.Fatal("docs/embedding.md's declaration rules table is empty")
	}
	return rows
}
