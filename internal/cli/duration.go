package cli

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

// durationForms is what a duration flag accepts, for its error and help.
const durationForms = "a number and a unit: ms, s, m, h, d (day, 24h) or w (week, 7d), combined as in 1h30m or 1w2d"

// durationValue is a duration flag that accepts days and weeks as well as
// Go's units: 90s, 1h30m, 1d, 2w, 1d12h. Every duration flag of the CLI
// parses through it, so they all accept the same forms.
type durationValue time.Duration

func newDurationValue(p *time.Duration, def time.Duration) *durationValue {
	*p = def
	return (*durationValue)(p)
}

func (d *durationValue) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) String() string {
	if *d == 0 {
		return "0" // no "(default 0s)" in the help
	}
	return time.Duration(*d).String()
}
func (d *durationValue) Type() string { return "duration" }

// parseDuration parses s as time.ParseDuration does, with the units d (24
// hours) and w (7 days) added; they come first (1w2d3h).
func parseDuration(s string) (time.Duration, error) {
	bad := func() (time.Duration, error) {
		return 0, errors.New("not a duration: use " + durationForms)
	}
	rest, neg := strings.TrimSpace(s), false
	if r, ok := strings.CutPrefix(rest, "-"); ok {
		rest, neg = r, true
	} else {
		rest = strings.TrimPrefix(rest, "+")
	}
	var total float64
	for rest != "" {
		i := strings.IndexFunc(rest, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
		if i <= 0 || (rest[i] != 'd' && rest[i] != 'w') {
			break
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return bad()
		}
		unit := 24 * time.Hour
		if rest[i] == 'w' {
			unit *= 7
		}
		total += n * float64(unit)
		rest = rest[i+1:]
	}
	if rest != "" {
		if strings.HasPrefix(rest, "-") || strings.HasPrefix(rest, "+") {
			return bad()
		}
		v, err := time.ParseDuration(rest)
		if err != nil {
			return bad()
		}
		total += float64(v)
	} else if total == 0 && strings.Trim(s, " +-") == "" {
		return bad()
	}
	if total > math.MaxInt64 {
		return 0, errors.New("too long a duration")
	}
	if neg {
		total = -total
	}
	return time.Duration(total), nil
}
