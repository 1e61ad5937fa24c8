package rules_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/rules"
)

// BenchmarkDecide is Set.Decide alone, on 100 rules spread over 25 tools
// (4 evaluated) and on 100 rules over the tool called (all evaluated).
func BenchmarkDecide(b *testing.B) {
	for _, spread := range []bool{true, false} {
		var src strings.Builder
		for i := range 100 {
			tool := "test.echo"
			if spread && i/4 > 0 {
				tool = fmt.Sprintf("test.t%d", i/4)
			}
			switch i % 4 {
			case 0:
				fmt.Fprintf(&src, "forbid(principal, action in Toolgate::Action::%q, resource) when { context.input.msg == \"blocked-%d\" };\n", tool, i)
			case 1:
				fmt.Fprintf(&src, "@approval(\"finance\")\nforbid(principal, action == Toolgate::Action::\"%s@1.0.0\", resource) when { context.input.msg like \"refund-%d-*\" };\n", tool, i)
			case 2:
				fmt.Fprintf(&src, "forbid(principal in Toolgate::Group::\"interns\", action in Toolgate::Action::%q, resource) when { context.input.msg == \"x%d\" };\n", tool, i)
			case 3:
				fmt.Fprintf(&src, "forbid(principal, action in [Toolgate::Action::%q], resource) when { principal.claims has team && principal.claims.team.contains(\"t%d\") };\n", tool, i)
			}
		}
		s, err := rules.Load([]string{write(b, "r.cedar", src.String())}, map[string][]string{"finance": {"fiona"}, "interns": {"ian"}})
		if err != nil {
			b.Fatal(err)
		}
		req := rules.Request{Principal: "tester", Tool: "test.echo", Version: "1.0.0", Input: json.RawMessage(`{"msg":"hello"}`)}
		b.Run(map[bool]string{true: "spread", false: "onetool"}[spread], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d := s.Decide(req); d.Effect != rules.Allow {
					b.Fatal(d)
				}
			}
		})
	}
}
