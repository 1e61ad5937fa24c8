package runtime

import (
	"time"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/internal/uuid"
	"github.com/toolgate/toolgate/lifecycle"
	"github.com/toolgate/toolgate/txn"
)

// eventExtras are what an attempt's events carry besides its record: the
// capability decision (on the AUTHORIZED or DENIED event) and the
// idempotency key (on every event).
type eventExtras struct {
	decision *audit.Decision
	idemKey  string
	bypass   bool
	intentID string // the approved intent the attempt executes
}

// auditEvents builds the audit events (RFC-0001 8.1) of the transitions
// hist[from:] of the attempt rec, records their ids in rec, and returns
// them for the store to append in the same update as rec. start is when the
// attempt began; info describes its failure, if any; x is what the events
// carry besides the record (see eventExtras). Each event's id and
// hash go to sp, when the attempt is traced.
func auditEvents(ids *uuid.Generator, rec *txn.Record, hist []lifecycle.Transition, from int, start time.Time, info *ErrorInfo, x eventExtras, sp *attemptSpans) []txn.AuditEvent {
	out := make([]txn.AuditEvent, 0, len(hist)-from)
	// The events are encoded into one buffer, each then sliced from it.
	buf := make([]byte, 0, 480*(len(hist)-from))
	ends := make([]int, 0, len(hist)-from)
	for i, t := range hist[from:] {
		e := audit.Event{
			EventID:      ids.Ordered(),
			Timestamp:    t.At.UnixMilli(),
			ToolID:       rec.ToolID,
			ToolVersion:  rec.ToolVersion,
			ExecutionID:  rec.ExecutionID,
			CallID:       rec.CallID,
			Attempt:      rec.Attempt,
			State:        string(t.To),
			UserID:       rec.Principal,
			Capabilities: rec.Capabilities,
			InputHash:    rec.InputHash,
			Token:        auditToken(rec.Token),
		}
		if t.To.Terminal() || t.To == lifecycle.Aborted {
			d := t.At.Sub(start).Milliseconds()
			e.Duration = &d
			if info != nil {
				e.Error = &audit.ErrorDetails{Type: info.Type, Code: info.Code, Message: info.Message}
			}
		}
		if t.To == lifecycle.Completed {
			e.OutputHash = rec.OutputHash
		}
		if t.To == lifecycle.Authorized || t.To == lifecycle.Denied {
			e.Decision = x.decision
		}
		e.IdempotencyKey, e.IdempotencyBypass, e.IntentID = x.idemKey, x.bypass, x.intentID
		at := len(buf)
		buf = e.AppendJSON(buf)
		ends = append(ends, len(buf))
		rec.AuditEvents = append(rec.AuditEvents, e.EventID)
		sp.event(from+i, e.EventID, buf[at:])
	}
	prev := 0
	for _, end := range ends {
		// AppendJSON writes one JSON value: the store need not check it.
		out = append(out, txn.AuditEvent{Data: buf[prev:end:end], Checked: true})
		prev = end
	}
	return out
}
