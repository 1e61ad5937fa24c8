package lifecycle

import (
	"errors"
	"fmt"
)

var (
	// ErrRefused is the error a refused transition wraps: the event is not
	// allowed in the machine's current state.
	ErrRefused = errors.New("lifecycle: transition refused")

	// ErrUnknownEvent is wrapped when the event is not one of the Event
	// constants.
	ErrUnknownEvent = errors.New("lifecycle: unknown event")
)

// TransitionError reports a transition that was not made. The machine's
// state and history are unchanged.
type TransitionError struct {
	From  State // the state the machine was (and still is) in
	Event Event // the event that was refused
	Err   error // ErrRefused or ErrUnknownEvent
}

func (e *TransitionError) Error() string {
	if errors.Is(e.Err, ErrUnknownEvent) {
		return fmt.Sprintf("lifecycle: unknown event %q (state %s)", e.Event, e.From)
	}
	return fmt.Sprintf("lifecycle: event %q is not allowed in state %s", e.Event, e.From)
}

func (e *TransitionError) Unwrap() error { return e.Err }
