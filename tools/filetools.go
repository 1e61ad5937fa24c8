package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/capability"
)

// FileReadRangeInput is the input of file.read@1.1.0 and 1.2.0.
type FileReadRangeInput struct {
	Path   string `json:"path"`
	Offset int64  `json:"offset,omitempty"`
	Limit  int64  `json:"limit,omitempty"`
}

// FileReadRangeOutput is the output of file.read@1.1.0 and 1.2.0.
type FileReadRangeOutput struct {
	Content string `json:"content"`
	Size    int64  `json:"size"`
	Offset  int64  `json:"offset"`
	Length  int64  `json:"length"`
	EOF     bool   `json:"eof"`
}

// FileReadRange returns file.read@1.1.0: appendix A's file.read with an
// offset and a limit, so a file larger than maxFileSize can be read in
// parts. maxFileSize bounds what one call reads: without a limit, the rest
// of the file from offset must fit in it; a limit must not exceed it. A part
// never ends inside a UTF-8 sequence (it ends before it; Length says where
// the next part begins), and an offset inside one is refused. size is the
// whole file's size. file.read@1.0.0 stays exactly as appendix A.
func FileReadRange() Tool {
	return fileReadRange("1.1.0", `"path": {"type": "string", "description": "File path to read", "pattern": "^[a-zA-Z0-9/_.-]+$", "maxLength": 4096}`)
}

// FileRead12 returns file.read@1.2.0, the default: file.read@1.1.0 for any
// file name, spaces and non-ASCII letters included (see [PathSchema]).
func FileRead12() Tool {
	return fileReadRange("1.2.0", pathProperty("File path to read"))
}

// PathSchema is the pattern (a regular expression, as the input schema's
// "pattern" holds it) of the rule the default versions of the file tools
// (file.read@1.2.0, file.list@1.1.0, file.write@1.1.0) hold a path to: a
// string of 1 to 4096 characters, any UTF-8 but the control characters
// (C0, DEL and C1, NUL and newlines among them). An input that is not
// valid UTF-8 (raw bytes, or an unpaired UTF-16 surrogate escape) is
// refused before any schema applies. The path is not otherwise restricted
// (a leading '-', '..' segments): the filesystem handles confine it to the
// granted places. file.read@1.0.0 keeps RFC-0001 appendix A's pattern, and
// file.read@1.1.0, file.list@1.0.0 and file.write@1.0.0 its ASCII set.
const PathSchema = `^[^\x00-\x1f\x7f-\x9f]+$`

// pathNote says, in the description of a file tool, what its version
// changed: ascii is the version whose paths are ASCII letters, digits and
// /_.- only, utf8 the next, which takes any UTF-8 name.
func pathNote(version, ascii, utf8 string) string {
	if version == ascii {
		return "; paths of ASCII letters, digits and /_.- only (" + utf8 + " takes any UTF-8 name)"
	}
	return "; any UTF-8 path without control characters (" + ascii + " took ASCII letters, digits and /_.- only)"
}

// pathProperty is the path property of the default file tool versions.
func pathProperty(desc string) string {
	pattern, _ := json.Marshal(PathSchema)
	return `"path": {"type": "string", "description": "` + desc + `: any UTF-8 name without control characters", "minLength": 1, "maxLength": 4096, "pattern": ` + string(pattern) + `}`
}

func fileReadRange(version, pathProp string) Tool {
	decl := Declaration{
		ID:          "file.read",
		Version:     version,
		Name:        "File Reader",
		Description: "Reads file contents from filesystem, whole or from an offset up to a limit" + pathNote(version, "1.1.0", "1.2.0"),
		InputSchema: json.RawMessage(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    ` + pathProp + `,
    "offset": {"type": "integer", "description": "Byte offset to start reading at (default 0)", "minimum": 0, "maximum": 9007199254740991},
    "limit": {"type": "integer", "description": "Most bytes to read (default: to the end of the file)", "minimum": 1, "maximum": 9007199254740991}
  },
  "required": ["path"],
  "additionalProperties": false
}`),
		OutputSchema: json.RawMessage(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "content": {"type": "string", "description": "File contents from offset"},
    "size": {"type": "number", "description": "File size in bytes"},
    "offset": {"type": "integer", "description": "Byte offset the content starts at"},
    "length": {"type": "integer", "description": "Bytes of content; the next part starts at offset + length"},
    "eof": {"type": "boolean", "description": "The content reaches the end of the file"}
  },
  "required": ["content", "size", "offset", "length", "eof"],
  "additionalProperties": false
}`),
		RequiredCapabilities: []capability.Capability{{Name: "filesystem.read"}},
		InputCapabilities:    pathCapability("filesystem.read"),
		ResourceLimits:       ResourceLimits{MaxExecutionTime: 5 * time.Second, MaxMemory: 10 << 20, MaxFileSize: 1 << 20},
		Deterministic:        true,
		Idempotent:           true,
	}
	return NewTyped(decl, readFileRange)
}

