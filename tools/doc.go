// Package tools defines what a tool is: its RFC-0001 [Declaration], the
// [Tool] contract, typed tools through [NewTyped], the [Registry] that holds
// them, and the built-in tools.
//
// # Declarations and schemas
//
// [Registry.Register] validates a declaration (id, semantic version, name,
// description, capabilities, limits) and compiles both schemas once, under
// JSON Schema draft 2020-12. It refuses schemas that break RFC-0001 6.3 (a
// missing $schema, a property without type or description, properties
// without required) with a [*SchemaError] naming the JSON pointer of the
// offence. The compiler never loads anything from the filesystem or the
// network: a schema is one self-contained document. A value a "pattern"
// refuses is reported with the description of the schema holding the
// pattern, which says in words what the regular expression means.
//
// # Capabilities that depend on the input
//
// A declaration's RequiredCapabilities are required by every call. Its
// InputCapabilities ([InputCapability]) are required by some calls only:
// each names a capability and a string property of the input schema, and a
// call whose validated input gives that property requires the capability
// scoped by its value (a filesystem path made absolute against the
// runtime's working directory and cleaned). The exec tools declare
// filesystem.read:{cwd}: a call without a working directory needs no
// filesystem grant, one with a working directory needs filesystem.read
// covering it. The file tools declare their path the same way
// (filesystem.read:{path}, filesystem.write:{path}), so their path is
// decided with the call, not only inside the handle.
// [Declaration.RequiredFor] computes what one input requires;
// the runtime decides on it in RFC-0001 5.1 rule 2, after the input is
// validated and before anything runs, and records exactly that in the
// decision. [Declaration.Decide] is that decision whole, the one the
// runtime makes and its explanations show: it also looks each filesystem
// path of the input up as the handle will, and denies one that leads out
// of its grant. [Declaration.MayRequire] is every capability a call may need,
// for listings and hints (MCP's readOnlyHint counts them). A registry file
// writes one as "filesystem.read:{path}" in capabilities.
//
// # Registry
//
// A registry is written while the program starts, then frozen with
// [Registry.Freeze]. Lookups on a registry that is not frozen fail with
// [ErrNotFrozen], so what runs is always read from a registry that can no
// longer change.
//
// # Process tools
//
// [ProcessTools] are the tools of the bounded process tools document
// (004): which_command, exec_status, exec_capture, exec_with_input and exec
// (the compatibility path). They run one program through [Env.Run] (argv
// only, never a shell; the command resolved to an absolute path; an
// environment allowlist; the process group killed at the deadline; output
// capped while the pipes drain) and return an [ExecResult]. A process that
// ran is data, a launch failure is a [*ProcessError].
//
// # Registry files
//
// [LoadRegistryFile] declares external process tools in a YAML file: id,
// version, schemas, capabilities (including "name:{field}" input
// capabilities; a cwd brings filesystem.read:{cwd}), limits, the command
// and an [ArgvTemplate] that places validated input fields as whole
// arguments.
// It fails closed with file:line and the reason, and returns a frozen
// registry. The file is parsed with go.yaml.in/yaml/v3, the YAML
// organization's maintained continuation of gopkg.in/yaml.v3 (same API and
// parser): YAML is too large a language to hand-parse safely (anchors,
// block scalars, flow collections, quoting), and yaml.Node keeps the line
// of every value, which is what lets every error name its line. JSON is
// valid YAML, so a .json registry file loads too.
//
// # File tools and file names
//
// The default versions of the file tools (file.read@1.2.0, file.list@1.1.0,
// file.write@1.1.0) take any path in UTF-8 without control characters
// ([PathSchema]): spaces, non-ASCII letters, a leading '-'. file.read@1.0.0
// is RFC-0001 appendix A's, pattern included, and the other older versions
// keep its ASCII set. Every input is refused when it is not valid UTF-8,
// raw or as an escaped half of a UTF-16 surrogate pair (encoding/json
// would hand the tool U+FFFD instead). What a path reaches is the
// filesystem handles' to confine, below.
//
// # Filesystem grants
//
// [Env.FS] reaches only what the filesystem grants of its capability name
// cover. A grant names a place: the symbolic links in its path are followed
// once, when the grant is made (capability.Resolve: a policy resolves its
// grants when it is built, a grant given for one call when the call is
// decided), and `toolgate policy check` shows where each leads. A request is
// matched against the grant as written (or against its place), and the
// handle opens the place once per attempt following no link in its path: a
// link found there later, for the granted file or directory or a directory
// above it, is an [*AccessError], never followed. A grant that was never
// resolved (an Env built by hand) is its own place, so a link in it is
// refused, for a directory as for a file.
//
// Below a granted directory, paths are opened through an os.Root at it,
// which follows a link only while it stays inside. A granted file is opened
// by its name with O_NOFOLLOW and read, written or listed through that one
// descriptor, so a file swapped for a link between a check and the open
// leads nowhere else. A staged write creates its file next to the target
// (O_EXCL) and renames it over the target's name, which replaces a link
// swapped in there rather than following it.
//
// # Who runs a tool
//
// A tool runs only through the runtime's Execute, the single execution
// boundary (see the runtime package). No package of the module but runtime
// calls [Tool.Execute] or a tool's [RawFunc] or [TypedFunc] body; within
// this package, a tool's Execute calls its own body and never another
// tool, and only this package's tests run a tool directly, on an [Env]
// they build, as unit tests. internal/deps.TestExecutionBoundary scans the
// module's code, tests included, and fails on any other call.
//
// # Trust
//
// In-process Go tools are trusted code: the [Env] handles confine what a
// well-behaved tool reaches (the granted places, as above), but Go cannot
// stop a tool from calling os.Open itself. Isolation from a hostile tool
// needs a separate process.
//
// # Concurrency
//
// A frozen Registry and its Entries are safe for concurrent use. A tool's
// Execute may be called from many goroutines at once.
package tools
