package server

import (
	"regexp"
	"sync"
)

// lazyRegexp is a regular expression compiled at its first use, not at
// start-up: a counted repetition such as {1,128} compiles to that many
// copies, thousands of allocations every CLI command would pay at init.
type lazyRegexp struct {
	expr string
	once sync.Once
	re   *regexp.Regexp
}

func (l *lazyRegexp) MatchString(s string) bool {
	l.once.Do(func() { l.re = regexp.MustCompile(l.expr) })
	return l.re.MatchString(s)
}