func readFileRange(ctx context.Context, env *Env, in FileReadRangeInput) (FileReadRangeOutput, error) {
	fsys := env.FS("filesystem.read")
	if fi, err := fsys.Stat(in.Path); err != nil {
		return FileReadRangeOutput{}, err
	} else if !fi.Mode().IsRegular() {
		return FileReadRangeOutput{}, fmt.Errorf("tools: %s is not a regular file", in.Path)
	}
	f, err := fsys.Open(in.Path)
	if err != nil {
		return FileReadRangeOutput{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return FileReadRangeOutput{}, err
	}
	if !fi.Mode().IsRegular() {
		return FileReadRangeOutput{}, fmt.Errorf("tools: %s is not a regular file", in.Path)
	}
	size := fi.Size()
	if in.Offset > size {
		return FileReadRangeOutput{}, fmt.Errorf("tools: offset %d is past the end of %s (%d bytes)", in.Offset, in.Path, size)
	}
	max := env.Limits.MaxFileSize
	want := in.Limit
	switch {
	case want == 0:
		want = size - in.Offset
		if max > 0 && want > max {
			return FileReadRangeOutput{}, &LimitError{Limit: "file_size_limit", Max: max, Got: want,
				Detail: "file.read@1.1.0 and later read a large file in parts, with offset and limit"}
		}
	case max > 0 && want > max:
		return FileReadRangeOutput{}, &LimitError{Limit: "file_size_limit", Max: max, Got: want, Detail: "limit is above maxFileSize"}
	}
	buf := make([]byte, min(want, size-in.Offset)+utf8.UTFMax)
	n, err := f.ReadAt(buf, in.Offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return FileReadRangeOutput{}, err
	}
	if ctx.Err() != nil {
		return FileReadRangeOutput{}, ctx.Err()
	}
	b := buf[:n]
	if len(b) > 0 && !utf8.RuneStart(b[0]) {
		return FileReadRangeOutput{}, fmt.Errorf("tools: offset %d is inside a UTF-8 sequence of %s", in.Offset, in.Path)
	}
	if int64(len(b)) > want {
		// Cut at want, or before it if a sequence crosses it.
		cut := want
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut--
		}
		b = b[:cut]
	}
	if !utf8.Valid(b) {
		return FileReadRangeOutput{}, errors.New("tools: " + in.Path + " is not UTF-8 text")
	}
	return FileReadRangeOutput{
		Content: string(b), Size: size, Offset: in.Offset, Length: int64(len(b)),
		EOF: in.Offset+int64(len(b)) >= size,
	}, nil
}

// FileListInput is the input of file.list.
type FileListInput struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
	Limit     int    `json:"limit,omitempty"`
}

// FileListEntry is one entry file.list reports.
type FileListEntry struct {
	Path string `json:"path"` // relative to the listed directory, with "/"
	Type string `json:"type"` // "file", "dir", "symlink" or "other"
	Size int64  `json:"size"` // bytes, for files; 0 otherwise
}

// FileListOutput is the output of file.list.
type FileListOutput struct {
	Entries   []FileListEntry `json:"entries"`
	Truncated bool            `json:"truncated"`
}

// FileList returns file.list: the entries of a directory at or below a
// granted filesystem.read scope, sorted by path, optionally recursive
// (symbolic links are reported, never followed), at most limit of them.
func FileList() Tool {
	return fileList("1.0.0", `"path": {"type": "string", "description": "Directory to list", "pattern": "^[a-zA-Z0-9/_.-]+$", "maxLength": 4096}`)
}

// FileList11 returns file.list@1.1.0, the default: file.list@1.0.0 for any
// directory name (see [PathSchema]).
func FileList11() Tool { return fileList("1.1.0", pathProperty("Directory to list")) }

