package tools

import (
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// MCPServer is an upstream MCP server declared under mcp_servers in a
// registry file: where it is and what the file adds to its tools. This
// package only parses it; the gateway in package mcp connects to it, reads
// its tools/list and turns each tool into a Tool NAME.TOOL (see
// [LoadRegistryFileWith]).
//
//	mcp_servers:
//	  - name: files                     # lowercase words joined by _ or -: the tools are files.TOOL
//	    command: files-mcp              # stdio: bare name (looked up) or absolute path
//	    args: ["--root", "/srv/data"]   # literal arguments, no shell
//	    search_path: /usr/bin:/bin      # optional; absolute entries only
//	    env: {LC_ALL: C}                # fixed variables, written in the file: nothing secret
//	    env_inherit: [HOME]             # copied from toolgate's environment when set
//	    env_from: {API_KEY: FILES_MCP_KEY} # a variable whose value is read from another of toolgate's
//	  - name: issues
//	    url: https://mcp.example.com/mcp          # or: streamable HTTP
//	    headers_from_env: {Authorization: ISSUES_MCP_AUTH} # header: the variable holding its value
//	    version: 2.1.0                  # optional pin; default: the server's own version
//	    requires_approval: false        # optional, for every tool of the server
//	    idempotent: false
//	    strict_schemas: false           # true: a tool whose schemas RFC-0001 6.3 faults is left out
//	    pin_definitions: true           # false: a pinned version stands without per-tool hashes
//	    limits: {max_execution_time: 30s, max_output_bytes: 0, max_concurrent: 0}
//	    tools:                          # optional, per tool: overrides, and the pins' hashes
//	      create_issue: {requires_approval: true, schema_sha256: 9f2c..., definition_sha256: 41ab...}
//
// A stdio server runs as the process tools do (see [MCPServer.Start]): an
// argv, no shell, the command resolved to an absolute path in the search
// path, only the environment the file gives it (PATH is the search path),
// its own process group, killed as a whole; its limits may also give
// max_memory and max_file_size (bytes), which bound its process (RLIMIT_AS,
// RLIMIT_FSIZE), not each call. Secrets are never
// written in the file: an HTTP header (headers_from_env) or a stdio
// server's variable (env_from) names the environment variable of toolgate
// that holds its value, which must be set when the server starts.
type MCPServer struct {
	Name string
	Line int // where the file declares it

	// stdio
	Command    string            // as written: a bare name or an absolute path
	SearchPath string            // "" means DefaultSearchPath
	Args       []string          // literal arguments
	Env        []string          // fixed KEY=VALUE, sorted
	EnvInherit []string          // names copied from toolgate's environment
	EnvFrom    map[string]string // the server's variable -> toolgate's variable holding its value

	// streamable HTTP
	URL            string
	HeadersFromEnv map[string]string // header name -> environment variable name

	// MaxMemory and MaxFileSize bound a stdio server's process (RLIMIT_AS
	// and RLIMIT_FSIZE, see Start): limits max_memory and max_file_size.
	MaxMemory, MaxFileSize int64

	Version string // pinned version; "" means the upstream's own
	// StrictSchemas (strict_schemas: true) refuses a tool whose schemas
	// RFC-0001 6.3 finds fault with, as a declared tool's would be; by
	// default the findings are warnings kept with the tool (see
	// UpstreamSchemas).
	StrictSchemas bool
	// UnpinnedDefinitions (pin_definitions: false) lets a pinned version
	// stand without a tool's schema_sha256 or definition_sha256: the
	// person chose to pin the version alone, and a changed description or
	// schema then passes unnoticed (doctor says so).
	UnpinnedDefinitions bool
	RequiresApproval    bool
	Idempotent          bool
	Limits              ResourceLimits            // of every call of its tools
	Tools               map[string]MCPToolOptions // by upstream tool name
}

// MCPToolOptions is what the file says of one tool of an upstream server;
// a nil field keeps the server's setting.
type MCPToolOptions struct {
	Line             int
	Version          string // pinned version; "" means the server's
	SchemaSHA256     string // hex SHA-256 of the tool's schemas, checked when a version is pinned
	DefinitionSHA256 string // hex SHA-256 of the tool's whole definition (name, title, description, annotations, schemas)
	RequiresApproval *bool
	Idempotent       *bool
	Limits           *ResourceLimits
}

// CommandPath resolves a stdio server's command to an absolute path: an
// absolute command as it is, a bare name looked up in the search path. The
// file must be a regular, executable file.
func (s *MCPServer) CommandPath() (string, error) {
	if strings.HasPrefix(s.Command, "/") {
		return s.Command, checkExecutable(s.Command)
	}
	search := s.SearchPath
	if search == "" {
		search = DefaultSearchPath
	}
	for _, dir := range filepath.SplitList(search) {
		p := filepath.Join(dir, s.Command)
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in the search path %s", s.Command, search)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", p)
	case fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%s is not executable", p)
	}
	return nil
}

