package webui

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/toolgate/toolgate/audit"
	tgruntime "github.com/toolgate/toolgate/runtime"
)

// maxShown bounds the discrepancies the audit page lists (all are
// counted).
const maxShown = 100

// auditRunTimeout bounds one verification of the whole store.
const auditRunTimeout = 10 * time.Minute

// auditResult is one verification of the audit log and the records: what
// the audit page shows.
type auditResult struct {
	data     map[string]any // the page's fields
	err      error          // the store could not be read
	at, done time.Time      // when it started and ended
	cp       string         // the checkpoint it checked the log against: checkpointKey
}

// auditRuns keeps the last verification and the one running. A
// verification reads the whole store (the log, every record, every
// idempotency key): the audit page shows the last one while it is younger
// than Options.AuditMaxAge, and views that need a new one share it, so at
// most one runs at a time however many people look.
type auditRuns struct {
	mu      sync.Mutex
	last    *auditResult
	running chan struct{} // closed when the running verification ends; nil when none runs
}

// auditResult returns a verification at most AuditMaxAge old against the
// checkpoint configured now (a new one when now is set): the last one, the
// running one, or a new one. The checkpoint is read on each call: a new
// one is verified at once.
func (u *UI) auditResult(r *http.Request, now bool) (*auditResult, error) {
	var cp *audit.Checkpoint
	var cpErr error
	if u.opts.Checkpoint != nil {
		cp, cpErr = u.opts.Checkpoint()
	}
	key := checkpointKey(u.opts.Checkpoint != nil, cp, cpErr)
	a := &u.audits
	a.mu.Lock()
	if last := a.last; last != nil && last.err == nil && !now && last.cp == key && u.opts.Now().Sub(last.done) < u.opts.AuditMaxAge {
		a.mu.Unlock()
		return last, nil
	}
	done := a.running
	if done == nil {
		done = make(chan struct{})
		a.running = done
		go func() {
			// Not the request's context: the views that join it wait for it
			// too, and a person who leaves the page stops nothing.
			ctx, cancel := context.WithTimeout(context.Background(), auditRunTimeout)
			defer cancel()
			res := &auditResult{at: u.opts.Now(), cp: key}
			res.data, res.err = u.verifyAudit(ctx, cp, cpErr)
			res.done = u.opts.Now()
			a.mu.Lock()
			a.last, a.running = res, nil
			a.mu.Unlock()
			close(done)
		}()
	}
	a.mu.Unlock()
	select {
	case <-done:
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last, a.last.err
}

// checkpointKey tells apart the checkpoints a verification may have
// checked the log against.
func checkpointKey(configured bool, cp *audit.Checkpoint, err error) string {
	switch {
	case !configured:
		return ""
	case err != nil:
		return "error: " + err.Error()
	case cp == nil:
		return "none"
	}
	return fmt.Sprintf("%d %x", cp.Size, cp.Hash)
}

// verifyAudit verifies the audit log (against the checkpoint cp, if one is
// configured; cpErr if it could not be read) and the records against it.
func (u *UI) verifyAudit(ctx context.Context, cp *audit.Checkpoint, cpErr error) (map[string]any, error) {
	data := map[string]any{}
	if u.opts.Checkpoint != nil {
		data["CheckpointConfigured"] = true
		if cpErr != nil {
			data["CheckpointError"] = cpErr.Error()
			cp = nil
		} else if cp != nil {
			data["Checkpoint"] = map[string]any{"Size": cp.Size, "Hash": hex.EncodeToString(cp.Hash[:])}
		}
	}
	v := &audit.Verifier{Checkpoint: cp}
	err := u.read.VerifyAuditLog(ctx, v)
	var ve *audit.VerifyError
	switch {
	case errors.As(err, &ve):
		data["Bad"] = ve
	case err != nil:
		return nil, err
	default:
		data["Valid"] = true
		data["Events"] = v.Len()
		h := v.Hash()
		data["Head"] = hex.EncodeToString(h[:])
	}
	var found []tgruntime.Discrepancy
	rep, err := u.read.VerifyRecords(ctx, func(d tgruntime.Discrepancy) error {
		if len(found) < maxShown {
			found = append(found, d)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	data["Records"] = rep
	data["Found"] = found
	return data, nil
}

func (u *UI) auditPage(w http.ResponseWriter, r *http.Request, x *session) {
	u.showAudit(w, r, x, false)
}

// auditNow verifies again, whatever the age of the last verification.
func (u *UI) auditNow(w http.ResponseWriter, r *http.Request, x *session) {
	u.showAudit(w, r, x, true)
}

func (u *UI) showAudit(w http.ResponseWriter, r *http.Request, x *session, now bool) {
	if !x.who.Approver {
		u.fail(w, r, x, http.StatusForbidden, "The audit page is for approvers.")
		return
	}
	res, err := u.auditResult(r, now)
	switch {
	case r.Context().Err() != nil:
		return // the browser left
	case err != nil:
		u.storeFailed(w, r, x, err)
		return
	case now:
		http.Redirect(w, r, prefix+"audit", http.StatusSeeOther)
		return
	}
	data := maps.Clone(res.data)
	data["Title"] = "Audit log"
	data["VerifiedAt"], data["Took"], data["MaxAge"] = res.done, res.done.Sub(res.at), u.opts.AuditMaxAge
	u.render(w, r, x, http.StatusOK, "audit", data)
}
