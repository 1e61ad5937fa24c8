package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/capability"
)

// FileReadInput is the input of file.read.
type FileReadInput struct {
	Path string `json:"path"`
}

// FileReadOutput is the output of file.read.
type FileReadOutput struct {
	Content string `json:"content"`
	Size    int64  `json:"size"`
}

// FileRead returns the file.read tool of RFC-0001 appendix A: it reads a
// UTF-8 text file at or below a granted filesystem.read scope, refusing
// files larger than maxFileSize.
func FileRead() Tool {
	decl := Declaration{
		ID:          "file.read",
		Version:     "1.0.0",
		Name:        "File Reader",
		Description: "Reads file contents from filesystem",
		InputSchema: json.RawMessage(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "File path to read", "pattern": "^[a-zA-Z0-9/_.-]+$"}
  },
  "required": ["path"],
  "additionalProperties": false
}`),
		OutputSchema: json.RawMessage(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "content": {"type": "string", "description": "File contents"},
    "size": {"type": "number", "description": "File size in bytes"}
  },
  "required": ["content", "size"],
  "additionalProperties": false
}`),
		RequiredCapabilities: []capability.Capability{{Name: "filesystem.read"}},
		ResourceLimits:       ResourceLimits{MaxExecutionTime: 5 * time.Second, MaxMemory: 10 << 20, MaxFileSize: 1 << 20},
		Deterministic:        true,
		Idempotent:           true,
	}
	return NewTyped(decl, readFile)
}

func readFile(ctx context.Context, env *Env, in FileReadInput) (FileReadOutput, error) {
	fsys := env.FS("filesystem.read")
	// Refuse what is not a regular file before opening it: opening a named
	// pipe blocks until a writer appears, whatever ctx says.
	if fi, err := fsys.Stat(in.Path); err != nil {
		return FileReadOutput{}, err
	} else if !fi.Mode().IsRegular() {
		return FileReadOutput{}, fmt.Errorf("tools: %s is not a regular file", in.Path)
	}
	f, err := fsys.Open(in.Path)
	if err != nil {
		return FileReadOutput{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return FileReadOutput{}, err
	}
	if !fi.Mode().IsRegular() {
		return FileReadOutput{}, fmt.Errorf("tools: %s is not a regular file", in.Path)
	}
	max := env.Limits.MaxFileSize
	if max > 0 && fi.Size() > max {
		return FileReadOutput{}, &LimitError{Limit: "file_size_limit", Max: max, Got: fi.Size()}
	}
	r := io.Reader(f)
	if max > 0 {
		r = io.LimitReader(f, max+1) // the file may grow after Stat
	}
	b, err := io.ReadAll(&ctxReader{ctx: ctx, r: r})
	if err != nil {
		return FileReadOutput{}, err
	}
	if max > 0 && int64(len(b)) > max {
		return FileReadOutput{}, &LimitError{Limit: "file_size_limit", Max: max, Got: int64(len(b))}
	}
	if !utf8.Valid(b) {
		return FileReadOutput{}, errors.New("tools: " + in.Path + " is not UTF-8 text")
	}
	return FileReadOutput{Content: string(b), Size: int64(len(b))}, nil
}

// ctxReader stops a long read when the attempt's context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