// Environ is a stdio server's whole environment: PATH (the search path),
// the inherited variables that are set, the fixed ones, then the env_from
// ones, by name. A variable of env_from whose source is not set (or is
// empty, or holds a NUL) is an error: the server is not started without
// it.
func (s *MCPServer) Environ() ([]string, error) {
	search := s.SearchPath
	if search == "" {
		search = DefaultSearchPath
	}
	vars := []string{"PATH=" + search}
	for _, k := range s.EnvInherit {
		if v, ok := os.LookupEnv(k); ok && !strings.ContainsRune(v, 0) {
			vars = append(vars, k+"="+v)
		}
	}
	vars = append(vars, s.Env...)
	for _, k := range slices.Sorted(maps.Keys(s.EnvFrom)) {
		src := s.EnvFrom[k]
		v, ok := os.LookupEnv(src)
		switch {
		case !ok || v == "":
			return nil, fmt.Errorf("env_from %s: the environment variable %s is not set", k, src)
		case strings.ContainsRune(v, 0):
			return nil, fmt.Errorf("env_from %s: the environment variable %s holds a NUL", k, src)
		}
		vars = append(vars, k+"="+v)
	}
	return vars, nil
}

// Headers reads the HTTP headers of a URL server from the environment; a
// variable that is not set is an error (nothing is sent without it).
func (s *MCPServer) Headers() (map[string]string, error) {
	out := make(map[string]string, len(s.HeadersFromEnv))
	for h, v := range s.HeadersFromEnv {
		val, ok := os.LookupEnv(v)
		if !ok || val == "" {
			return nil, fmt.Errorf("header %s: the environment variable %s is not set", h, v)
		}
		if strings.ContainsAny(val, "\r\n\x00") {
			return nil, fmt.Errorf("header %s: the environment variable %s holds a line break or NUL", h, v)
		}
		out[h] = val
	}
	return out, nil
}

var (
	mcpServerNameRE = regexp.MustCompile(`^[a-z][a-z0-9]*([_-][a-z0-9]+)*$`)
	headerNameRE    = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	sha256HexRE     = regexp.MustCompile(`^[0-9a-f]{64}$`)
	mcpServerFields = []string{"name", "command", "args", "search_path", "env", "env_inherit", "env_from", "url", "headers_from_env",
		"version", "requires_approval", "idempotent", "limits", "tools", "strict_schemas", "pin_definitions"}
	mcpToolFields = []string{"version", "schema_sha256", "definition_sha256", "requires_approval", "idempotent", "limits"}
)

// mcpServers parses the mcp_servers list.
func (p *fileParser) mcpServers(list *yaml.Node) ([]MCPServer, error) {
	if list.Kind != yaml.SequenceNode {
		return nil, p.errAt(list, "mcp_servers must be a list")
	}
	var out []MCPServer
	seen := map[string]int{}
	for _, n := range list.Content {
		s, err := p.mcpServer(n)
		if err != nil {
			return nil, err
		}
		if prev, ok := seen[s.Name]; ok {
			return nil, p.errAt(n, "duplicate MCP server %s (first declared at line %d)", s.Name, prev)
		}
		seen[s.Name] = s.Line
		out = append(out, s)
	}
	return out, nil
}