func fileList(version, pathProp string) Tool {
	decl := Declaration{
		ID:          "file.list",
		Version:     version,
		Name:        "Directory Lister",
		Description: "Lists the entries of a directory, optionally recursively, without following symbolic links" + pathNote(version, "1.0.0", "1.1.0"),
		InputSchema: json.RawMessage(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    ` + pathProp + `,
    "recursive": {"type": "boolean", "description": "Also list subdirectories (default false)"},
    "limit": {"type": "integer", "description": "Most entries to return (default 1000)", "minimum": 1, "maximum": 10000}
  },
  "required": ["path"],
  "additionalProperties": false
}`),
		OutputSchema: json.RawMessage(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "entries": {
      "type": "array",
      "description": "Entries sorted by path",
      "items": {
        "type": "object",
        "properties": {
          "path": {"type": "string", "description": "Path relative to the listed directory"},
          "type": {"type": "string", "description": "file, dir, symlink or other", "enum": ["file", "dir", "symlink", "other"]},
          "size": {"type": "integer", "description": "Size in bytes of a file; 0 otherwise"}
        },
        "required": ["path", "type", "size"],
        "additionalProperties": false
      }
    },
    "truncated": {"type": "boolean", "description": "More entries exist than were returned"}
  },
  "required": ["entries", "truncated"],
  "additionalProperties": false
}`),
		RequiredCapabilities: []capability.Capability{{Name: "filesystem.read"}},
		InputCapabilities:    pathCapability("filesystem.read"),
		ResourceLimits:       ResourceLimits{MaxExecutionTime: 10 * time.Second, MaxOutputBytes: 4 << 20},
		Deterministic:        true,
		Idempotent:           true,
	}
	return NewTyped(decl, listFiles)
}

func listFiles(ctx context.Context, env *Env, in FileListInput) (FileListOutput, error) {
	limit := in.Limit
	if limit == 0 {
		limit = 1000
	}
	fsys := env.FS("filesystem.read")
	out := FileListOutput{Entries: []FileListEntry{}}
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		es, err := fsys.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range es {
			if err := ctx.Err(); err != nil {
				return err
			}
			if len(out.Entries) == limit {
				out.Truncated = true
				return nil
			}
			p := path.Join(rel, e.Name())
			entry := FileListEntry{Path: p, Type: "other"}
			switch t := e.Type(); {
			case t.IsDir():
				entry.Type = "dir"
			case t&fs.ModeSymlink != 0:
				entry.Type = "symlink"
			case t.IsRegular():
				entry.Type = "file"
				if fi, err := e.Info(); err == nil {
					entry.Size = fi.Size()
				}
			}
			out.Entries = append(out.Entries, entry)
			if in.Recursive && entry.Type == "dir" {
				if err := walk(filepath.Join(dir, e.Name()), p); err != nil {
					return err
				}
				if out.Truncated {
					return nil
				}
			}
		}
		return nil
	}
	if err := walk(in.Path, ""); err != nil {
		return FileListOutput{}, err
	}
	return out, nil
}

// FileWriteInput is the input of file.write.
type FileWriteInput struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// FileWriteOutput is the output of file.write.
type FileWriteOutput struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	Created bool   `json:"created"`
}

// FileWrite returns file.write: it writes a UTF-8 text file at or below a
// granted filesystem.write scope, creating or replacing it. The write is
// staged: the file changes only when the attempt commits, atomically (a
// rename), and a failed or rolled back attempt leaves it exactly as it was.
func FileWrite() Tool {
	return fileWrite("1.0.0", `"path": {"type": "string", "description": "File path to write", "pattern": "^[a-zA-Z0-9/_.-]+$", "maxLength": 4096}`)
}

// FileWrite11 returns file.write@1.1.0, the default: file.write@1.0.0 for
// any file name (see [PathSchema]).
func FileWrite11() Tool { return fileWrite("1.1.0", pathProperty("File path to write")) }

func fileWrite(version, pathProp string) Tool {
	decl := Declaration{
		ID:          "file.write",
		Version:     version,
		Name:        "File Writer",
		Description: "Writes a text file, creating or replacing it when the invocation commits; a failed invocation changes nothing" + pathNote(version, "1.0.0", "1.1.0"),
		InputSchema: json.RawMessage(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    ` + pathProp + `,
    "content": {"type": "string", "description": "The whole new content of the file"}
  },
  "required": ["path", "content"],
  "additionalProperties": false
}`),
		OutputSchema: json.RawMessage(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "The path written"},
    "size": {"type": "integer", "description": "Bytes written"},
    "created": {"type": "boolean", "description": "The file did not exist before"}
  },
  "required": ["path", "size", "created"],
  "additionalProperties": false
}`),
		RequiredCapabilities: []capability.Capability{{Name: "filesystem.write"}},
		InputCapabilities:    pathCapability("filesystem.write"),
		ResourceLimits:       ResourceLimits{MaxExecutionTime: 5 * time.Second, MaxMemory: 10 << 20, MaxFileSize: 1 << 20},
		Deterministic:        true,
		Idempotent:           true,
	}
	return NewTyped(decl, func(ctx context.Context, env *Env, in FileWriteInput) (FileWriteOutput, error) {
		created, err := env.FS("filesystem.write").WriteStaged(in.Path, []byte(in.Content), 0o644)
		if err != nil {
			return FileWriteOutput{}, err
		}
		return FileWriteOutput{Path: in.Path, Size: int64(len(in.Content)), Created: created}, nil
	})
}
