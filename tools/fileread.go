package tools

import (
	"context"
	"encoding/json"
	"time"

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
		InputCapabilities:    pathCapability("filesystem.read"),
		ResourceLimits:       ResourceLimits{MaxExecutionTime: 5 * time.Second, MaxMemory: 10 << 20, MaxFileSize: 1 << 20},
		Deterministic:        true,
		Idempotent:           true,
	}
	return NewTyped(decl, readFile)
}

// readFile is file.read@1.0.0: the whole file, through the range reader.
func readFile(ctx context.Context, env *Env, in FileReadInput) (FileReadOutput, error) {
	o, err := readFileRange(ctx, env, FileReadRangeInput{Path: in.Path})
	if err != nil {
		return FileReadOutput{}, err
	}
	return FileReadOutput{Content: o.Content, Size: o.Size}, nil
}
