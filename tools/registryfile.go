package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/capability"
)

// ErrRegistryFile is wrapped by every *RegistryFileError.
var ErrRegistryFile = errors.New("tools: invalid registry file")

// RegistryFileError reports why a registry file did not load, at which
// line. Err, when set, is the underlying error (a *SchemaError,
// *DeclarationError, ErrDuplicate, ...).
type RegistryFileError struct {
	File   string
	Line   int // 1-based; 0 when the error is about the whole file
	Column int // 1-based, in characters; 0 when not known (set for YAML syntax errors)
	Reason string
	Err    error
}

func (e *RegistryFileError) Error() string {
	if e.Line > 0 && e.Column > 0 {
		return fmt.Sprintf("tools: registry file %s:%d:%d: %s", e.File, e.Line, e.Column, e.Reason)
	}
	if e.Line > 0 {
		return fmt.Sprintf("tools: registry file %s:%d: %s", e.File, e.Line, e.Reason)
	}
	return fmt.Sprintf("tools: registry file %s: %s", e.File, e.Reason)
}

// Unwrap returns ErrRegistryFile and the cause.
func (e *RegistryFileError) Unwrap() []error { return []error{ErrRegistryFile, e.Err} }

// maxRegistryFile bounds what LoadRegistryFile reads.
const maxRegistryFile = 16 << 20

// LoadRegistryFile reads the registry file at path and returns a frozen
// (read-only) registry holding base (the built-in tools, say) and the
// file's tools. It fails closed: on any error it returns no registry and a
// *RegistryFileError naming the file, the line and the reason.
//
// The format is YAML (JSON loads too), one entry per tool under "tools"
// (and upstream MCP servers under "mcp_servers", see [MCPServer] and
// [LoadRegistryFileWith]); keys other than these are refused:
//
//	tools:
//	  - id: file.sha256                 # RFC-0001 4.1 id
//	    version: 1.0.0                  # semantic version
//	    name: SHA-256 of a file         # optional; default: the id
//	    description: ...
//	    command: sha256sum              # bare name (looked up) or absolute path
//	    search_path: /usr/bin:/bin      # optional; absolute entries only
//	    argv: ["--", "{path}"]          # literals and whole-element {field} references
//	    cwd: "{cwd}"                    # optional: a string field giving the working directory
//	    env: {LC_ALL: C}                # fixed variables
//	    env_inherit: [HOME]             # copied from toolgate's environment when set
//	    input_schema: {...}             # JSON Schema 2020-12 written as YAML
//	    output_schema: {...}            # optional; default: the process result schema
//	    capabilities: ["filesystem.read:{path}"] # process.exec:<command> is added; see below
//	    limits: {max_execution_time: 10s, max_memory: 0, max_file_size: 0, max_output_bytes: 0, max_concurrent: 0}
//	    max_stdout_bytes: 65536         # optional, per stream, at most 1 MiB
//	    max_stderr_bytes: 65536
//	    idempotent: true                # optional, default false: may be retried
//	    deterministic: true             # optional, default false
//	    requires_approval: true         # optional, default false: runs only as an approved intent
//
// Every call requires process.exec:<command> and the plain capabilities
// listed. A capability whose scope is a whole field reference,
// "filesystem.read:{path}", is an [InputCapability]: a call requires it,
// scoped by the field's value, only when its input gives that field. A cwd
// brings filesystem.read:{cwd}: a call with a working directory is DENIED
// unless a filesystem.read grant covers it, and a call without one (the
// process runs in a fresh empty directory) needs no filesystem grant.
//
// The output is the process result of the bounded process tools document
// (004) section 5 ([ExecResult] with stdout); an output_schema, when given,
// must accept it. A process that ran is data (success, exit_code,
// timed_out); one that did not start fails the attempt with a
// *ProcessError, and a value the template may not place (a leading "-"
// before "--", a NUL byte) fails it with a *ProcessError of kind
// "invalid_argument" before anything runs.
func LoadRegistryFile(path string, base ...Tool) (*Registry, error) {
	return LoadRegistryFileWith(path, nil, base...)
}

