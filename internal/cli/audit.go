package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/audit"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

// ExitVerify is the exit code of an audit log or checkpoint that fails
// verification.
const ExitVerify = 7

const (
	// auditKeyName names the checkpoint signing key in signatures.
	auditKeyName = "toolgate-audit"
	// maxAuditFile bounds what a checkpoint or key file read reads.
	maxAuditFile = 64 << 10
	// defaultTail is how many events 'toolgate audit tail' prints.
	defaultTail = 20
	// followInterval is how often 'toolgate audit tail --follow' polls.
	followInterval = 500 * time.Millisecond
	// followLockWait is how long one poll waits for a writer's lock.
	followLockWait = 250 * time.Millisecond
	// exportPage is how many entries 'toolgate audit export' reads at once.
	exportPage = 1024
)

// auditExitHelp lists the exit codes of the audit commands, from the one
// table of exit codes (exitCodes' audit column).
var auditExitHelp = exitHelp(func(e exitRow) string { return e.audit })

const auditKeyHelp = `The signing key is an ed25519 key kept outside the database: --key, else
$TOOLGATE_AUDIT_KEY, else $XDG_CONFIG_HOME/toolgate/audit.key, else
~/.config/toolgate/audit.key. 'toolgate audit checkpoint' creates it on first
use (mode 0600, directory 0700).`

func newAuditCmd(g *globals, stdio Stdio) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Inspect, export and verify the audit log",
		Long: `The audit log holds one event per lifecycle transition of every execution
attempt (RFC-0001 8.1), appended in the same database update as the
transition and never changed afterwards. Events are numbered from 1 and
chained: each event's hash covers the previous event's hash and its own bytes,
so altering, deleting, inserting or reordering a stored event breaks the chain
at that event, and 'toolgate audit verify' names it.

The chain alone cannot reveal that the newest events were deleted, or that
the log was rewritten from some event on with every later hash recomputed. A
checkpoint can: 'toolgate audit checkpoint' prints a signed statement of the
log's size and last hash; keep it outside the database (elsewhere than this
machine if you do not trust it), and 'toolgate audit verify --checkpoint FILE'
proves that the log still holds those events unchanged.

` + inspectLockHelp + `

` + auditExitHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newAuditVerifyCmd(g, stdio), newAuditCheckpointCmd(g, stdio),
		newAuditTailCmd(g, stdio), newAuditExportCmd(g, stdio))
	return cmd
}

