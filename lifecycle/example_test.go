package lifecycle_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/lifecycle"
)

func ExampleMachine_Fire() {
	m := lifecycle.New(nil)
	for _, ev := range []lifecycle.Event{lifecycle.EventValid, lifecycle.EventGranted, lifecycle.EventStart} {
		if _, err := m.Fire(ev, ""); err != nil {
			panic(err)
		}
	}
	// The tool ran past its deadline: abort, then roll back.
	m.Fire(lifecycle.EventAbort, "timeout after 5s")
	m.Fire(lifecycle.EventRollback, "")

	_, err := m.Fire(lifecycle.EventOK, "")
	fmt.Println(errors.Is(err, lifecycle.ErrRefused), err)
	for _, t := range m.History() {
		fmt.Println(strings.TrimSpace(fmt.Sprint(t.From, " -> ", t.To, " ", t.Reason)))
	}
	// Output:
	// true lifecycle: event "ok" is not allowed in state ROLLED_BACK
	// DECLARED -> VALIDATED
	// VALIDATED -> AUTHORIZED
	// AUTHORIZED -> EXECUTING
	// EXECUTING -> ABORTED timeout after 5s
	// ABORTED -> ROLLED_BACK
}