// MCPTools turns the file's upstream MCP servers (mcp_servers, see
// [MCPServer]) into tools; package mcp's Gateway provides one.
type MCPTools func(servers []MCPServer) ([]Tool, error)

// LoadRegistryFileWith is LoadRegistryFile for a file that may declare
// upstream MCP servers: servers turns them into tools, which are registered
// with the file's own before the registry is frozen. With a nil servers, a
// file that declares mcp_servers is refused (nothing would govern them).
// An error of servers is reported at the line of mcp_servers.
func LoadRegistryFileWith(path string, servers MCPTools, base ...Tool) (*Registry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &RegistryFileError{File: path, Reason: err.Error(), Err: err}
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(f, maxRegistryFile+1)); err != nil {
		return nil, &RegistryFileError{File: path, Reason: err.Error(), Err: err}
	}
	if b.Len() > maxRegistryFile {
		return nil, &RegistryFileError{File: path, Reason: fmt.Sprintf("larger than %d bytes", maxRegistryFile)}
	}
	return parseRegistryFile(path, b.Bytes(), servers, base...)
}

// ParseRegistryFile is LoadRegistryFile on data already read; name is what
// errors call the file.
func ParseRegistryFile(name string, data []byte, base ...Tool) (*Registry, error) {
	return parseRegistryFile(name, data, nil, base...)
}

func parseRegistryFile(name string, data []byte, servers MCPTools, base ...Tool) (*Registry, error) {
	p := &fileParser{file: name}
	reg := NewRegistry()
	for _, t := range base {
		if err := reg.Register(t); err != nil {
			return nil, err
		}
	}
	tools, err := p.parse(data)
	if err != nil {
		return nil, err
	}
	for _, ft := range tools {
		if err := reg.Register(ft.tool); err != nil {
			return nil, p.registerError(ft, err)
		}
	}
	if err := p.registerMCP(reg, servers); err != nil {
		return nil, err
	}
	reg.Freeze()
	return reg, nil
}

type fileParser struct {
	file       string
	servers    []MCPServer // mcp_servers
	serversKey *yaml.Node
}

func (p *fileParser) errAt(n *yaml.Node, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &RegistryFileError{File: p.file, Line: line, Reason: fmt.Sprintf(format, args...)}
}

// parsedTool is one tool of the file with the nodes its errors point at.
type parsedTool struct {
	tool   *fileTool
	node   *yaml.Node            // the tool's mapping
	fields map[string]*yaml.Node // key -> value node
	keys   map[string]*yaml.Node // key -> key node
}

func (p *fileParser) parse(data []byte) ([]*parsedTool, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		reason := strings.TrimPrefix(err.Error(), "yaml: ")
		line := 0
		if rest, ok := strings.CutPrefix(reason, "line "); ok {
			if n, after, ok := strings.Cut(rest, ":"); ok {
				line, _ = strconv.Atoi(n)
				reason = strings.TrimSpace(after)
			}
		}
		col := 0
		if err.Error() == "EOF" {
			reason = "empty file; expected a mapping with a tools list"
		} else if line > 0 {
			line, col = syntaxErrorAt(data, reason, line)
		}
		return nil, &RegistryFileError{File: p.file, Line: line, Column: col, Reason: reason, Err: err}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, p.errAt(&extra, "more than one YAML document")
	}
	if err := p.noAliases(&doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 {
		return nil, p.errAt(&doc, "empty file; expected a mapping with a tools list")
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, p.errAt(root, "the file must be a mapping with a tools list")
	}
	fields, err := p.mapping(root, []string{"tools", "mcp_servers"})
	if err != nil {
		return nil, err
	}
	if n := fields["mcp_servers"]; n != nil {
		if p.servers, err = p.mcpServers(n); err != nil {
			return nil, err
		}
		p.serversKey = n
		if fields["tools"] == nil {
			return nil, nil
		}
	}
	list := fields["tools"]
	if list == nil {
		return nil, p.errAt(root, "missing tools")
	}
	if list.Kind != yaml.SequenceNode {
		return nil, p.errAt(list, "tools must be a list")
	}
	var out []*parsedTool
	seen := map[string]*yaml.Node{}
	for _, n := range list.Content {
		pt, err := p.tool(n)
		if err != nil {
			return nil, err
		}
		key := pt.tool.decl.Key()
		if prev, ok := seen[key]; ok {
			return nil, p.errAt(pt.fields["id"], "duplicate tool %s (first declared at line %d)", key, prev.Line)
		}
		seen[key] = pt.fields["id"]
		out = append(out, pt)
	}
	return out, nil
}