func newAuditVerifyCmd(g *globals, stdio Stdio) *cobra.Command {
	var cpFile, keyFile string
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Verify the audit log's chain, and that it extends a checkpoint",
		Long: `Re-hash the whole audit log and check that the events are numbered from 1
without gaps, that each is linked to the one before, that no stored byte was
changed, and that the log's head records the last event. Print the number of
valid events, or the first bad event and why, and exit 7.

Then check every stored execution record and intent against its audit events:
an execution's state path, principal, capabilities, input and output hashes
(and the stored output against its hash) and error; an intent's proposal,
decision and execution. Each record that disagrees, each record without
events and each event without a record is printed with its id and the field,
and verify exits 7: such a record was changed outside toolgate.

With --checkpoint, also check the checkpoint's signature with the key (--key:
the signing key file, or a file holding the verifier key that 'toolgate audit
checkpoint' printed) and that the log extends it: it still holds the
checkpoint's events, unchanged. Only this detects a truncated log, or one
rewritten with every later hash recomputed. Without a checkpoint, verify
proves that the log is consistent, not that it is complete.

` + auditKeyHelp + `

` + inspectLockHelp + `

` + auditExitHelp,
		Example: `  toolgate audit verify
  toolgate audit verify --checkpoint ~/audit-checkpoints/2026-05-01.txt
  toolgate audit verify --checkpoint cp.txt --key toolgate-audit.pub`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var cp *audit.Checkpoint
			if cpFile != "" {
				c, err := openCheckpoint(cpFile, keyFile)
				var ee *exitError
				if errors.As(err, &ee) && ee.code == ExitVerify && g.json {
					if err := encodeJSON(stdio, verifyJSON{Valid: false, Reason: ee.err.Error()}); err != nil {
						return internalErr(err)
					}
				}
				if err != nil {
					return err
				}
				cp = &c
			}
			v, err := verifyAuditLog(cmd.Context(), g, cp)
			var ve *audit.VerifyError
			if errors.As(err, &ve) {
				if g.json {
					if err := encodeJSON(stdio, verifyJSON{Valid: false, BadEvent: ve.Seq, Reason: ve.Reason}); err != nil {
						return internalErr(err)
					}
				}
				return verifyFailed(ve)
			}
			if err != nil {
				return err
			}
			head := hex.EncodeToString(hashOf(v))
			if !g.json {
				fmt.Fprintf(stdio.Out, "%s valid\n", plural(int(v.Len()), "event"))
				if v.Len() > 0 {
					fmt.Fprintf(stdio.Out, "head: event %d, hash %s\n", v.Len(), head)
				}
			}
			recs, err := verifyRecords(cmd.Context(), g, stdio, !g.json)
			if err != nil {
				return err
			}
			if g.json {
				out := verifyJSON{Valid: recs.Discrepancy == 0, Events: v.Len(), Head: head, Records: recs}
				if cp != nil {
					out.Checkpoint = &checkpointJSON{Size: cp.Size, Hash: hex.EncodeToString(cp.Hash[:])}
				}
				if err := encodeJSON(stdio, out); err != nil {
					return internalErr(err)
				}
				return recs.failed()
			}
			if recs.Discrepancy > 0 {
				return recs.failed()
			}
			fmt.Fprintf(stdio.Out, "%s and %s match their audit events\n", plural(recs.Executions, "execution record"), plural(recs.Intents, "intent"))
			if cp != nil {
				fmt.Fprintf(stdio.Out, "the log extends the checkpoint of %s\n", plural(int(cp.Size), "event"))
			} else {
				fmt.Fprintln(stdio.Err, "no --checkpoint: a truncated log, or one rewritten with every later hash recomputed, goes unnoticed without one (see 'toolgate audit checkpoint')")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&cpFile, "checkpoint", "", "a checkpoint file the log must extend (from 'toolgate audit checkpoint')")
	cmd.Flags().StringVar(&keyFile, "key", "", "the key that signed the checkpoint: the signing key file, or a file holding its verifier key")
	return cmd
}

