package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Tool is the contract a tool implements, the plugin interface of toolgate
// (as database/sql/driver is for databases).
//
// Call order: Declaration is called once, by Registry.Register; the registry
// keeps that copy, so later changes to what Declaration returns have no
// effect. Execute is called once per attempt, possibly from many goroutines
// at once.
//
// Execute receives input already validated against the input schema, and an
// Env that exposes only what the attempt was granted. It must return when
// ctx is done (the runtime stops waiting at the deadline regardless, see the
// runtime package). Its output is validated against the output schema after
// it returns. An error return means the attempt failed and its state
// changes are rolled back; a panic is recovered by the runtime and treated
// the same way.
type Tool interface {
	Declaration() Declaration
	Execute(ctx context.Context, env *Env, input json.RawMessage) (json.RawMessage, error)
}

// RawFunc is the body of a tool that works on raw JSON.
type RawFunc func(ctx context.Context, env *Env, input json.RawMessage) (json.RawMessage, error)

// NewRaw returns a Tool from a declaration and a body working on raw JSON.
func NewRaw(decl Declaration, fn RawFunc) Tool { return &rawTool{decl: decl, fn: fn} }

type rawTool struct {
	decl Declaration
	fn   RawFunc
}

func (t *rawTool) Declaration() Declaration { return t.decl }
func (t *rawTool) Execute(ctx context.Context, env *Env, in json.RawMessage) (json.RawMessage, error) {
	return t.fn(ctx, env, in)
}

// TypedFunc is the body of a typed tool.
type TypedFunc[In, Out any] func(ctx context.Context, env *Env, in In) (Out, error)

// NewTyped returns a Tool whose body works on Go values: the validated input
// is decoded into In, and the returned Out is encoded as the output. When In
// or Out is a struct, Register checks that its JSON fields and the schema's
// top-level properties name the same things, so the Go type and the schema
// cannot drift apart unnoticed.
func NewTyped[In, Out any](decl Declaration, fn TypedFunc[In, Out]) Tool {
	return &typedTool[In, Out]{decl: decl, fn: fn}
}

type typedTool[In, Out any] struct {
	decl Declaration
	fn   TypedFunc[In, Out]
}

var _ Tool = (*typedTool[struct{}, struct{}])(nil)

func (t *typedTool[In, Out]) Declaration() Declaration { return t.decl }

func (t *typedTool[In, Out]) Execute(ctx context.Context, env *Env, input json.RawMessage) (json.RawMessage, error) {
	var in In
	d := json.NewDecoder(bytes.NewReader(input))
	d.DisallowUnknownFields()
	if err := d.Decode(&in); err != nil {
		// The schema admitted an input the tool's Go type cannot hold: the
		// declaration's fault, said in the input's terms, not Go's.
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			where := "the input"
			if ute.Field != "" {
				where = "input field " + strconv.Quote(ute.Field)
			}
			return nil, fmt.Errorf("tools: %s: the tool cannot take the %s given; its schema admits more than its implementation does", where, ute.Value)
		}
		return nil, fmt.Errorf("tools: decoding the input: %w", err)
	}
	out, err := t.fn(ctx, env, in)
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

// checkTypes is found by Register through the typeChecker interface.
func (t *typedTool[In, Out]) checkTypes() error {
	var in In
	var out Out
	if err := checkStruct(t.decl, "inputSchema", t.decl.InputSchema, reflect.TypeOf(&in).Elem()); err != nil {
		return err
	}
	return checkStruct(t.decl, "outputSchema", t.decl.OutputSchema, reflect.TypeOf(&out).Elem())
}

type typeChecker interface{ checkTypes() error }

// checkStruct compares a struct's JSON field names with the schema's
// top-level property names.
func checkStruct(decl Declaration, which string, schema json.RawMessage, typ reflect.Type) error {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if typ.Kind() != reflect.Struct {
		return nil
	}
	var doc struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(schema, &doc); err != nil {
		return &SchemaError{Tool: decl.Key(), Schema: which, Reason: err.Error()}
	}
	fields := jsonFields(typ)
	// In name order, so the same mismatch is reported every time.
	for _, name := range slices.Sorted(maps.Keys(doc.Properties)) {
		if !slices.Contains(fields, name) {
			return &SchemaError{Tool: decl.Key(), Schema: which, Pointer: "/properties/" + pointerTokenEscape.Replace(name),
				Reason: fmt.Sprintf("Go type %s has no JSON field %q", typ, name)}
		}
	}
	for _, name := range fields {
		if _, ok := doc.Properties[name]; !ok {
			return &SchemaError{Tool: decl.Key(), Schema: which, Pointer: "/properties",
				Reason: fmt.Sprintf("Go type %s has JSON field %q that the schema does not declare", typ, name)}
		}
	}
	return nil
}

// jsonFields lists the JSON names encoding/json uses for typ's fields,
// following untagged embedded structs.
func jsonFields(typ reflect.Type) []string {
	var names []string
	for f := range typ.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				names = append(names, jsonFields(ft)...)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	return names
}