// noAliases refuses anchors and aliases: a registry has no use for them,
// and they are how a small file expands into a huge one.
func (p *fileParser) noAliases(n *yaml.Node) error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return p.errAt(n, "anchors and aliases are not supported in a registry file")
	}
	for _, c := range n.Content {
		if err := p.noAliases(c); err != nil {
			return err
		}
	}
	return nil
}

// mapping returns the values of n by key, refusing unknown and repeated
// keys.
func (p *fileParser) mapping(n *yaml.Node, known []string) (map[string]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, p.errAt(n, "expected a mapping")
	}
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			return nil, p.errAt(k, "keys must be strings")
		}
		if !slices.Contains(known, k.Value) {
			return nil, p.errAt(k, "unknown field %q (known: %s)", k.Value, strings.Join(known, ", "))
		}
		if _, dup := out[k.Value]; dup {
			return nil, p.errAt(k, "field %q given twice", k.Value)
		}
		out[k.Value] = v
	}
	return out, nil
}

func (p *fileParser) str(n *yaml.Node, field string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return "", p.errAt(n, "%s must be a string (quote it)", field)
	}
	if strings.ContainsRune(n.Value, 0) {
		return "", p.errAt(n, "%s contains a NUL byte", field)
	}
	return n.Value, nil
}

func (p *fileParser) boolean(n *yaml.Node, field string) (bool, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		return false, p.errAt(n, "%s must be true or false", field)
	}
	return n.Value == "true", nil
}

func (p *fileParser) integer(n *yaml.Node, field string, max int64) (int64, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		return 0, p.errAt(n, "%s must be an integer", field)
	}
	var v int64
	if err := n.Decode(&v); err != nil || v < 0 || v > max {
		return 0, p.errAt(n, "%s must be an integer from 0 to %d", field, max)
	}
	return v, nil
}

