// Package docscheck holds no code: its tests keep docs/ true to the code.
package docscheck