func (p *fileParser) mcpServer(n *yaml.Node) (MCPServer, error) {
	s := MCPServer{Line: n.Line}
	f, err := p.mapping(n, mcpServerFields)
	if err != nil {
		return s, err
	}
	if f["name"] == nil {
		return s, p.errAt(n, "missing name")
	}
	if s.Name, err = p.str(f["name"], "name"); err != nil {
		return s, err
	}
	if !mcpServerNameRE.MatchString(s.Name) {
		return s, p.errAt(f["name"], "name %q must be lowercase words joined by _ or - (its tools are NAME.TOOL)", s.Name)
	}
	switch {
	case f["command"] != nil && f["url"] != nil:
		return s, p.errAt(f["url"], "give either command (stdio) or url (streamable HTTP), not both")
	case f["command"] == nil && f["url"] == nil:
		return s, p.errAt(n, "missing command (stdio) or url (streamable HTTP)")
	}
	stdioOnly := []string{"args", "search_path", "env", "env_inherit", "env_from"}
	if f["command"] != nil {
		if f["headers_from_env"] != nil {
			return s, p.errAt(f["headers_from_env"], "headers_from_env goes with url")
		}
		if s.Command, err = p.str(f["command"], "command"); err != nil {
			return s, err
		}
		switch c := s.Command; {
		case c == "":
			return s, p.errAt(f["command"], "command must not be empty")
		case strings.Contains(c, "/") && !strings.HasPrefix(c, "/"):
			return s, p.errAt(f["command"], "command %q must be a bare name (looked up in the search path) or an absolute path", c)
		}
		if n := f["args"]; n != nil {
			if s.Args, err = p.strList(n, "args"); err != nil {
				return s, err
			}
		}
		if n := f["search_path"]; n != nil {
			if s.SearchPath, err = p.str(n, "search_path"); err != nil {
				return s, err
			}
			if err := checkSearchPath(s.SearchPath); err != nil {
				return s, p.errAt(n, "search_path: %v", err)
			}
		}
		if n := f["env"]; n != nil {
			if n.Kind != yaml.MappingNode {
				return s, p.errAt(n, "env must be a mapping of variable names to values")
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if !envNameRE.MatchString(k.Value) || k.Value == "PATH" {
					return s, p.errAt(k, "env: %q is not a variable name, or is PATH (set search_path instead)", k.Value)
				}
				if slices.ContainsFunc(s.Env, func(e string) bool { return strings.HasPrefix(e, k.Value+"=") }) {
					return s, p.errAt(k, "env: %q given twice", k.Value)
				}
				val, err := p.str(v, "env value of "+k.Value)
				if err != nil {
					return s, err
				}
				s.Env = append(s.Env, k.Value+"="+val)
			}
			slices.Sort(s.Env)
		}
		if n := f["env_inherit"]; n != nil {
			if s.EnvInherit, err = p.strList(n, "env_inherit"); err != nil {
				return s, err
			}
			for i, k := range s.EnvInherit {
				if !envNameRE.MatchString(k) || k == "PATH" {
					return s, p.errAt(n.Content[i], "env_inherit: %q is not a variable name, or is PATH (set search_path instead)", k)
				}
			}
		}
		if n := f["env_from"]; n != nil {
			if s.EnvFrom, err = p.envFrom(n, &s); err != nil {
				return s, err
			}
		}
	} else {
		for _, k := range stdioOnly {
			if f[k] != nil {
				return s, p.errAt(f[k], "%s goes with command (stdio), not url", k)
			}
		}
		if s.URL, err = p.str(f["url"], "url"); err != nil {
			return s, err
		}
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return s, p.errAt(f["url"], "url %q must be an absolute http or https URL", s.URL)
		}
		if u.User != nil {
			return s, p.errAt(f["url"], "url must not hold credentials; put them in a header with headers_from_env")
		}
		if n := f["headers_from_env"]; n != nil {
			if n.Kind != yaml.MappingNode {
				return s, p.errAt(n, "headers_from_env must be a mapping of header names to environment variable names")
			}
			s.HeadersFromEnv = map[string]string{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if !headerNameRE.MatchString(k.Value) {
					return s, p.errAt(k, "headers_from_env: %q is not a header name", k.Value)
				}
				if _, dup := s.HeadersFromEnv[k.Value]; dup {
					return s, p.errAt(k, "headers_from_env: %q given twice", k.Value)
				}
				name, err := p.str(v, "headers_from_env value of "+k.Value)
				if err != nil {
					return s, err
				}
				if !envNameRE.MatchString(name) {
					return s, p.errAt(v, "headers_from_env: %s must name an environment variable (the value is read from it; secrets are not written in the file)", k.Value)
				}
				s.HeadersFromEnv[k.Value] = name
			}
		}
	}
	if n := f["version"]; n != nil {
		if s.Version, err = p.pinnedVersion(n); err != nil {
			return s, err
		}
	}
	for _, b := range []struct {
		key string
		dst *bool
	}{{"idempotent", &s.Idempotent}, {"requires_approval", &s.RequiresApproval}, {"strict_schemas", &s.StrictSchemas}} {
		if f[b.key] != nil {
			if *b.dst, err = p.boolean(f[b.key], b.key); err != nil {
				return s, err
			}
		}
	}
	if v := f["pin_definitions"]; v != nil {
		pin, err := p.boolean(v, "pin_definitions")
		if err != nil {
			return s, err
		}
		s.UnpinnedDefinitions = !pin
	}
	if f["limits"] == nil {
		return s, p.errAt(n, "missing limits (at least max_execution_time, a duration such as 30s)")
	}
	l, err := p.mcpLimits(f["limits"], true, s.Command != "")
	if err != nil {
		return s, err
	}
	s.MaxMemory, s.MaxFileSize = l.MaxMemory, l.MaxFileSize
	l.MaxMemory, l.MaxFileSize = 0, 0 // the process's, not each call's
	s.Limits = *l
	if n := f["tools"]; n != nil {
		if n.Kind != yaml.MappingNode {
			return s, p.errAt(n, "tools must be a mapping of the server's tool names to settings")
		}
		s.Tools = map[string]MCPToolOptions{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			name, err := p.str(k, "tool name")
			if err != nil {
				return s, err
			}
			if _, dup := s.Tools[name]; dup {
				return s, p.errAt(k, "tool %q given twice", name)
			}
			opts, err := p.mcpTool(v)
			if err != nil {
				return s, err
			}
			opts.Line = k.Line
			s.Tools[name] = opts
		}
	}
	return s, nil
}