func (p *fileParser) strList(n *yaml.Node, field string) ([]string, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, p.errAt(n, "%s must be a list", field)
	}
	out := make([]string, 0, len(n.Content))
	for _, c := range n.Content {
		s, err := p.str(c, field+" items")
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

var toolFields = []string{"id", "version", "name", "description", "command", "search_path", "argv", "cwd", "env", "env_inherit",
	"input_schema", "output_schema", "capabilities", "limits", "max_stdout_bytes", "max_stderr_bytes", "idempotent", "deterministic", "requires_approval"}

var limitFields = []string{"max_execution_time", "max_memory", "max_file_size", "max_output_bytes", "max_concurrent"}

func (p *fileParser) tool(n *yaml.Node) (*parsedTool, error) {
	f, err := p.mapping(n, toolFields)
	if err != nil {
		return nil, err
	}
	for _, req := range []string{"id", "version", "description", "command", "argv", "input_schema", "limits"} {
		if f[req] == nil {
			return nil, p.errAt(n, "missing %s", req)
		}
	}
	ft := &fileTool{maxStdout: execDefaultCap, maxStderr: execDefaultCap}
	d := &ft.decl
	strs := []struct {
		key string
		dst *string
	}{{"id", &d.ID}, {"version", &d.Version}, {"name", &d.Name}, {"description", &d.Description}, {"command", &ft.command}, {"search_path", &ft.searchPath}}
	for _, s := range strs {
		if f[s.key] != nil {
			if *s.dst, err = p.str(f[s.key], s.key); err != nil {
				return nil, err
			}
		}
	}
	if d.Name == "" {
		d.Name = d.ID
	}
	switch c := ft.command; {
	case c == "":
		return nil, p.errAt(f["command"], "command must not be empty")
	case strings.Contains(c, "/") && !strings.HasPrefix(c, "/"):
		return nil, p.errAt(f["command"], "command %q must be a bare name (looked up in the search path) or an absolute path", c)
	}
	if ft.searchPath != "" {
		if err := checkSearchPath(ft.searchPath); err != nil {
			return nil, p.errAt(f["search_path"], "search_path: %v", err)
		}
	}

	// Schemas: YAML to JSON, then the same lint and compile as Go tools
	// (at Register, whose errors registerError maps back to lines).
	if d.InputSchema, err = p.schema(f["input_schema"], "input_schema"); err != nil {
		return nil, err
	}
	d.OutputSchema = execOutputSchema(true)
	if f["output_schema"] != nil {
		if d.OutputSchema, err = p.schema(f["output_schema"], "output_schema"); err != nil {
			return nil, err
		}
	}
	props, err := inputProperties(d.InputSchema)
	if err != nil {
		return nil, p.errAt(f["input_schema"], "input_schema: %v", err)
	}

	// argv: each reference must name a placeable input property.
	if f["argv"].Kind != yaml.SequenceNode {
		return nil, p.errAt(f["argv"], "argv must be a list")
	}
	var elems []string
	for i, c := range f["argv"].Content {
		if c.Kind != yaml.ScalarNode || (c.Tag != "!!str" && c.Tag != "!!int") {
			return nil, p.errAt(c, "argv[%d] must be a string (quote it)", i)
		}
		elems = append(elems, c.Value)
		t, err := ParseArgvTemplate([]string{c.Value})
		if err != nil {
			return nil, p.errAt(c, "argv[%d]: %s", i, strings.TrimPrefix(err.(*TemplateError).Reason, "tools: "))
		}
		for _, field := range t.Fields() {
			if err := placeable(props, field); err != nil {
				return nil, p.errAt(c, "argv[%d] refers to %v", i, err)
			}
		}
	}
	if ft.argv, err = ParseArgvTemplate(elems); err != nil {
		return nil, p.errAt(f["argv"], "%v", err)
	}

	if n := f["cwd"]; n != nil {
		s, err := p.str(n, "cwd")
		if err != nil {
			return nil, err
		}
		m := refRE.FindStringSubmatch(s)
		if m == nil {
			return nil, p.errAt(n, "cwd must be a reference to a string input field, such as \"{cwd}\"")
		}
		if t, _ := props[m[1]]["type"].(string); t != "string" {
			return nil, p.errAt(n, "cwd refers to %q, which is not a string property of input_schema", m[1])
		}
		ft.cwdField = m[1]
	}

	if n := f["env"]; n != nil {
		if n.Kind != yaml.MappingNode {
			return nil, p.errAt(n, "env must be a mapping of variable names to values")
		}
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if !envNameRE.MatchString(k.Value) || k.Value == "PATH" {
				return nil, p.errAt(k, "env: %q is not a variable name, or is PATH (set search_path instead)", k.Value)
			}
			if seen[k.Value] {
				return nil, p.errAt(k, "env: %q given twice", k.Value)
			}
			seen[k.Value] = true
			val, err := p.str(v, "env value of "+k.Value)
			if err != nil {
				return nil, err
			}
			ft.env = append(ft.env, k.Value+"="+val)
		}
		slices.Sort(ft.env)
	}
	if n := f["env_inherit"]; n != nil {
		if ft.inherit, err = p.strList(n, "env_inherit"); err != nil {
			return nil, err
		}
		for i, k := range ft.inherit {
			if !envNameRE.MatchString(k) || k == "PATH" {
				return nil, p.errAt(n.Content[i], "env_inherit: %q is not a variable name, or is PATH (set search_path instead)", k)
			}
		}
	}

	// Capabilities: process.exec:<command>, then the file's. One whose
	// scope is a whole field reference, "filesystem.read:{path}", is an
	// input capability: required, scoped by the field's value, when the
	// input gives the field. A cwd brings filesystem.read:{cwd}.
	d.RequiredCapabilities = []capability.Capability{{Name: "process.exec", Scope: ft.command}}
	if n := f["capabilities"]; n != nil {
		list, err := p.strList(n, "capabilities")
		if err != nil {
			return nil, err
		}
		for i, s := range list {
			if name, scope, ok := strings.Cut(s, ":"); ok && strings.HasPrefix(scope, "{") {
				m := refRE.FindStringSubmatch(scope)
				if m == nil {
					return nil, p.errAt(n.Content[i], "capabilities[%d]: %q: a scope taken from the input is a whole field reference, such as filesystem.read:{path}", i, s)
				}
				if t, _ := props[m[1]]["type"].(string); t != "string" {
					return nil, p.errAt(n.Content[i], "capabilities[%d]: %q refers to %q, which is not a string property of input_schema", i, s, m[1])
				}
				ic := InputCapability{Name: name, ScopeFrom: m[1]}
				if _, err := capability.Parse(name); err != nil {
					return nil, p.errAt(n.Content[i], "capabilities[%d]: %v", i, err)
				}
				if !slices.Contains(d.InputCapabilities, ic) {
					d.InputCapabilities = append(d.InputCapabilities, ic)
				}
				continue
			}
			c, err := capability.Parse(s)
			if err != nil {
				return nil, p.errAt(n.Content[i], "capabilities[%d]: %v", i, err)
			}
			if !slices.Contains(d.RequiredCapabilities, c) {
				d.RequiredCapabilities = append(d.RequiredCapabilities, c)
			}
		}
	}
	if ic := (InputCapability{Name: "filesystem.read", ScopeFrom: ft.cwdField}); ft.cwdField != "" && !slices.Contains(d.InputCapabilities, ic) {
		d.InputCapabilities = append(d.InputCapabilities, ic)
	}

	lf, err := p.mapping(f["limits"], limitFields)
	if err != nil {
		return nil, err
	}
	if lf["max_execution_time"] == nil {
		return nil, p.errAt(f["limits"], "missing max_execution_time (a duration such as 30s)")
	}
	s, err := p.str(lf["max_execution_time"], "max_execution_time")
	if err != nil {
		return nil, err
	}
	if d.ResourceLimits.MaxExecutionTime, err = time.ParseDuration(s); err != nil || d.ResourceLimits.MaxExecutionTime <= 0 {
		return nil, p.errAt(lf["max_execution_time"], "max_execution_time %q is not a positive duration such as 30s", s)
	}
	for _, l := range []struct {
		key string
		dst *int64
	}{{"max_memory", &d.ResourceLimits.MaxMemory}, {"max_file_size", &d.ResourceLimits.MaxFileSize}, {"max_output_bytes", &d.ResourceLimits.MaxOutputBytes}} {
		if lf[l.key] != nil {
			if *l.dst, err = p.integer(lf[l.key], l.key, 1<<50); err != nil {
				return nil, err
			}
		}
	}
	if lf["max_concurrent"] != nil {
		v, err := p.integer(lf["max_concurrent"], "max_concurrent", 1<<20)
		if err != nil {
			return nil, err
		}
		d.ResourceLimits.MaxConcurrent = int(v)
	}
	for _, c := range []struct {
		key string
		dst *int64
	}{{"max_stdout_bytes", &ft.maxStdout}, {"max_stderr_bytes", &ft.maxStderr}} {
		if f[c.key] != nil {
			if *c.dst, err = p.integer(f[c.key], c.key, execMaxCap); err != nil {
				return nil, err
			}
			if *c.dst == 0 {
				return nil, p.errAt(f[c.key], "%s must be at least 1", c.key)
			}
		}
	}
	for _, b := range []struct {
		key string
		dst *bool
	}{{"idempotent", &d.Idempotent}, {"deterministic", &d.Deterministic}, {"requires_approval", &d.RequiresApproval}} {
		if f[b.key] != nil {
			if *b.dst, err = p.boolean(f[b.key], b.key); err != nil {
				return nil, err
			}
		}
	}
	keys := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		keys[n.Content[i].Value] = n.Content[i]
	}
	return &parsedTool{tool: ft, node: n, fields: f, keys: keys}, nil
}

