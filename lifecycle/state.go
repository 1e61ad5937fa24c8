package lifecycle

// State is a lifecycle state of one attempt.
type State string

// The nine states of RFC-0001 section 3.
const (
	Declared   State = "DECLARED"    // received, not yet validated
	Validated  State = "VALIDATED"   // input conforms to the schema
	Authorized State = "AUTHORIZED"  // every required capability granted
	Executing  State = "EXECUTING"   // the tool runs inside a state transaction
	Completed  State = "COMPLETED"   // terminal: output valid, transaction committed
	Failed     State = "FAILED"      // terminal: input validation failed
	Denied     State = "DENIED"      // terminal: a capability was missing
	Aborted    State = "ABORTED"     // timeout, limit or explicit abort; rollback follows
	RolledBack State = "ROLLED_BACK" // terminal: state restored to the pre-execution snapshot
)

// States returns the nine states in lifecycle order.
func States() []State {
	return []State{Declared, Validated, Authorized, Executing, Completed, Failed, Denied, Aborted, RolledBack}
}

// Valid reports whether s is one of the nine states.
func (s State) Valid() bool {
	switch s {
	case Declared, Validated, Authorized, Executing, Completed, Failed, Denied, Aborted, RolledBack:
		return true
	}
	return false
}

// Terminal reports whether no transition leaves s.
func (s State) Terminal() bool {
	switch s {
	case Completed, Failed, Denied, RolledBack:
		return true
	}
	return false
}

func (s State) String() string { return string(s) }

// Event names a transition trigger.
type Event string

// The events of the transition table.
const (
	EventValid    Event = "valid"    // DECLARED -> VALIDATED
	EventInvalid  Event = "invalid"  // DECLARED -> FAILED
	EventGranted  Event = "granted"  // VALIDATED -> AUTHORIZED
	EventDenied   Event = "denied"   // VALIDATED -> DENIED
	EventStart    Event = "start"    // AUTHORIZED -> EXECUTING
	EventAbort    Event = "abort"    // AUTHORIZED or EXECUTING -> ABORTED
	EventOK       Event = "ok"       // EXECUTING -> COMPLETED
	EventFail     Event = "fail"     // EXECUTING -> ROLLED_BACK
	EventRollback Event = "rollback" // ABORTED -> ROLLED_BACK
)

// Rule is one allowed transition.
type Rule struct {
	From  State
	Event Event
	To    State
}

var table = []Rule{
	{Declared, EventValid, Validated},
	{Declared, EventInvalid, Failed},
	{Validated, EventGranted, Authorized},
	{Validated, EventDenied, Denied},
	{Authorized, EventStart, Executing},
	{Authorized, EventAbort, Aborted},
	{Executing, EventOK, Completed},
	{Executing, EventAbort, Aborted},
	{Executing, EventFail, RolledBack},
	{Aborted, EventRollback, RolledBack},
}

// Table returns a copy of the transition table: every allowed transition,
// and only those.
func Table() []Rule { return append([]Rule(nil), table...) }

// Allowed reports whether the table has a transition from -> to.
func Allowed(from, to State) bool {
	for _, r := range table {
		if r.From == from && r.To == to {
			return true
		}
	}
	return false
}
