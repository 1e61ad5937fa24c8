package explain

import (
	"fmt"
	"strings"
)

// QuoteArgs shows argv so that each argument is unambiguous: quoted when
// it is empty or holds anything but plain characters. `toolgate intent
// show` and the web UI's intent page show a process tool's argv with it.
func QuoteArgs(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r == '-' || r == '_' || r == '.' || r == '/' || r == '=' || r == ':' || r == ',' || r == '@' ||
				(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
		}) < 0 {
			out[i] = a
			continue
		}
		out[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(out, " ")
}
