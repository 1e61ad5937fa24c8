package runtime_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
)

// hostileNumbers is a JSON array of n bytes or a little more of varied
// numbers: the input that made the runtime build a tree forty times its
// size before refusing it for its size.
func hostileNumbers(n int) []byte {
	r := rand.New(rand.NewPCG(5, 6))
	b := append(make([]byte, 0, n+32), '[')
	for len(b) < n {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, r.NormFloat64()*1e6, 'g', -1, 64)
	}
	return append(b, ']')
}

// hostileObject is a JSON object of n bytes or a little more, its members
// out of order: a canonical hash must hold it all to sort it.
func hostileObject(n int) []byte {
	b := append(make([]byte, 0, n+32), '{')
	for i := n / 16; len(b) < n; i-- {
		b = append(b, `"k`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `":1,`...)
	}
	return append(b, `"msg":"x"}`...)
}

// allocatedBy returns the bytes the process allocated while f ran.
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestExecute_OversizedInputRefusedBeforeHashing: an input over
// MaxInputBytes is refused (rule 1, FAILED, recorded) at a cost that does
// not grow with its size: nothing parses, canonicalizes or copies it first,
// with an idempotency key or without, and Propose refuses it the same way.
// Its recorded input hash is the SHA-256 of its bytes.
func TestExecute_OversizedInputRefusedBeforeHashing(t *testing.T) {
	rt, _ := openRuntime(t, nil, echo("test.echo")) // MaxInputBytes: the default, 4 MiB
	const size = 5 << 20
	// What a refusal may cost, whatever the input's size: the record, its
	// audit events and the database's write, but no copy of the input.
	const bound = size / 8
	ctx := context.Background()

	for _, tc := range []struct {
		name, key string
		in        []byte
	}{
		{"numbers", "", hostileNumbers(size)},
		{"numbers with a key", "oversized-1", hostileNumbers(size)},
		{"object", "", hostileObject(size)},
		{"object with a key", "oversized-2", hostileObject(size)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, key := tc.in, tc.key
			sum := sha256.Sum256(in)
			rawHash := hex.EncodeToString(sum[:])
			inv := tgruntime.Invocation{Tool: "test.echo", Input: in, Principal: "tester", IdempotencyKey: key}
			var (
				res *tgruntime.Result
				err error
			)
			n := allocatedBy(func() { res, err = rt.Execute(ctx, inv) })
			var ve *tgruntime.ValidationError
			if !errors.As(err, &ve) || ve.Phase != "input" || !strings.Contains(err.Error(), "more than the 4194304 allowed") {
				t.Fatalf("err = %v, want an input ValidationError for the size", err)
			}
			t.Logf("refusing %d bytes allocated %d bytes", len(in), n)
			if n > bound {
				t.Errorf("refusing a %d-byte input allocated %d bytes, more than %d", len(in), n, bound)
			}
			rec := checkAttempt(t, rt, res, lifecycle.Failed, pathFailed)
			if rec.InputHash != rawHash {
				t.Errorf("recorded input hash %s, want the SHA-256 of the bytes %s", rec.InputHash, rawHash)
			}
			if key != "" {
				// Refused before it could run: the key guards nothing, and
				// the same call again is refused afresh, not replayed.
				again, err := rt.Execute(ctx, inv)
				if !errors.Is(err, tgruntime.ErrValidation) || again == nil || again.Replayed || again.ExecutionID == res.ExecutionID {
					t.Errorf("the same call again: %+v, %v; want a new refusal", again, err)
				}
			}
		})
	}
	t.Run("propose", func(t *testing.T) {
		in := hostileObject(size)
		var err error
		n := allocatedBy(func() {
			_, err = rt.Propose(ctx, tgruntime.Invocation{Tool: "test.echo", Input: in, Principal: "tester"})
		})
		if !errors.Is(err, tgruntime.ErrValidation) {
			t.Fatalf("err = %v, want a ValidationError", err)
		}
		if n > bound {
			t.Errorf("refusing a %d-byte proposal allocated %d bytes, more than %d", len(in), n, bound)
		}
	})
}
