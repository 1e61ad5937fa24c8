package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/tools"
)

type AddInput struct {
	A int `json:"a"`
	B int `json:"b"`
}

type AddOutput struct {
	Sum int `json:"sum"`
}

func ExampleNewTyped() {
	add := tools.NewTyped(tools.Declaration{
		ID:          "math.add",
		Version:     "1.0.0",
		Name:        "Adder",
		Description: "Adds two integers",
		InputSchema: json.RawMessage(`{
			"$schema": "https://json-schema.org/draft/2020-12/schema",
			"type": "object",
			"properties": {
				"a": {"type": "integer", "description": "first addend"},
				"b": {"type": "integer", "description": "second addend"}
			},
			"required": ["a", "b"],
			"additionalProperties": false
		}`),
		OutputSchema: json.RawMessage(`{
			"$schema": "https://json-schema.org/draft/2020-12/schema",
			"type": "object",
			"properties": {"sum": {"type": "integer", "description": "a + b"}},
			"required": ["sum"],
			"additionalProperties": false
		}`),
		ResourceLimits: tools.ResourceLimits{MaxExecutionTime: time.Second},
		Deterministic:  true,
		Idempotent:     true,
	}, func(ctx context.Context, env *tools.Env, in AddInput) (AddOutput, error) {
		return AddOutput{Sum: in.A + in.B}, nil
	})

	r := tools.NewRegistry()
	if err := r.Register(add); err != nil {
		fmt.Println("register:", err)
		return
	}
	r.Freeze()

	e, err := r.Lookup("math.add", "") // "" is the highest version
	if err != nil {
		fmt.Println("lookup:", err)
		return
	}

	fmt.Println(e.ValidateInput([]byte(`{"a": 1, "b": "2"}`)))

	input := []byte(`{"a": 1, "b": 2}`)
	if err := e.ValidateInput(input); err != nil {
		fmt.Println(err)
		return
	}
	out, err := e.Tool().Execute(context.Background(), &tools.Env{}, input)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(out), e.ValidateOutput(out))
	// Output:
	// tools: input does not match schema: /b: expected integer, but got string
	// {"sum":3} <nil>
}

func ExampleSchemaError() {
	r := tools.NewRegistry()
	err := r.Register(tools.NewRaw(tools.Declaration{
		ID:          "greet",
		Version:     "1.0.0",
		Name:        "Greeter",
		Description: "Greets someone",
		InputSchema: json.RawMessage(`{
			"$schema": "https://json-schema.org/draft/2020-12/schema",
			"type": "object",
			"properties": {"name": {"type": "string"}},
			"required": ["name"]
		}`),
		OutputSchema:   json.RawMessage(`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "string"}`),
		ResourceLimits: tools.ResourceLimits{MaxExecutionTime: time.Second},
	}, nil))

	var se *tools.SchemaError
	if errors.As(err, &se) {
		fmt.Println(se.Pointer)
		fmt.Println(err)
		fmt.Println(errors.Is(err, tools.ErrInvalidDeclaration))
	}
	// Output:
	// /properties/name/description
	// tools: inputSchema of greet@1.0.0 at /properties/name/description: missing; every property must have a description
	// true
}
