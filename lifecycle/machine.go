package lifecycle

import (
	"context"
	"sync"
	"time"

	"github.com/looplab/fsm"
)

// Transition is one recorded state change.
type Transition struct {
	From   State     `json:"from"`
	To     State     `json:"to"`
	Event  Event     `json:"event"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason,omitempty"` // why, for the transitions that need one (denial, abort, failure)
}

// Machine is the state machine of one attempt. The zero value is not usable;
// create one with New.
type Machine struct {
	now     func() time.Time
	created time.Time

	mu      sync.Mutex
	state   State
	history []Transition
}

// compiled is the transition table as looplab/fsm runs it: for every state
// and event, the state the event leads to, or "" if the event is refused
// there. It is built once, by firing every event of the table at a
// looplab/fsm machine set to every state, so a Machine moves exactly as a
// looplab/fsm machine over the table would, without building one (and its
// maps and callbacks) per attempt.
var compiled = sync.OnceValue(func() map[State]map[Event]State {
	events := make(fsm.Events, 0, len(table))
	for _, r := range table {
		events = append(events, fsm.EventDesc{Name: string(r.Event), Src: []string{string(r.From)}, Dst: string(r.To)})
	}
	out := make(map[State]map[Event]State)
	for _, s := range States() {
		out[s] = make(map[Event]State)
		for _, r := range table {
			f := fsm.NewFSM(string(s), events, nil)
			if f.Event(context.Background(), string(r.Event)) == nil {
				out[s][r.Event] = State(f.Current())
			}
		}
	}
	return out
})

// New returns a machine in DECLARED. now supplies transition times; nil
// means time.Now.
func New(now func() time.Time) *Machine {
	if now == nil {
		now = time.Now
	}
	return &Machine{
		now:     now,
		created: now(),
		state:   Declared,
		history: make([]Transition, 0, 4), // the longest path has four transitions
	}
}

// State returns the current state.
func (m *Machine) State() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state
}

// Created returns when the machine entered DECLARED.
func (m *Machine) Created() time.Time { return m.created }

// Can reports whether ev is allowed in the current state.
func (m *Machine) Can(ev Event) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return compiled()[m.state][ev] != ""
}

// Fire moves the machine by ev and records the transition with reason. A
// refused or unknown event returns a *TransitionError (wrapping ErrRefused or
// ErrUnknownEvent) and leaves the state and history unchanged.
func (m *Machine) Fire(ev Event, reason string) (Transition, error) {
	return m.FireAt(ev, reason, time.Time{})
}

// Next returns the transition Fire(ev, reason) would record at time at,
// without making it. It lets a caller persist a transition first and make it
// only once the write succeeded (see FireAt).
func (m *Machine) Next(ev Event, reason string, at time.Time) (Transition, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	from := m.state
	to := compiled()[from][ev]
	if to == "" {
		return Transition{}, m.refusal(from, ev)
	}
	return Transition{From: from, To: to, Event: ev, At: at, Reason: reason}, nil
}

// FireAt is Fire with the transition time given; a zero at means now.
func (m *Machine) FireAt(ev Event, reason string, at time.Time) (Transition, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	from := m.state
	to := compiled()[from][ev]
	if to == "" {
		return Transition{}, m.refusal(from, ev)
	}
	if at.IsZero() {
		at = m.now()
	}
	m.state = to
	t := Transition{From: from, To: to, Event: ev, At: at, Reason: reason}
	m.history = append(m.history, t)
	return t, nil
}

func (m *Machine) refusal(from State, ev Event) error {
	for _, r := range table {
		if r.Event == ev {
			return &TransitionError{From: from, Event: ev, Err: ErrRefused}
		}
	}
	return &TransitionError{From: from, Event: ev, Err: ErrUnknownEvent}
}

// History returns a copy of the transitions made so far, oldest first.
func (m *Machine) History() []Transition {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Transition(nil), m.history...)
}
