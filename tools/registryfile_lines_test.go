package tools_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/tools"
)

// A YAML syntax error is reported at its true line and column, not at the
// line of the mapping or sequence it is in (which go.yaml.in gives: line 1
// or 41 for a mistake on line 42).
func TestRegistryFile_SyntaxErrorLineColumn(t *testing.T) {
	var b strings.Builder
	b.WriteString("tools:\n")
	for i := range 10 {
		fmt.Fprintf(&b, "  - id: t%d\n    version: 1.0.0\n    description: d\n    command: echo\n", i)
	}
	base := b.String() // 41 lines: the mistake is on line 42
	for _, tc := range []struct {
		name, bad  string
		line, col  int
		reasonPart string
	}{
		{"mapping value in a plain scalar", "    description: a: b\n", 42, 19, "mapping values are not allowed"},
		{"bad indentation", "   bad: x\n", 42, 4, "did not find expected '-' indicator"},
		{"tab", "\tcommand: x\n", 42, 1, "tab character"},
		{"unclosed flow sequence", "    args: [a, b\n", 42, 15, "did not find expected ',' or ']'"},
		{"non-ASCII before the mistake", "    description: café: b\n", 42, 22, "mapping values are not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tools.ParseRegistryFile("reg.yaml", []byte(base+tc.bad+"  - id: z\n    version: 1.0.0\n"))
			var fe *tools.RegistryFileError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v; want a *RegistryFileError", err)
			}
			want := fmt.Sprintf("reg.yaml:%d:%d: ", tc.line, tc.col)
			if fe.Line != tc.line || fe.Column != tc.col || !strings.Contains(fe.Reason, tc.reasonPart) || !strings.Contains(err.Error(), want) {
				t.Errorf("got %v (line %d, column %d); want %s%s", err, fe.Line, fe.Column, want, tc.reasonPart)
			}
		})
	}
}
