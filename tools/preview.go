package tools

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/toolgate/toolgate/internal/proc"
)

// ProcessPreview is what an input would make a process tool run: shown to
// a human before they approve an intent.
type ProcessPreview struct {
	Command string   `json:"command"`        // as declared or given
	Path    string   `json:"path,omitempty"` // resolved absolute path now; "" if it does not resolve
	Args    []string `json:"args"`           // argv after the program name
	Dir     string   `json:"dir,omitempty"`  // working directory, "" for a fresh empty one
	Problem string   `json:"problem,omitempty"`
}

// Previewer is implemented by tools that run a process.
type Previewer interface {
	// Preview says what input (valid against the input schema) would run,
	// without running anything.
	Preview(input json.RawMessage) (*ProcessPreview, error)
}

// Preview of a registry-file tool: its command and its argv template
// expanded with input.
func (t *fileTool) Preview(raw json.RawMessage) (*ProcessPreview, error) {
	var in map[string]any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&in); err != nil {
		return nil, fmt.Errorf("tools: decoding %s input: %w", t.decl.ID, err)
	}
	p := &ProcessPreview{Command: t.command}
	args, err := t.argv.Expand(in)
	if err != nil {
		p.Problem = err.Error()
	}
	p.Args = args
	if t.cwdField != "" {
		p.Dir, _ = in[t.cwdField].(string)
	}
	search := t.searchPath
	if search == "" {
		search = DefaultSearchPath
	}
	resolve(p, search)
	return p, nil
}

// previewTool is an exec tool with its preview.
type previewTool struct {
	Tool
}

func (t previewTool) Preview(raw json.RawMessage) (*ProcessPreview, error) {
	var in execInput
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("tools: decoding %s input: %w", t.Declaration().ID, err)
	}
	p := &ProcessPreview{Command: in.Command, Args: in.Args, Dir: in.Cwd}
	if p.Args == nil {
		p.Args = []string{}
	}
	resolve(p, DefaultSearchPath)
	return p, nil
}

func resolve(p *ProcessPreview, search string) {
	abs, _, err := proc.Resolve(p.Command, search)
	if err != nil {
		if p.Problem == "" {
			p.Problem = err.Error()
		}
		return
	}
	p.Path = abs
}
