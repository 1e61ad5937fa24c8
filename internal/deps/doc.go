// Package deps holds no code: its test is the statement of which toolgate
// package may import which (see deps_test.go and DESIGN.md).
package deps