type verifyJSON struct {
	Valid      bool            `json:"valid"`
	Events     uint64          `json:"events,omitempty"`
	Head       string          `json:"head,omitempty"`
	Checkpoint *checkpointJSON `json:"checkpoint,omitempty"`
	BadEvent   uint64          `json:"badEvent,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	Records    *recordsJSON    `json:"records,omitempty"`
}

// recordsJSON is what audit verify found of the stored records against
// their audit events.
type recordsJSON struct {
	Executions    int                     `json:"executions"`
	Intents       int                     `json:"intents"`
	Discrepancy   int                     `json:"discrepancies"`
	Unsigned      int                     `json:"unsigned,omitempty"` // of them, approvals no key the policy lists signed
	Discrepancies []tgruntime.Discrepancy `json:"found,omitempty"`    // the first maxListedDiscrepancies
}

// maxListedDiscrepancies bounds the discrepancies --json lists (all are
// counted).
const maxListedDiscrepancies = 1000

func (r *recordsJSON) failed() error {
	if r.Discrepancy == 0 {
		return nil
	}
	var says []string
	if changed := r.Discrepancy - r.Unsigned; changed == 1 {
		says = append(says, "1 stored record field does not match the audit log: it was changed outside toolgate")
	} else if changed > 1 {
		says = append(says, fmt.Sprintf("%d stored record fields do not match the audit log: they were changed outside toolgate", changed))
	}
	if r.Unsigned == 1 {
		says = append(says, "1 approval is not signed by a key the policy lists for its approver: it was made without a signature (before the keys were listed, or without a listed key), or forged; it does not run under this policy")
	} else if r.Unsigned > 1 {
		says = append(says, fmt.Sprintf("%d approvals are not signed by a key the policy lists for their approvers: they were made without a signature (before the keys were listed, or without a listed key), or forged; they do not run under this policy", r.Unsigned))
	}
	return &exitError{code: ExitVerify, err: fmt.Errorf("audit verification failed: %s", strings.Join(says, "; "))}
}

// verifyRecords checks every execution record and intent against the audit
// log, printing each discrepancy as it is found when print is set.
func verifyRecords(ctx context.Context, g *globals, stdio Stdio, print bool) (*recordsJSON, error) {
	out := &recordsJSON{}
	store, err := g.openReadOnly()
	if err != nil {
		return nil, err
	}
	if store == nil {
		return out, nil
	}
	defer store.Close()
	policy, err := g.policy() // its approval keys: approvals they do not sign are named
	if err != nil {
		return nil, err
	}
	rep, err := tgruntime.NewReader(store).VerifyRecordsUnder(ctx, policy, func(d tgruntime.Discrepancy) error {
		if d.Kind == "intent" && d.Field == "signature" {
			out.Unsigned++
		}
		if print {
			fmt.Fprintf(stdio.Out, "%s %s: %s: %s\n", clean(d.Kind), clean(d.ID), clean(d.Field), clean(d.Detail))
		} else if len(out.Discrepancies) < maxListedDiscrepancies {
			out.Discrepancies = append(out.Discrepancies, d)
		}
		return nil
	})
	if err != nil {
		return nil, internalErr(fmt.Errorf("checking the records against the audit log: %w", err))
	}
	out.Executions, out.Intents, out.Discrepancy = rep.Executions, rep.Intents, rep.Discrepancy
	return out, nil
}

type checkpointJSON struct {
	Size        uint64 `json:"size"`
	Hash        string `json:"hash"` // hex
	Checkpoint  string `json:"checkpoint,omitempty"`
	VerifierKey string `json:"verifierKey,omitempty"`
	KeyFile     string `json:"keyFile,omitempty"`
}

func verifyFailed(ve *audit.VerifyError) error {
	return &exitError{code: ExitVerify, err: fmt.Errorf("audit log verification failed at event %d: %s", ve.Seq, ve.Reason)}
}

func hashOf(v *audit.Verifier) []byte {
	h := v.Hash()
	return h[:]
}

// verifyAuditLog verifies the whole stored log against cp, if not nil. A
// verification failure is returned as a *audit.VerifyError.
func verifyAuditLog(ctx context.Context, g *globals, cp *audit.Checkpoint) (*audit.Verifier, error) {
	v := &audit.Verifier{Checkpoint: cp}
	store, err := g.openReadOnly()
	if err != nil {
		return nil, err
	}
	if store != nil {
		defer store.Close()
		if err := store.AuditRaw(ctx, v.Add); err != nil {
			var ve *audit.VerifyError
			if errors.As(err, &ve) {
				return v, err
			}
			return nil, internalErr(fmt.Errorf("reading the audit log: %w", err))
		}
	}
	return v, v.Finish()
}

func newAuditCheckpointCmd(g *globals, stdio Stdio) *cobra.Command {
	var keyFile string
	cmd := &cobra.Command{
		Use:   "checkpoint",
		Short: "Print a signed statement of the audit log's head, to keep elsewhere",
		Long: `Verify the audit log, then print a checkpoint: a signed statement of its size
and last hash, in the signed note format of golang.org/x/mod/sumdb/note:

  toolgate audit log
  <number of events>
  <hash of the last event, base64>

  — toolgate-audit <base64 key hash and ed25519 signature>

Store it outside the database, where whoever could alter the database cannot
reach it; 'toolgate audit verify --checkpoint FILE' later proves that the log
still extends it. The signature shows the checkpoint was made with your key,
so a checkpoint stored in a less trusted place cannot be forged.

The verifier key (the key's public half) is printed on stderr: keep it too;
'toolgate audit verify --key FILE' accepts a file holding it, so checkpoints
can be checked without the signing key. A log that fails verification gets no
checkpoint (exit 7).

` + auditKeyHelp + `

` + inspectLockHelp + `

` + auditExitHelp,
		Example: `  toolgate audit checkpoint > /mnt/backup/toolgate-$(date +%F).checkpoint`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := auditKeyPath(keyFile)
			if err != nil {
				return usageErr("%v", err)
			}
			v, err := verifyAuditLog(cmd.Context(), g, nil)
			var ve *audit.VerifyError
			if errors.As(err, &ve) {
				return verifyFailed(ve)
			}
			if err != nil {
				return err
			}
			key, created, err := loadOrCreateSigningKey(path, stdio.Err)
			if err != nil {
				return err
			}
			cp := audit.Checkpoint{Size: v.Len(), Hash: v.Hash()}
			note := key.Sign(cp)
			vkey := key.Verifier().String()
			if created {
				fmt.Fprintf(stdio.Err, "created the signing key %s: keep it private, and back it up\n", path)
			}
			if g.json {
				return encodeJSON(stdio, checkpointJSON{Size: cp.Size, Hash: hex.EncodeToString(cp.Hash[:]),
					Checkpoint: string(note), VerifierKey: vkey, KeyFile: path})
			}
			if _, err := stdio.Out.Write(note); err != nil {
				return internalErr(err)
			}
			fmt.Fprintf(stdio.Err, "checkpoint of %s, signed with %s\nverifier key: %s\n", plural(int(cp.Size), "event"), path, vkey)
			return nil
		},
	}
	cmd.Flags().StringVar(&keyFile, "key", "", "the signing key file (created if missing)")
	return cmd
}

// auditKeyPath resolves the signing key's path: --key, $TOOLGATE_AUDIT_KEY,
// $XDG_CONFIG_HOME/toolgate/audit.key, ~/.config/toolgate/audit.key.
func auditKeyPath(flag string) (string, error) {
	path, _, err := keyPath(flag, "TOOLGATE_AUDIT_KEY", "audit.key")
	if err != nil {
		return "", fmt.Errorf("no audit key path: set --key or TOOLGATE_AUDIT_KEY (%v)", err)
	}
	return path, nil
}

// keyPath resolves a key file's path: flag, else $env, else file in
// $XDG_CONFIG_HOME/toolgate, else in ~/.config/toolgate. explicit is true
// for the first two (the file must then exist).
func keyPath(flag, env, file string) (path string, explicit bool, err error) {
	if flag != "" {
		return flag, true, nil
	}
	if p := os.Getenv(env); p != "" {
		return p, true, nil
	}
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "toolgate", file), false, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", false, err
	}
	return filepath.Join(home, ".config", "toolgate", file), false, nil
}

// loadOrCreateSigningKey reads the signing key at path, creating it (and
// its directory) if it does not exist.
func loadOrCreateSigningKey(path string, warn io.Writer) (key *audit.SigningKey, created bool, err error) {
	b, err := readSmallFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key, err = createSigningKey(path, auditKeyName, "audit key")
		if !errors.Is(err, fs.ErrExist) { // else another process created it first
			return key, err == nil, err
		}
		b, err = readSmallFile(path)
	}
	if err != nil {
		return nil, false, usageErr("audit key: %v", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		fmt.Fprintf(warn, "warning: the signing key %s is accessible to other users (mode %v): chmod 600 it\n", path, fi.Mode().Perm())
	}
	key, err = audit.ParseSigningKey(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, false, usageErr("audit key %s: %v", path, err)
	}
	return key, false, nil
}

// createSigningKey writes a new signing key named name at path (mode 0600,
// its directory created 0700); a file already there is fs.ErrExist. what
// names the key in errors ("audit key").
func createSigningKey(path, name, what string) (*audit.SigningKey, error) {
	key, err := audit.GenerateSigningKey(rand.Reader, name)
	if err != nil {
		return nil, usageErr("%s: %v", what, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, usageErr("%s: %v", what, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	if err != nil {
		return nil, usageErr("%s: %v", what, err)
	}
	_, err = f.WriteString(key.Encode() + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return nil, internalErr(fmt.Errorf("writing %s %s: %w", what, path, err))
	}
	return key, nil
}

// openCheckpoint reads the checkpoint file and checks its signature with the
// key in keyFile (or the default key path): a signing key or a verifier key.
func openCheckpoint(cpFile, keyFile string) (audit.Checkpoint, error) {
	note, err := readSmallFile(cpFile)
	if err != nil {
		return audit.Checkpoint{}, usageErr("--checkpoint: %v", err)
	}
	path, err := auditKeyPath(keyFile)
	if err != nil {
		return audit.Checkpoint{}, usageErr("%v", err)
	}
	b, err := readSmallFile(path)
	if err != nil {
		return audit.Checkpoint{}, usageErr("the checkpoint's key: %v (give --key: the signing key file, or a file holding the verifier key)", err)
	}
	var vkey *audit.VerifierKey
	if s := strings.TrimSpace(string(b)); strings.HasPrefix(s, "PRIVATE+KEY+") {
		k, err := audit.ParseSigningKey(s)
		if err != nil {
			return audit.Checkpoint{}, usageErr("%s: %v", path, err)
		}
		vkey = k.Verifier()
	} else if vkey, err = audit.ParseVerifierKey(s); err != nil {
		return audit.Checkpoint{}, usageErr("%s: %v", path, err)
	}
	cp, err := vkey.Open(note)
	if err != nil {
		return audit.Checkpoint{}, &exitError{code: ExitVerify, err: fmt.Errorf("checkpoint %s rejected: %v", cpFile, err)}
	}
	return cp, nil
}

func readSmallFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAuditFile+1))
	if err == nil && len(b) > maxAuditFile {
		err = fmt.Errorf("%s: larger than %d bytes", path, maxAuditFile)
	}
	return b, err
}

func newAuditTailCmd(g *globals, stdio Stdio) *cobra.Command {
	var (
		n      int
		follow bool
	)
	cmd := &cobra.Command{
		Use:   "tail",
		Short: "Print the newest audit events, and optionally follow new ones",
		Long: `Print the newest -n events of the audit log (default 20), oldest first, one
per line: seq, time, state, tool, execution, attempt, principal and error.
With --json, print each as the stored entry, one JSON object per line (the
form 'toolgate audit export' writes).

With --follow, keep printing new events as they are appended, polling every
500ms until interrupted. Each poll opens the database read-only and closes it
again, so it never holds the lock against writers; while a writer holds it,
new events appear once it is done.

` + inspectLockHelp,
		Example: `  toolgate audit tail
  toolgate audit tail -n 100 --json
  toolgate audit tail -n 0 --follow`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if n < 0 {
				return usageErr("-n: %d is negative", n)
			}
			t := &tailer{g: g, stdio: stdio, n: uint64(n)}
			if !follow {
				store, err := g.openReadOnly()
				if err != nil {
					return err
				}
				if store == nil {
					fmt.Fprintln(stdio.Err, "no audit events")
					return nil
				}
				defer store.Close()
				printed, err := t.poll(cmd.Context(), store)
				if err != nil {
					return internalErr(err)
				}
				if printed == 0 && n > 0 {
					fmt.Fprintln(stdio.Err, "no audit events")
				}
				return nil
			}
			return t.follow(cmd.Context())
		},
	}
	cmd.Flags().IntVarP(&n, "lines", "n", defaultTail, "print the newest N events (0: none, with --follow only the new ones)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events until interrupted")
	return cmd
}

// tailer prints the log's newest events, then the ones appended since.
type tailer struct {
	g       *globals
	stdio   Stdio
	n       uint64 // how many events the first poll prints
	started bool   // a first poll has run
	last    uint64 // the seq of the last event printed or skipped
	heldBy  int    // the pid of the holder followHeld named; 0: none yet
}

// poll prints the events not printed yet.
func (t *tailer) poll(ctx context.Context, store *txn.Store) (int, error) {
	head, err := store.AuditHead(ctx)
	if err != nil {
		return 0, err
	}
	from := t.last + 1
	switch {
	case !t.started:
		t.started = true
		from = 1
		if head > t.n {
			from = head - t.n + 1
		}
	case head < t.last:
		fmt.Fprintf(t.stdio.Err, "the audit log now holds %d events, fewer than the %d seen: it was replaced or truncated\n", head, t.last)
		t.last = head
		return 0, nil
	}
	if from > head {
		t.last = head
		return 0, nil
	}
	entries, err := store.AuditLog(ctx, from, 0)
	if err != nil {
		return 0, fmt.Errorf("reading the audit log: %w (run 'toolgate audit verify')", err)
	}
	w := bufio.NewWriter(t.stdio.Out)
	for _, e := range entries {
		if t.g.json {
			w.Write(appendEntryLine(nil, e))
		} else {
			w.WriteString(formatEvent(e))
		}
		t.last = e.Seq
	}
	return len(entries), w.Flush()
}

// follow polls until ctx is done, opening the database for each poll.
func (t *tailer) follow(ctx context.Context) error {
	path, err := t.g.dbPath()
	if err != nil {
		return usageErr("%v", err)
	}
	tick := time.NewTicker(followInterval)
	defer tick.Stop()
	for {
		if err := t.followOnce(ctx, path); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return internalErr(err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// followOnce runs one poll; a database that does not exist yet (no file,
// or no toolgate schema in the Postgres database), or is locked by a
// writer, is polled again later.
func (t *tailer) followOnce(ctx context.Context, path string) error {
	if !txn.IsPostgresURL(path) {
		if fi, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) || (err == nil && fi.Mode().IsRegular() && fi.Size() == 0) {
			return nil
		}
	}
	store, err := txn.Open(path, &txn.Options{ReadOnly: true, Timeout: followLockWait})
	switch {
	case errors.Is(err, txn.ErrLocked):
		t.g.followHeld(path, &t.heldBy) // says why nothing is printed
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	}
	defer store.Close()
	_, err = t.poll(ctx, store)
	return err
}

// formatEvent is one line of 'toolgate audit tail'.
func formatEvent(e txn.AuditEntry) string {
	var ev audit.Event
	if err := json.Unmarshal(e.Event, &ev); err != nil || ev.State == "" {
		return fmt.Sprintf("%-6d  %s\n", e.Seq, clean(string(e.Event)))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-6d  %s  %-11s  %s@%s  %s  attempt %d", e.Seq,
		formatTime(time.UnixMilli(ev.Timestamp), timeMillis), clean(ev.State),
		clean(ev.ToolID), clean(ev.ToolVersion), clean(ev.ExecutionID), ev.Attempt)
	if ev.UserID != "" {
		fmt.Fprintf(&b, "  user %s", clean(ev.UserID))
	}
	if ev.Duration != nil {
		fmt.Fprintf(&b, "  %v", roundDuration(time.Duration(*ev.Duration)*time.Millisecond))
	}
	if x := ev.Error; x != nil {
		code := clean(x.Type)
		if x.Code != "" {
			code += "/" + clean(x.Code)
		}
		fmt.Fprintf(&b, "  %s: %s", code, clean(x.Message))
	}
	b.WriteByte('\n')
	return b.String()
}

func newAuditExportCmd(g *globals, stdio Stdio) *cobra.Command {
	var from uint64
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write the audit log as JSON Lines, for shipping elsewhere",
		Long: `Write the audit log from event --from on (default 1) to stdout as JSON Lines,
one stored entry per line:

  {"seq":N,"prevHash":"<hex>","hash":"<hex>","event":{...RFC-0001 8.1 event...}}

The event is written with the bytes it was stored and hashed with, so a
receiver can recompute the chain: hash = SHA-256(prevHash bytes ||
SHA-256(event bytes)), the first entry's prevHash being 32 zero bytes
(written ""). Export reads the log as stored and does not verify it: run
'toolgate audit verify' for that. A log whose stored bytes no longer decode
cannot be exported (exit 1).

` + inspectLockHelp,
		Example: `  toolgate audit export > audit.jsonl
  toolgate audit export --from 1835 >> shipped.jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := g.openReadOnly()
			if err != nil || store == nil {
				return err
			}
			defer store.Close()
			w := bufio.NewWriter(stdio.Out)
			var line []byte
			for next := max(from, 1); ; {
				entries, err := store.AuditLog(cmd.Context(), next, exportPage)
				if err != nil {
					return internalErr(fmt.Errorf("reading the audit log: %w (run 'toolgate audit verify')", err))
				}
				for _, e := range entries {
					line = appendEntryLine(line[:0], e)
					if _, err := w.Write(line); err != nil {
						return internalErr(err)
					}
				}
				if len(entries) < exportPage {
					break
				}
				next = entries[len(entries)-1].Seq + 1
			}
			if err := w.Flush(); err != nil {
				return internalErr(err)
			}
			return nil
		},
	}
	cmd.Flags().Uint64Var(&from, "from", 1, "the seq of the first event to write")
	return cmd
}

// appendEntryLine appends e as one JSON line, its event with the bytes it
// was stored with (compacted only if it holds a line break, which JSON Lines
// cannot carry).
func appendEntryLine(b []byte, e txn.AuditEntry) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	b = append(b, `,"prevHash":`...)
	b = appendJSONString(b, e.PrevHash)
	b = append(b, `,"hash":`...)
	b = appendJSONString(b, e.Hash)
	b = append(b, `,"event":`...)
	if bytes.ContainsAny(e.Event, "\r\n") {
		var c bytes.Buffer
		if json.Compact(&c, e.Event) == nil {
			b = append(b, c.Bytes()...)
		} else {
			b = append(b, "null"...)
		}
	} else if len(e.Event) == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, e.Event...)
	}
	return append(b, "}\n"...)
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always encodes
	return append(b, q...)
}