// schema converts a schema written in YAML to JSON.
func (p *fileParser) schema(n *yaml.Node, field string) (json.RawMessage, error) {
	if n.Kind != yaml.MappingNode {
		return nil, p.errAt(n, "%s must be a mapping (a JSON Schema written as YAML)", field)
	}
	v, err := p.jsonValue(n)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, p.errAt(n, "%s: %v", field, err)
	}
	return b, nil
}

// jsonValue converts a YAML node into the JSON data model: mappings with
// string keys, sequences, strings, numbers, booleans, null.
func (p *fileParser) jsonValue(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
				return nil, p.errAt(k, "schema keys must be strings")
			}
			if _, dup := m[k.Value]; dup {
				return nil, p.errAt(k, "key %q given twice", k.Value)
			}
			v, err := p.jsonValue(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[k.Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := p.jsonValue(c)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			return n.Value, nil
		case "!!null":
			return nil, nil
		case "!!bool":
			return n.Value == "true", nil
		case "!!int", "!!float":
			var f float64
			if err := n.Decode(&f); err != nil {
				return nil, p.errAt(n, "%q is not a number JSON can hold", n.Value)
			}
			b, err := json.Marshal(f)
			if err != nil {
				return nil, p.errAt(n, "%q is not a number JSON can hold", n.Value)
			}
			if n.Tag == "!!int" {
				var i int64
				if n.Decode(&i) == nil {
					return json.Number(strconv.FormatInt(i, 10)), nil
				}
			}
			return json.Number(b), nil
		}
		return nil, p.errAt(n, "a %s value cannot be written in JSON", n.Tag)
	}
	return nil, p.errAt(n, "unsupported YAML node")
}

