package txn

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// MaxKeyLen is the maximum length in bytes of an execution id, a state
// namespace, or a state key.
const MaxKeyLen = 1024

// Record is the persisted record of one execution attempt. The store does not
// interpret State or the transition history: the lifecycle is owned by the
// caller, which sets them before each write.
type Record struct {
	ExecutionID  string           `json:"executionId"`
	CallID       string           `json:"callId"`
	TraceID      string           `json:"traceId,omitempty"` // the W3C trace id of the invocation, when traced
	Attempt      int              `json:"attempt"`           // the runtime counts from 1; the store takes 0, refuses a negative one
	ToolID       string           `json:"toolId"`
	ToolVersion  string           `json:"toolVersion"`
	Principal    string           `json:"principal,omitempty"`
	State        string           `json:"state"`
	Transitions  []Transition     `json:"transitions"`
	Capabilities []string         `json:"capabilities,omitempty"`
	InputHash    string           `json:"inputHash,omitempty"`
	Output       json.RawMessage  `json:"output,omitempty"`
	OutputHash   string           `json:"outputHash,omitempty"`
	Error        *ErrorInfo       `json:"error,omitempty"`
	WriteSet     *WriteSetSummary `json:"writeSet,omitempty"`    // set by Tx.Commit and Tx.Rollback
	AuditEvents  []string         `json:"auditEvents,omitempty"` // ids of the attempt's audit events
	StartedAt    time.Time        `json:"startedAt"`
	EndedAt      time.Time        `json:"endedAt,omitzero"` // zero while the execution is in flight
	// Token names the OAuth access token the call was made under, if any.
	Token *TokenRef `json:"token,omitempty"`
	// Processes are the processes the tool started that are still
	// running, kept in the claim (Tx.SetProcesses) so that recovery can
	// kill what a crash left running before it records the attempt as
	// interrupted. Empty in final records.
	Processes []Process `json:"processes,omitempty"`
}

// TokenRef identifies an OAuth access token without holding it: its
// issuer, its subject, and its hex SHA-256.
type TokenRef struct {
	Issuer  string `json:"iss"`
	Subject string `json:"sub"`
	SHA256  string `json:"sha256"`
}

// Process names a running process of an execution so that recovery, in
// another process of ours, finds it again, and only it: its pid (also its
// process group's id) and its start time (field 22 of /proc/<pid>/stat)
// on the boot BootID of the machine Host.
type Process struct {
	Pid       int    `json:"pid"`
	StartTime uint64 `json:"startTime"`
	Session   int    `json:"session,omitempty"`
	BootID    string `json:"bootId"`
	Host      string `json:"host,omitempty"`
	Cgroup    string `json:"cgroup,omitempty"`  // the run's own cgroup, if it has one
	Command   string `json:"command,omitempty"` // the program, for messages
}

// Transition is one step of a record's state history.
type Transition struct {
	From   string    `json:"from"`
	To     string    `json:"to"`
	Event  string    `json:"event"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason,omitempty"`
}

// ErrorInfo describes why an execution failed.
type ErrorInfo struct {
	Type    string `json:"type"`           // RFC error class, e.g. "TimeoutError"
	Code    string `json:"code,omitempty"` // low-cardinality reason, e.g. "timeout", "panic"
	Message string `json:"message"`
	Stack   string `json:"stack,omitempty"`
}

// WriteSetSummary describes the write-set of a Tx: the puts and deletes left
// in its buffer when it ended (a Put followed by a Delete of the same key
// counts once, as a delete), the namespaces they touched in sorted order, and
// whether they were committed.
type WriteSetSummary struct {
	Puts       int      `json:"puts"`
	Deletes    int      `json:"deletes"`
	Namespaces []string `json:"namespaces,omitempty"`
	Committed  bool     `json:"committed"`
}

func (r *Record) validate() error {
	var problem string
	switch {
	case r == nil:
		return fmt.Errorf("%w: nil record", ErrInvalidRecord)
	case r.ExecutionID == "":
		problem = "empty ExecutionID"
	case len(r.ExecutionID) > MaxKeyLen:
		problem = fmt.Sprintf("ExecutionID longer than %d bytes", MaxKeyLen)
	case r.ToolID == "":
		problem = "empty ToolID"
	case r.State == "":
		problem = "empty State"
	case r.Attempt < 0:
		problem = fmt.Sprintf("negative Attempt %d", r.Attempt)
	default:
		return nil
	}
	return fmt.Errorf("%w: execution %q: %s", ErrInvalidRecord, r.ExecutionID, problem)
}

// encodeRecord validates r and returns its stored form.
func encodeRecord(r *Record) ([]byte, error) {
	p, data, err := encodeRecordBuf(r)
	if err != nil {
		return nil, err
	}
	data = bytes.Clone(data)
	putBuf(p)
	return data, nil
}

// encodeRecordBuf is encodeRecord into a pooled buffer, which the caller
// returns with putBuf(p) once the update that stored data has ended.
func encodeRecordBuf(r *Record) (p *[]byte, data []byte, err error) {
	if err := r.validate(); err != nil {
		return nil, nil, err
	}
	p = getBuf(1024)
	data, err = appendRecord(*p, r)
	if err != nil {
		putBuf(p)
		return nil, nil, fmt.Errorf("%w: execution %q: %v", ErrInvalidRecord, r.ExecutionID, err)
	}
	*p = data
	return p, data, nil
}

// decodeRecord decodes a stored record. The result does not alias data.
func decodeRecord(id string, data []byte) (*Record, error) {
	r, err := parseRecord(data)
	if err != nil {
		return nil, fmt.Errorf("%w: execution %q: %v", ErrCorrupt, id, err)
	}
	if r.ExecutionID != id {
		// Moved or copied below the store's API: never shown as the
		// record of another execution.
		return nil, fmt.Errorf("%w: the record stored as execution %q is that of execution %q", ErrCorrupt, id, r.ExecutionID)
	}
	return r, nil
}