// envFrom parses env_from: the server's variable names, each mapped to the
// name of toolgate's variable holding its value (a value is never written
// in the file). A name env or env_inherit gives already is refused.
func (p *fileParser) envFrom(n *yaml.Node, s *MCPServer) (map[string]string, error) {
	if n.Kind != yaml.MappingNode {
		return nil, p.errAt(n, "env_from must be a mapping of variable names to the environment variables holding their values")
	}
	out := map[string]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !envNameRE.MatchString(k.Value) || k.Value == "PATH" {
			return nil, p.errAt(k, "env_from: %q is not a variable name, or is PATH (set search_path instead)", k.Value)
		}
		_, dup := out[k.Value]
		if dup || slices.Contains(s.EnvInherit, k.Value) || slices.ContainsFunc(s.Env, func(e string) bool { return strings.HasPrefix(e, k.Value+"=") }) {
			return nil, p.errAt(k, "env_from: %q given twice (in env, env_inherit or env_from)", k.Value)
		}
		src, err := p.str(v, "env_from value of "+k.Value)
		if err != nil {
			return nil, err
		}
		if !envNameRE.MatchString(src) {
			return nil, p.errAt(v, "env_from: %s must name an environment variable (the value is read from it; secrets are not written in the file)", k.Value)
		}
		out[k.Value] = src
	}
	return out, nil
}

func (p *fileParser) mcpTool(n *yaml.Node) (MCPToolOptions, error) {
	var o MCPToolOptions
	f, err := p.mapping(n, mcpToolFields)
	if err != nil {
		return o, err
	}
	if v := f["version"]; v != nil {
		if o.Version, err = p.pinnedVersion(v); err != nil {
			return o, err
		}
	}
	for _, h := range []struct {
		key string
		dst *string
	}{{"schema_sha256", &o.SchemaSHA256}, {"definition_sha256", &o.DefinitionSHA256}} {
		if v := f[h.key]; v != nil {
			if *h.dst, err = p.str(v, h.key); err != nil {
				return o, err
			}
			if !sha256HexRE.MatchString(*h.dst) {
				return o, p.errAt(v, "%s must be 64 lowercase hex digits", h.key)
			}
		}
	}
	for _, b := range []struct {
		key string
		dst **bool
	}{{"idempotent", &o.Idempotent}, {"requires_approval", &o.RequiresApproval}} {
		if f[b.key] != nil {
			v, err := p.boolean(f[b.key], b.key)
			if err != nil {
				return o, err
			}
			*b.dst = &v
		}
	}
	if v := f["limits"]; v != nil {
		if o.Limits, err = p.mcpLimits(v, false, false); err != nil {
			return o, err
		}
	}
	return o, nil
}

