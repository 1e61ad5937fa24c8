// Package lifecycle holds the RFC-0001 tool execution lifecycle: the nine
// states, the events that move between them, the transition table, and a
// per-attempt state machine that records every transition with its time.
//
// # States and transitions
//
//	DECLARED --valid--> VALIDATED --granted--> AUTHORIZED --start--> EXECUTING --ok--> COMPLETED
//	    |                   |                      |                     |
//	  invalid             denied                 abort                 abort          fail
//	    v                   v                      v                     v              v
//	  FAILED             DENIED                 ABORTED --rollback--> ROLLED_BACK <-----+
//
// COMPLETED, FAILED, DENIED and ROLLED_BACK are terminal. ABORTED is not: an
// aborted attempt always moves on to ROLLED_BACK once its rollback is done
// (RFC-0001 3.2.8, exit condition "Rollback complete"), and both transitions
// are recorded. [Table] lists every allowed transition; anything else is
// refused with a [*TransitionError] and changes nothing.
//
// # Machines
//
// Each attempt of an invocation gets its own [Machine], created in DECLARED.
// [Machine.Fire] moves it and appends a [Transition] to its history.
//
// # Concurrency
//
// A Machine is safe for concurrent use; transitions are serialized, so two
// goroutines racing to end an attempt (say, a deadline and the tool's own
// return) get exactly one winner and one refusal.
package lifecycle
