package runtime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/toolgate/toolgate/lifecycle"
	"github.com/toolgate/toolgate/txn"
)

// Idempotency keys, per principal and tool: the first invocation with a key
// runs; a later one with the same key and the same canonical request,
// within the TTL, gets the stored result (failures included) marked
// replayed, without running anything. Only a call whose tool began to run
// keeps its key (see finishKey). The records live in state namespaces no
// tool reaches.
const (
	nsIdem       = reservedPrefix + "idempotency"        // scope -> idemRecord
	nsIdemExpiry = reservedPrefix + "idempotency.expiry" // <expiry unix nanos>/<scope> -> ""

	// MaxIdempotencyKey is the longest idempotency key accepted, in bytes.
	MaxIdempotencyKey = 255

	// purgeBatch bounds how many expired keys one new key removes, so that
	// purging rides on writes that happen anyway, a few at a time.
	purgeBatch = 16
)

// The states of an idempotency record.
const (
	idemRunning = "running"
	idemDone    = "done"
)

type idemRecord struct {
	Principal   string    `json:"principal"`
	Tool        string    `json:"tool"`
	Key         string    `json:"key"`
	RequestHash string    `json:"requestHash"`
	CallID      string    `json:"callId"`
	State       string    `json:"state"`
	CreatedAt   time.Time `json:"createdAt"`
	ExpiresAt   time.Time `json:"expiresAt"`
	// ExecutionIDs are the call's attempts, in order, once it is done: the
	// result a replay rebuilds.
	ExecutionIDs []string `json:"executionIds,omitempty"`
	// Node is the node and run holding the call, on a Postgres database
	// shared by several (txn.Store.NodeRun); empty on bbolt.
	Node string `json:"node,omitempty"`
}

// ErrIdempotency is matched (errors.Is) by every *IdempotencyError.
var ErrIdempotency = errors.New("runtime: idempotency key refused")

// IdempotencyError is an invocation that did not run because of its
// idempotency key. Code is idempotency_conflict (the key was used for a
// different request), idempotency_in_flight (the key's first invocation is
// still running and the caller chose not to wait) or idempotency_invalid.
type IdempotencyError struct {
	Code   string
	Key    string
	CallID string // the call the key belongs to
	Reason string
}

func (e *IdempotencyError) Error() string {
	return fmt.Sprintf("runtime: idempotency key %q: %s", e.Key, e.Reason)
}
func (e *IdempotencyError) Is(target error) bool { return target == ErrIdempotency }
func (e *IdempotencyError) code() string         { return e.Code }

func idemScope(principal, tool, key string) string {
	sum := sha256.Sum256([]byte(principal + "\x00" + tool + "\x00" + key))
	return hex.EncodeToString(sum[:])
}

func expiryKey(at time.Time, scope string) string {
	return fmt.Sprintf("%020d/%s", at.UnixNano(), scope)
}

// idem is an invocation's hold on its idempotency key.
type idem struct {
	scope string
	rec   idemRecord
}

