package audit

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// AppendJSON appends the JSON encoding of e, the document MarshalJSON
// writes (same fields, order and omissions; strings escaped minimally, so
// the bytes can differ where encoding/json escapes <, >, & or U+2028/9, but
// never the decoded value), without reflection. The runtime encodes one
// event per lifecycle transition on its hot path.
func (e *Event) AppendJSON(b []byte) []byte {
	b = append(b, '{')
	if e.Seq != 0 {
		b = append(b, `"seq":`...)
		b = strconv.AppendUint(b, e.Seq, 10)
		b = append(b, ',')
	}
	if e.PrevHash != "" {
		b = append(b, `"prevHash":`...)
		b = appendJSONString(b, e.PrevHash)
		b = append(b, ',')
	}
	b = append(b, `"eventId":`...)
	b = appendJSONString(b, e.EventID)
	b = append(b, `,"timestamp":`...)
	b = strconv.AppendInt(b, e.Timestamp, 10)
	b = append(b, `,"toolId":`...)
	b = appendJSONString(b, e.ToolID)
	b = append(b, `,"toolVersion":`...)
	b = appendJSONString(b, e.ToolVersion)
	b = append(b, `,"executionId":`...)
	b = appendJSONString(b, e.ExecutionID)
	b = append(b, `,"callId":`...)
	b = appendJSONString(b, e.CallID)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(e.Attempt), 10)
	b = append(b, `,"state":`...)
	b = appendJSONString(b, e.State)
	if e.UserID != "" {
		b = append(b, `,"userId":`...)
		b = appendJSONString(b, e.UserID)
	}
	b = append(b, `,"capabilities":[`...)
	for i, c := range e.Capabilities {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, c)
	}
	b = append(b, ']')
	if e.Duration != nil {
		b = append(b, `,"duration":`...)
		b = strconv.AppendInt(b, *e.Duration, 10)
	}
	if e.Error != nil {
		b = append(b, `,"error":{"type":`...)
		b = appendJSONString(b, e.Error.Type)
		b = append(b, `,"code":`...)
		b = appendJSONString(b, e.Error.Code)
		b = append(b, `,"message":`...)
		b = appendJSONString(b, e.Error.Message)
		b = append(b, '}')
	}
	b = append(b, `,"inputHash":`...)
	b = appendJSONString(b, e.InputHash)
	if e.OutputHash != "" {
		b = append(b, `,"outputHash":`...)
		b = appendJSONString(b, e.OutputHash)
	}
	if d := e.Decision; d != nil {
		b = append(b, `,"decision":{"id":`...)
		b = appendJSONString(b, d.ID)
		b = append(b, `,"policyRevision":`...)
		b = appendJSONString(b, d.PolicyRevision)
		b = append(b, `,"required":`...)
		b = appendJSONStrings(b, d.Required)
		b = append(b, `,"granted":`...)
		b = appendJSONStrings(b, d.Granted)
		b = append(b, `,"missing":`...)
		b = appendJSONStrings(b, d.Missing)
		if d.Reason != "" {
			b = append(b, `,"reason":`...)
			b = appendJSONString(b, d.Reason)
		}
		if c := d.Cedar; c != nil {
			b = append(b, `,"cedar":{"revision":`...)
			b = appendJSONString(b, c.Revision)
			b = append(b, `,"effect":`...)
			b = appendJSONString(b, c.Effect)
			if len(c.Policies) > 0 {
				b = append(b, `,"policies":`...)
				b = appendJSONStrings(b, c.Policies)
			}
			if len(c.Approvers) > 0 {
				b = append(b, `,"approvers":`...)
				b = appendJSONStrings(b, c.Approvers)
			}
			b = append(b, '}')
		}
		b = append(b, '}')
	}
	if e.IdempotencyKey != "" {
		b = append(b, `,"idempotencyKey":`...)
		b = appendJSONString(b, e.IdempotencyKey)
	}
	if e.IdempotencyBypass {
		b = append(b, `,"idempotencyBypass":true`...)
	}
	if e.IntentID != "" {
		b = append(b, `,"intentId":`...)
		b = appendJSONString(b, e.IntentID)
	}
	if in := e.Intent; in != nil {
		b = append(b, `,"intent":{"id":`...)
		b = appendJSONString(b, in.ID)
		b = append(b, `,"hash":`...)
		b = appendJSONString(b, in.Hash)
		b = append(b, `,"action":`...)
		b = appendJSONString(b, in.Action)
		if in.Code != "" {
			b = append(b, `,"code":`...)
			b = appendJSONString(b, in.Code)
		}
		if in.Reason != "" {
			b = append(b, `,"reason":`...)
			b = appendJSONString(b, in.Reason)
		}
		if in.Via != "" {
			b = append(b, `,"via":`...)
			b = appendJSONString(b, in.Via)
		}
		if in.Signer != "" {
			b = append(b, `,"signer":`...)
			b = appendJSONString(b, in.Signer)
		}
		if in.Signature != "" {
			b = append(b, `,"signature":`...)
			b = appendJSONString(b, in.Signature)
		}
		b = append(b, '}')
	}
	if tk := e.Token; tk != nil {
		b = append(b, `,"token":{"iss":`...)
		b = appendJSONString(b, tk.Issuer)
		b = append(b, `,"sub":`...)
		b = appendJSONString(b, tk.Subject)
		b = append(b, `,"sha256":`...)
		b = appendJSONString(b, tk.SHA256)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendJSONStrings writes ss as a JSON array, nil as [].
func appendJSONStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// appendJSONString writes s as a JSON string; each invalid UTF-8 byte
// becomes U+FFFD, as encoding/json does.
func appendJSONString(b []byte, s string) []byte {
	if !utf8.ValidString(s) {
		var v strings.Builder
		for i := 0; i < len(s); {
			r, size := utf8.DecodeRuneInString(s[i:])
			v.WriteRune(r) // RuneError for an invalid byte, with size 1
			i += size
		}
		s = v.String()
	}
	return appendString(b, s)
}