func (p *fileParser) pinnedVersion(n *yaml.Node) (string, error) {
	v, err := p.str(n, "version")
	if err != nil {
		return "", err
	}
	if !IsSemver(v) {
		return "", p.errAt(n, "version %q is not a semantic version such as 1.2.0", v)
	}
	return v, nil
}

// mcpLimits parses a limits mapping; max_execution_time is required when
// required is set; process (a stdio server's own limits) allows
// max_memory and max_file_size.
func (p *fileParser) mcpLimits(n *yaml.Node, required, process bool) (*ResourceLimits, error) {
	fields := []string{"max_execution_time", "max_output_bytes", "max_concurrent"}
	if process {
		fields = append(fields, "max_memory", "max_file_size")
	}
	lf, err := p.mapping(n, fields)
	if err != nil {
		return nil, err
	}
	var l ResourceLimits
	for _, b := range []struct {
		key string
		dst *int64
	}{{"max_memory", &l.MaxMemory}, {"max_file_size", &l.MaxFileSize}} {
		if lf[b.key] != nil {
			if *b.dst, err = p.integer(lf[b.key], b.key, 1<<50); err != nil {
				return nil, err
			}
		}
	}
	if lf["max_execution_time"] == nil {
		if required {
			return nil, p.errAt(n, "missing max_execution_time (a duration such as 30s)")
		}
	} else {
		s, err := p.str(lf["max_execution_time"], "max_execution_time")
		if err != nil {
			return nil, err
		}
		if l.MaxExecutionTime, err = time.ParseDuration(s); err != nil || l.MaxExecutionTime <= 0 {
			return nil, p.errAt(lf["max_execution_time"], "max_execution_time %q is not a positive duration such as 30s", s)
		}
	}
	if lf["max_output_bytes"] != nil {
		if l.MaxOutputBytes, err = p.integer(lf["max_output_bytes"], "max_output_bytes", 1<<50); err != nil {
			return nil, err
		}
	}
	if lf["max_concurrent"] != nil {
		v, err := p.integer(lf["max_concurrent"], "max_concurrent", 1<<20)
		if err != nil {
			return nil, err
		}
		l.MaxConcurrent = int(v)
	}
	return &l, nil
}

// registerMCP registers the tools servers makes of the file's mcp_servers.
func (p *fileParser) registerMCP(reg *Registry, servers MCPTools) error {
	if len(p.servers) == 0 {
		return nil
	}
	reg.servers = p.servers
	if servers == nil {
		return p.errAt(p.serversKey, "mcp_servers: upstream MCP servers need a gateway (LoadRegistryFileWith with package mcp's Gateway; toolgate's commands have one)")
	}
	list, err := servers(p.servers)
	if err != nil {
		return &RegistryFileError{File: p.file, Line: p.serversKey.Line, Reason: "mcp_servers: " + strings.TrimPrefix(err.Error(), "mcp: "), Err: err}
	}
	// An upstream tool never shares an id with a tool the file declares (or
	// a base tool): at a higher version it would be what a call of that id
	// runs. The ids are checked before any is registered.
	for _, t := range list {
		id := t.Declaration().ID
		if reg.has(id) {
			err := fmt.Errorf("%w: %s, an upstream tool, has the id of a tool already declared", ErrInvalidDeclaration, id)
			return &RegistryFileError{File: p.file, Line: p.serversKey.Line,
				Reason: fmt.Sprintf("mcp_servers: the upstream tool %s has the id of a tool the file (or toolgate) already declares: rename the server or that tool", id), Err: err}
		}
	}
	for _, t := range list {
		if err := reg.Register(t); err != nil {
			return &RegistryFileError{File: p.file, Line: p.serversKey.Line, Reason: "mcp_servers: " + strings.TrimPrefix(err.Error(), "tools: "), Err: err}
		}
	}
	return nil
}