// claimKey registers the invocation under its idempotency key, or returns
// what the key already holds: a replayed result, a conflict, or (with
// NoWait) an in-flight error. Waiting for a running first invocation is
// bounded by ctx. An input that is not JSON, or is larger than
// MaxInputBytes, claims nothing (nil, nil, nil).
func (c *call) claimKey(ctx context.Context) (*idem, *Result, error) {
	r, inv := c.r, c.inv
	key := inv.IdempotencyKey
	switch {
	case len(key) > MaxIdempotencyKey:
		return nil, nil, &IdempotencyError{Code: "idempotency_invalid", Key: key[:32] + "...", Reason: fmt.Sprintf("longer than %d bytes", MaxIdempotencyKey)}
	case strings.IndexFunc(key, func(r rune) bool { return !unicode.IsPrint(r) || r == unicode.ReplacementChar }) >= 0:
		return nil, nil, &IdempotencyError{Code: "idempotency_invalid", Key: key, Reason: "contains unprintable characters"}
	}
	if len(inv.Input) > r.opts.MaxInputBytes {
		return nil, nil, nil // as below, and checked before hashing costs memory in its size
	}
	reqHash, err := IntentHash(c.decl.ID, c.decl.Version, inv.Input)
	if err != nil {
		// Not one JSON value: rule 1 fails the attempt, which is recorded
		// like any other. It never runs, so there is nothing for the key
		// to guard.
		return nil, nil, nil
	}
	h := &idem{scope: idemScope(inv.Principal, c.decl.ID, key)}
	var wait time.Duration
	for {
		now := r.opts.Now().UTC()
		h.rec = idemRecord{Principal: inv.Principal, Tool: c.decl.ID, Key: key, RequestHash: reqHash, CallID: inv.CallID,
			State: idemRunning, CreatedAt: now, ExpiresAt: now.Add(r.opts.IdempotencyTTL), Node: r.store.NodeRun()}
		var held idemRecord
		err := r.store.UpdateState(ctx, func(v *txn.StateView) error {
			held = idemRecord{}
			if b, ok := v.Get(nsIdem, h.scope); ok {
				if err := json.Unmarshal(b, &held); err != nil {
					return fmt.Errorf("idempotency record is corrupt: %w", err)
				}
				if held.ExpiresAt.After(now) && !inv.BypassIdempotency {
					return errHeld
				}
				v.Delete(nsIdemExpiry, expiryKey(held.ExpiresAt, h.scope))
			}
			b, _ := json.Marshal(h.rec)
			if err := v.Put(nsIdem, h.scope, b); err != nil {
				return err
			}
			if err := v.Put(nsIdemExpiry, expiryKey(h.rec.ExpiresAt, h.scope), nil); err != nil {
				return err
			}
			return purgeExpired(v, now, h.scope)
		})
		switch {
		case err == nil:
			return h, nil, nil
		case !errors.Is(err, errHeld) && ctx.Err() != nil:
			// The caller gave up before the key could be checked: the call
			// goes on without it and is aborted, recorded, before anything
			// runs (a cancellation, not a failure of the store).
			return nil, nil, nil
		case !errors.Is(err, errHeld):
			return nil, nil, &StateError{Op: "record", Err: err}
		case held.RequestHash != reqHash:
			return nil, nil, &IdempotencyError{Code: "idempotency_conflict", Key: key, CallID: held.CallID,
				Reason: fmt.Sprintf("already used at %s for a different request (call %s); nothing ran", held.CreatedAt.Format(time.RFC3339), held.CallID)}
		case held.State == idemDone:
			res, err := r.resultOf(ctx, held.ExecutionIDs)
			if err != nil {
				return nil, nil, &StateError{Op: "read", Err: err}
			}
			res.Replayed, res.IdempotencyKey = true, key
			if res.State == lifecycle.Completed {
				// A replay says what the first answer said: writes that
				// committed but could not be made visible.
				parked, err := parkedWrites(ctx, r.store, res.ExecutionID)
				if err != nil {
					return nil, nil, &StateError{Op: "read", Err: err}
				}
				if len(parked) > 0 {
					errs := make([]error, len(parked))
					for i, p := range parked {
						errs[i] = errors.New(p)
					}
					return nil, res, &StateError{Op: "apply staged writes", Err: errors.Join(errs...)}
				}
			}
			return nil, res, replayedError(res.Error)
		case inv.IdempotencyNoWait:
			return nil, nil, &IdempotencyError{Code: "idempotency_in_flight", Key: key, CallID: held.CallID,
				Reason: fmt.Sprintf("its first invocation (call %s) is still running", held.CallID)}
		}
		// Running: wait for it to finish, then take its result.
		wait = keyPoll(wait)
		if !sleep(ctx, wait) {
			return nil, nil, &IdempotencyError{Code: "idempotency_in_flight", Key: key, CallID: held.CallID,
				Reason: fmt.Sprintf("its first invocation (call %s) was still running when the caller gave up: %v", held.CallID, context.Cause(ctx))}
		}
	}
}

// keyPoll is how long a caller waits, after waiting prev, before it looks
// again at a key whose first call is still running: 5 ms first, doubling
// up to 200 ms.
func keyPoll(prev time.Duration) time.Duration {
	if prev == 0 {
		return 5 * time.Millisecond
	}
	return min(prev*2, 200*time.Millisecond)
}

// errHeld says the key holds an unexpired record (and no bypass).
var errHeld = errors.New("held")

