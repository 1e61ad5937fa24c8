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
// network: a schema is one self-contained document.
//
// # Registry
//
// A registry is written while the program starts, then frozen with
// [Registry.Freeze]. Lookups on a registry that is not frozen fail with
// [ErrNotFrozen], so what runs is always read from a registry that can no
// longer change.
//
// # Trust
//
// In-process Go tools are trusted code: the [Env] handles confine what a
// well-behaved tool reaches (a filesystem rooted with os.Root at the granted
// paths), but Go cannot stop a tool from calling os.Open itself. Isolation
// from a hostile tool needs a separate process.
//
// # Concurrency
//
// A frozen Registry and its Entries are safe for concurrent use. A tool's
// Execute may be called from many goroutines at once.
package tools