// inputProperties returns the top-level properties of an input schema.
func inputProperties(schema json.RawMessage) (map[string]map[string]any, error) {
	var doc struct {
		Properties map[string]map[string]any `json:"properties"`
	}
	if err := json.Unmarshal(schema, &doc); err != nil {
		return nil, fmt.Errorf("properties: %v", err)
	}
	return doc.Properties, nil
}

// placeable checks that field is a property whose values can be placed in
// argv.
func placeable(props map[string]map[string]any, field string) error {
	p, ok := props[field]
	if !ok {
		return fmt.Errorf("%q, which is not a property of input_schema", field)
	}
	switch p["type"] {
	case "string", "number", "integer":
		return nil
	case "array":
		if items, ok := p["items"].(map[string]any); ok && items["type"] == "string" {
			return nil
		}
	}
	return fmt.Errorf("%q: %v", field, errNotPlaceable)
}

// registerError maps an error of Registry.Register back to the file's
// lines.
func (p *fileParser) registerError(pt *parsedTool, err error) error {
	node := pt.node
	var se *SchemaError
	var de *DeclarationError
	switch {
	case errors.As(err, &se):
		key := map[string]string{"inputSchema": "input_schema", "outputSchema": "output_schema"}[se.Schema]
		if n := pt.fields[key]; n != nil {
			node = nodeAt(n, se.Pointer)
			if node == n {
				node = pt.keys[key] // nothing deeper to point at: the schema's key
			}
		}
	case errors.As(err, &de):
		key, _, _ := strings.Cut(de.Field, ".")
		key = map[string]string{"resourceLimits": "limits", "requiredCapabilities": "capabilities", "inputSchema": "input_schema", "outputSchema": "output_schema"}[key] + ""
		if key == "" {
			key, _, _ = strings.Cut(de.Field, "[")
		}
		if n := pt.fields[key]; n != nil {
			node = n
		}
	case errors.Is(err, ErrDuplicate):
		node = pt.fields["id"]
	}
	return &RegistryFileError{File: p.file, Line: node.Line, Reason: strings.TrimPrefix(err.Error(), "tools: "), Err: err}
}

// nodeAt follows a JSON pointer into a YAML mapping as far as it goes.
func nodeAt(n *yaml.Node, ptr string) *yaml.Node {
	if ptr == "" {
		return n
	}
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		next := (*yaml.Node)(nil)
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == tok {
					next = n.Content[i+1]
					if next.Kind == yaml.ScalarNode {
						next = n.Content[i] // the key's line reads better
					}
					break
				}
			}
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(n.Content) {
				next = n.Content[i]
			}
		}
		if next == nil {
			return n
		}
		n = next
	}
	return n
}

// fileTool is a tool declared in a registry file.
type fileTool struct {
	decl                 Declaration
	command              string
	searchPath           string
	argv                 *ArgvTemplate
	cwdField             string
	env                  []string // fixed KEY=VALUE, by name
	inherit              []string // names copied from our environment
	maxStdout, maxStderr int64
}