// purgeExpired removes up to purgeBatch keys that expired by now (never
// keep, the key being written). A key expires at its ExpiresAt: from that
// instant claimKey takes it as free, and so it is purged.
func purgeExpired(v *txn.StateView, now time.Time, keep string) error {
	limit := fmt.Sprintf("%020d", now.UnixNano())
	for _, e := range v.Scan(nsIdemExpiry, "", purgeBatch) {
		at, scope, _ := strings.Cut(e.Key, "/")
		if at > limit {
			break
		}
		if err := v.Delete(nsIdemExpiry, e.Key); err != nil {
			return err
		}
		if scope == keep {
			continue
		}
		if b, ok := v.Get(nsIdem, scope); ok {
			var rec idemRecord
			if json.Unmarshal(b, &rec) == nil && expiryKey(rec.ExpiresAt, scope) == e.Key {
				if err := v.Delete(nsIdem, scope); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// finishKey settles the key once its invocation has ended: its attempts
// become the key's result. A key holds a result only once execution began
// (Stripe's rule): a call refused before its tool ran (validation,
// authorization, a refused intent, no free slot or rate limit, the caller
// gave up, the runtime closing) frees the key, so that the retry after the
// fix (the grant, the corrected input) runs rather than replaying the
// refusal for the whole TTL. Its records stay, like any other.
func (c *call) finishKey(ctx context.Context, res *Result) error {
	h := c.idem
	if h == nil {
		return nil
	}
	free := !ran(res)
	done := h.rec
	done.State = idemDone
	for _, a := range res.Attempts {
		done.ExecutionIDs = append(done.ExecutionIDs, a.ExecutionID)
	}
	b, _ := json.Marshal(done)
	return c.r.store.UpdateState(context.WithoutCancel(ctx), func(v *txn.StateView) error {
		if cur, ok := v.Get(nsIdem, h.scope); ok {
			var rec idemRecord
			if json.Unmarshal(cur, &rec) == nil && rec.CallID != h.rec.CallID {
				return nil // replaced by a bypass meanwhile: that one owns the key now
			}
		}
		if free || len(done.ExecutionIDs) == 0 {
			v.Delete(nsIdemExpiry, expiryKey(h.rec.ExpiresAt, h.scope))
			return v.Delete(nsIdem, h.scope)
		}
		return v.Put(nsIdem, h.scope, b)
	})
}

// recordRan reports whether the attempt rec reached EXECUTING.
func recordRan(rec *txn.Record) bool {
	for _, t := range rec.Transitions {
		if t.To == string(lifecycle.Executing) {
			return true
		}
	}
	return false
}

// ran reports whether any attempt of res reached EXECUTING.
func ran(res *Result) bool {
	for _, a := range res.Attempts {
		for _, t := range a.Transitions {
			if t.To == lifecycle.Executing {
				return true
			}
		}
	}
	return false
}

// recoverKeys settles the keys whose invocation a crash interrupted: its
// records (ABORTED, ROLLED_BACK "interrupted", or final) are its result; a
// key whose call left no record, or only attempts refused before they ran,
// is freed (see finishKey). The records are read once
// for all such keys.
func (r *Runtime) recoverKeys(ctx context.Context) error { return r.settleKeys(ctx, true) }

// settleKeys settles the keys of calls that no live node runs: at Open
// (own), this node's left by its previous run too; later (on a shared
// Postgres, after a sweep of expired nodes), only other nodes'.
func (r *Runtime) settleKeys(ctx context.Context, own bool) error {
	all, err := r.store.StateValues(ctx, nsIdem)
	if err != nil {
		return err
	}
	running := map[string]idemRecord{}
	for scope, b := range all {
		var rec idemRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			return fmt.Errorf("idempotency record %s is corrupt: %w", scope, err)
		}
		if rec.State != idemRunning {
			continue
		}
		// One of this run's, after Open, is running here; one of another
		// run whose lease holds is running there.
		if !own && (rec.Node == "" || rec.Node == r.store.NodeRun()) {
			continue
		}
		if live, err := r.store.NodeLive(ctx, rec.Node); err != nil {
			return err
		} else if !live {
			running[scope] = rec
		}
	}
	if len(running) == 0 {
		return nil
	}
	recs, err := r.store.List(ctx, txn.Filter{})
	if err != nil {
		return err
	}
	type call struct{ callID, principal, tool string }
	attempts := map[call][]*txn.Record{}
	for _, rec := range recs {
		k := call{rec.CallID, rec.Principal, rec.ToolID}
		attempts[k] = append(attempts[k], rec)
	}
	return r.store.UpdateState(ctx, func(v *txn.StateView) error {
		for scope, rec := range running {
			got := attempts[call{rec.CallID, rec.Principal, rec.Tool}]
			if !slices.ContainsFunc(got, recordRan) { // no record, or refused before it ran
				v.Delete(nsIdemExpiry, expiryKey(rec.ExpiresAt, scope))
				if err := v.Delete(nsIdem, scope); err != nil {
					return err
				}
				continue
			}
			slices.SortFunc(got, func(a, b *txn.Record) int { return a.Attempt - b.Attempt })
			rec.State, rec.ExecutionIDs = idemDone, nil
			for _, g := range got {
				rec.ExecutionIDs = append(rec.ExecutionIDs, g.ExecutionID)
			}
			b, _ := json.Marshal(rec)
			if err := v.Put(nsIdem, scope, b); err != nil {
				return err
			}
		}
		return nil
	})
}

// ReplayedError is the error of a replayed result that was not COMPLETED:
// the stored failure, matching its RFC-0001 class (errors.Is(err,
// ErrTimeout), ...) so that a replayed failure is never mistaken for a
// success.
type ReplayedError struct {
	Info ErrorInfo
}

func (e *ReplayedError) Error() string {
	return "runtime: replayed: " + strings.TrimPrefix(e.Info.Message, "runtime: ")
}

// Is matches the class of the stored failure.
func (e *ReplayedError) Is(target error) bool {
	switch e.Info.Type {
	case "ValidationError":
		return target == ErrValidation
	case "AuthorizationError":
		return target == ErrAuthorization
	case "ResourceError":
		return target == ErrResource
	case "ExecutionError":
		return target == ErrExecution
	case "TimeoutError":
		return target == ErrTimeout
	case "StateError":
		return target == ErrState
	}
	return false
}

// replayedError is nil for a replayed success.
func replayedError(info *ErrorInfo) error {
	if info == nil {
		return nil
	}
	return &ReplayedError{Info: *info}
}
