package txn

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendRecord appends the JSON form of r: the same document json.Marshal
// writes (field names, order, omitempty), decoded by json.Unmarshal, but
// without reflection. Records are encoded twice per execution on the
// commit path, where encoding/json was a tenth of the runtime's CPU.
func appendRecord(b []byte, r *Record) ([]byte, error) {
	b = append(b, `{"executionId":`...)
	b = appendString(b, r.ExecutionID)
	b = append(b, `,"callId":`...)
	b = appendString(b, r.CallID)
	if r.TraceID != "" {
		b = append(b, `,"traceId":`...)
		b = appendString(b, r.TraceID)
	}
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(r.Attempt), 10)
	b = append(b, `,"toolId":`...)
	b = appendString(b, r.ToolID)
	b = append(b, `,"toolVersion":`...)
	b = appendString(b, r.ToolVersion)
	if r.Principal != "" {
		b = append(b, `,"principal":`...)
		b = appendString(b, r.Principal)
	}
	b = append(b, `,"state":`...)
	b = appendString(b, r.State)
	b = append(b, `,"transitions":`...)
	if r.Transitions == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, t := range r.Transitions {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"from":`...)
			b = appendString(b, t.From)
			b = append(b, `,"to":`...)
			b = appendString(b, t.To)
			b = append(b, `,"event":`...)
			b = appendString(b, t.Event)
			b = append(b, `,"at":`...)
			var err error
			if b, err = appendTime(b, t.At); err != nil {
				return nil, err
			}
			if t.Reason != "" {
				b = append(b, `,"reason":`...)
				b = appendString(b, t.Reason)
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if len(r.Capabilities) > 0 {
		b = append(b, `,"capabilities":`...)
		b = appendStrings(b, r.Capabilities)
	}
	if r.InputHash != "" {
		b = append(b, `,"inputHash":`...)
		b = appendString(b, r.InputHash)
	}
	if len(r.Output) > 0 {
		if !json.Valid(r.Output) {
			return nil, errors.New("output is not valid JSON")
		}
		b = append(b, `,"output":`...)
		b = appendCompact(b, r.Output)
	}
	if r.OutputHash != "" {
		b = append(b, `,"outputHash":`...)
		b = appendString(b, r.OutputHash)
	}
	if e := r.Error; e != nil {
		b = append(b, `,"error":{"type":`...)
		b = appendString(b, e.Type)
		if e.Code != "" {
			b = append(b, `,"code":`...)
			b = appendString(b, e.Code)
		}
		b = append(b, `,"message":`...)
		b = appendString(b, e.Message)
		if e.Stack != "" {
			b = append(b, `,"stack":`...)
			b = appendString(b, e.Stack)
		}
		b = append(b, '}')
	}
	if w := r.WriteSet; w != nil {
		b = append(b, `,"writeSet":{"puts":`...)
		b = strconv.AppendInt(b, int64(w.Puts), 10)
		b = append(b, `,"deletes":`...)
		b = strconv.AppendInt(b, int64(w.Deletes), 10)
		if len(w.Namespaces) > 0 {
			b = append(b, `,"namespaces":`...)
			b = appendStrings(b, w.Namespaces)
		}
		b = append(b, `,"committed":`...)
		b = strconv.AppendBool(b, w.Committed)
		b = append(b, '}')
	}
	if len(r.AuditEvents) > 0 {
		b = append(b, `,"auditEvents":`...)
		b = appendStrings(b, r.AuditEvents)
	}
	b = append(b, `,"startedAt":`...)
	var err error
	if b, err = appendTime(b, r.StartedAt); err != nil {
		return nil, err
	}
	if !r.EndedAt.IsZero() {
		b = append(b, `,"endedAt":`...)
		if b, err = appendTime(b, r.EndedAt); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendCompact appends valid JSON without insignificant whitespace, as
// json.Marshal does for a RawMessage.
func appendCompact(b, raw []byte) []byte {
	inString, escaped := false, false
	for _, c := range raw {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			continue
		}
		b = append(b, c)
	}
	return b
}

func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendTime writes t as time.Time.MarshalJSON does (RFC 3339 with
// nanoseconds), refusing the years it refuses.
func appendTime(b []byte, t time.Time) ([]byte, error) {
	if y := t.Year(); y < 0 || y > 9999 {
		return nil, errors.New("time year outside of range [0,9999]")
	}
	if _, off := t.Zone(); off <= -24*3600 || off >= 24*3600 {
		return nil, errors.New("time zone offset outside of range (-24h, 24h)")
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string. Like encoding/json, it replaces
// invalid UTF-8 with U+FFFD and escapes U+2028 and U+2029.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			switch r {
			case utf8.RuneError:
				b = append(b, `\ufffd`...)
			default:
				b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			}
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