var _ Tool = (*fileTool)(nil)

func (t *fileTool) Declaration() Declaration { return t.decl }

func (t *fileTool) Execute(ctx context.Context, env *Env, raw json.RawMessage) (json.RawMessage, error) {
	var in map[string]any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&in); err != nil {
		return nil, fmt.Errorf("tools: decoding %s input: %w", t.decl.ID, err)
	}
	args, err := t.argv.Expand(in)
	if err != nil {
		return nil, &ProcessError{Kind: "invalid_argument", Command: t.command, Err: err}
	}
	dir := ""
	if t.cwdField != "" {
		if v, ok := in[t.cwdField].(string); ok {
			dir = v
		}
	}
	runEnv := env
	if t.searchPath != "" {
		runEnv = env.withSearchPath(t.searchPath)
		defer runEnv.Close()
	}
	search := runEnv.SearchPath
	if search == "" {
		search = DefaultSearchPath
	}
	vars := []string{"PATH=" + search}
	for _, k := range t.inherit {
		if v, ok := os.LookupEnv(k); ok && !strings.ContainsRune(v, 0) {
			vars = append(vars, k+"="+v)
		}
	}
	vars = append(vars, t.env...)
	c := Command{Name: t.command, Args: args, Dir: dir, Env: vars, MaxStdout: t.maxStdout, MaxStderr: t.maxStderr}
	res, err := runBounded(ctx, runEnv, c, 0)
	if err != nil {
		return nil, err
	}
	return json.Marshal(newExecResult(t.decl.ID, t.command, args, cwdOf(env, dir), res, true))
}

// withSearchPath returns an Env like e whose commands are looked up in
// path; close it when done (it shares e's grants, not its handles).
func (e *Env) withSearchPath(path string) *Env {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	return &Env{
		ExecutionID: e.ExecutionID, CallID: e.CallID, Attempt: e.Attempt, Principal: e.Principal,
		Grants: e.Grants, Limits: e.Limits, State: e.State, WorkDir: e.WorkDir, SearchPath: path,
		OnProcess: e.OnProcess, OnProcessStart: e.OnProcessStart, closed: closed,
	}
}

// syntaxErrorAt finds where a YAML syntax error really is. go.yaml.in
// reports the line of the construct being parsed (the mapping or sequence
// the bad token is in, line 12 for a mistake on line 85), not the line of
// the mistake, and no column. The mistake is where the document first fails
// the same way: the shortest prefix of whole lines whose parse fails with
// the same reason gives the line, the shortest prefix of that line the
// column. reported, the line go.yaml.in gave, is kept if the search finds
// nothing.
func syntaxErrorAt(data []byte, reason string, reported int) (line, col int) {
	failsAt := func(n int) bool {
		var doc yaml.Node
		err := yaml.NewDecoder(bytes.NewReader(data[:n])).Decode(&doc)
		if err == nil {
			return false
		}
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if rest, ok := strings.CutPrefix(msg, "line "); ok {
			if _, after, ok := strings.Cut(rest, ":"); ok {
				msg = strings.TrimSpace(after)
			}
		}
		return msg == reason
	}
	// ends[i] is the offset just past line i+1 (its newline included).
	var ends []int
	for i, b := range data {
		if b == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	// The first line whose end fails, then the first byte of it.
	k := firstTrue(len(ends), func(i int) bool { return failsAt(ends[i]) })
	if k >= len(ends) {
		return reported, 0 // not found: keep what go.yaml.in said
	}
	start := 0
	if k > 0 {
		start = ends[k-1]
	}
	text := data[start:ends[k]]
	n := firstTrue(len(text), func(i int) bool { return failsAt(start + i + 1) })
	if n >= len(text) {
		return k + 1, 0
	}
	return k + 1, utf8.RuneCount(text[:n]) + 1
}

// firstTrue is the smallest i in [0, n) for which f is true, assuming f is
// false and then true; n if it never is.
func firstTrue(n int, f func(int) bool) int {
	lo, hi := 0, n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if f(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}
