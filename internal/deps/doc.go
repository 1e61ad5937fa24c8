// Package deps holds no code: its tests are statements about the module's
// code. deps_test.go says which toolgate package may import which (the
// shape docs/architecture.md describes); boundary_test.go holds the single
// execution boundary: no package but runtime runs a tool (see the runtime
// and tools package documentation).
package deps
