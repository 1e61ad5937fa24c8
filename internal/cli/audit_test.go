package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/audit"
	"github.com/toolgate/toolgate/capability"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

const echoSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {"msg": {"type": "string", "description": "a message", "maxLength": 64}},
  "required": ["msg"],
  "additionalProperties": false
}`

type echoMsg struct {
	Msg string `json:"msg"`
}

// invoke runs n real invocations of a small tool through the runtime on the
// database at path, adding their audit events to its log: most complete,
// every tenth is denied and every tenth fails validation.
func invoke(t *testing.T, path string, n int) {
	t.Helper()
	ctx := context.Background()
	reg := tools.NewRegistry()
	must(t, reg.Register(tools.NewTyped(tools.Declaration{
		ID: "test.echo", Version: "1.0.0", Name: "echo", Description: "echoes its message into state",
		InputSchema: json.RawMessage(echoSchema), OutputSchema: json.RawMessage(echoSchema),
		RequiredCapabilities: []capability.Capability{capability.MustParse("state.write:test")},
		ResourceLimits:       tools.ResourceLimits{MaxExecutionTime: 5 * time.Second},
	}, func(ctx context.Context, env *tools.Env, in echoMsg) (echoMsg, error) {
		return in, env.State.Put("test", "last", []byte(in.Msg))
	})))
	rt, err := tgruntime.Open(path, &tgruntime.Options{Registry: reg, NoSync: true,
		Grants: map[string][]capability.Capability{"tester": {capability.MustParse("state.write:test")}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		inv := tgruntime.Invocation{Tool: "test.echo", Principal: "tester", Input: json.RawMessage(fmt.Sprintf(`{"msg":"m%d"}`, i))}
		switch i % 10 {
		case 3:
			inv.Principal = "nobody"
		case 7:
			inv.Input = json.RawMessage(`{"msg":7}`)
		}
		if res, err := rt.Execute(ctx, inv); res == nil {
			t.Fatalf("Execute: %v", err)
		}
	}
	must(t, rt.Close(ctx))
}

// auditFixture is a database of real audit events with checkpoints taken
// part way and at the end.
type auditFixture struct {
	db, key     string
	early, full string // checkpoint files
	earlySize   uint64
	size        uint64
}

func newAuditFixture(t *testing.T, first, then int) *auditFixture {
	t.Helper()
	dir := t.TempDir()
	f := &auditFixture{db: filepath.Join(dir, "toolgate.db"), key: filepath.Join(dir, "keys", "audit.key"),
		early: filepath.Join(dir, "early.checkpoint"), full: filepath.Join(dir, "full.checkpoint")}
	invoke(t, f.db, first)
	f.earlySize = f.checkpoint(t, f.db, f.early)
	invoke(t, f.db, then)
	f.size = f.checkpoint(t, f.db, f.full)
	return f
}

// checkpoint takes a checkpoint of the database at db into file and
// returns its size.
func (f *auditFixture) checkpoint(t *testing.T, db, file string) uint64 {
	t.Helper()
	r := toolgate(t, "", "--db", db, "audit", "checkpoint", "--key", f.key)
	if r.code != 0 {
		t.Fatalf("audit checkpoint: exit %d\n%s", r.code, r.stderr)
	}
	must(t, os.WriteFile(file, []byte(r.stdout), 0o600))
	lines := strings.Split(r.stdout, "\n")
	size, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil {
		t.Fatalf("checkpoint %q", r.stdout)
	}
	return size
}

// copyDB copies the fixture's database, for one test to tamper with.
func (f *auditFixture) copyDB(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(f.db)
	must(t, err)
	path := filepath.Join(t.TempDir(), "toolgate.db")
	must(t, os.WriteFile(path, b, 0o600))
	return path
}

// verify runs 'toolgate audit verify' on db, with a checkpoint if not "".
func (f *auditFixture) verify(t *testing.T, db, checkpoint string) run {
	t.Helper()
	args := []string{"--db", db, "audit", "verify"}
	if checkpoint != "" {
		args = append(args, "--checkpoint", checkpoint, "--key", f.key)
	}
	return toolgate(t, "", args...)
}

// storedGroup is one stored group of entries.
type storedGroup struct {
	first   uint64
	entries []txn.AuditEntry
}

// readAudit reads the audit bucket of the (closed) database at path with
// bbolt directly.
func readAudit(t *testing.T, path string) (groups []storedGroup, head []byte) {
	t.Helper()
	if txn.IsPostgresURL(path) {
		return readAuditPostgres(t, path), nil
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	must(t, err)
	defer db.Close()
	must(t, db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("audit")).ForEach(func(k, v []byte) error {
			if len(k) != 8 {
				head = bytes.Clone(v)
				return nil
			}
			g := storedGroup{first: binary.BigEndian.Uint64(k)}
			if err := json.Unmarshal(v, &g.entries); err != nil {
				return err
			}
			groups = append(groups, g)
			return nil
		})
	}))
	return groups, head
}

// writeAudit replaces the audit bucket of the (closed) database at path,
// as an attacker with write access to the file could. A nil head keeps the
// stored one.
func writeAudit(t *testing.T, path string, groups []storedGroup, head []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	must(t, err)
	defer func() { must(t, db.Close()) }()
	must(t, db.Update(func(tx *bolt.Tx) error {
		if head == nil {
			head = bytes.Clone(tx.Bucket([]byte("audit")).Get([]byte{0xff}))
		}
		if err := tx.DeleteBucket([]byte("audit")); err != nil {
			return err
		}
		b, err := tx.CreateBucket([]byte("audit"))
		if err != nil {
			return err
		}
		for _, g := range groups {
			if err := b.Put(binary.BigEndian.AppendUint64(nil, g.first), encodeGroup(g.entries)); err != nil {
				return err
			}
		}
		return b.Put([]byte{0xff}, head)
	}))
}

// modifyAudit edits the stored value of the group holding seq in place.
func modifyAudit(t *testing.T, path string, seq uint64, edit func(value []byte) []byte) {
	t.Helper()
	if txn.IsPostgresURL(path) {
		modifyAuditPostgres(t, path, seq, edit)
		return
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	must(t, err)
	defer func() { must(t, db.Close()) }()
	must(t, db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("audit"))
		c := b.Cursor()
		k, _ := c.Seek(binary.BigEndian.AppendUint64(nil, seq))
		if k == nil || len(k) != 8 || binary.BigEndian.Uint64(k) > seq {
			k, _ = c.Prev()
		}
		return b.Put(bytes.Clone(k), edit(bytes.Clone(b.Get(k))))
	}))
}

// encodeGroup is a group as txn stores it.
func encodeGroup(entries []txn.AuditEntry) []byte {
	b := []byte{'['}
	for i, e := range entries {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"seq":%d,"prevHash":"%s","hash":"%s","event":%s}`, e.Seq, e.PrevHash, e.Hash, e.Event)
	}
	return append(b, ']')
}

func flatten(groups []storedGroup) []txn.AuditEntry {
	var out []txn.AuditEntry
	for _, g := range groups {
		out = append(out, g.entries...)
	}
	return out
}

// regroup lays entries out in groups of the sizes of groups, under the
// groups' keys if keepKeys, else under their first entry's seq.
func regroup(groups []storedGroup, entries []txn.AuditEntry, keepKeys bool) []storedGroup {
	out := make([]storedGroup, 0, len(groups))
	for _, g := range groups {
		n := min(len(g.entries), len(entries))
		if n == 0 {
			break
		}
		first := entries[0].Seq
		if keepKeys {
			first = g.first
		}
		out = append(out, storedGroup{first: first, entries: entries[:n:n]})
		entries = entries[n:]
	}
	if len(entries) > 0 {
		out = append(out, storedGroup{first: entries[0].Seq, entries: entries})
	}
	return out
}

func hashBytes(h string) []byte {
	b, _ := hex.DecodeString(h)
	return b
}

func headOf(e txn.AuditEntry) []byte {
	return append(binary.BigEndian.AppendUint64(nil, e.Seq), hashBytes(e.Hash)...)
}

// relink recomputes every seq and hash from index i on: a forger's
// consistent rewrite. It returns the new head.
func relink(entries []txn.AuditEntry, i int) []byte {
	var link [32]byte
	if i > 0 {
		copy(link[:], hashBytes(entries[i-1].Hash))
	}
	for j := i; j < len(entries); j++ {
		entries[j].Seq = uint64(j + 1)
		entries[j].PrevHash = ""
		if j > 0 {
			entries[j].PrevHash = hex.EncodeToString(link[:])
		}
		link = audit.ChainHash(link, entries[j].Event)
		entries[j].Hash = hex.EncodeToString(link[:])
	}
	return headOf(entries[len(entries)-1])
}

// midGroup returns the index of a group near the middle of the log holding
// at least min entries.
func midGroup(t *testing.T, groups []storedGroup, minSize int) int {
	t.Helper()
	for i := len(groups) / 2; i < len(groups); i++ {
		if len(groups[i].entries) >= minSize {
			return i
		}
	}
	t.Fatalf("no group of %d entries", minSize)
	return 0
}

// wantVerifyFailed asserts exit 7 naming event seq first, for why.
func wantVerifyFailed(t *testing.T, r run, seq uint64, why string) {
	t.Helper()
	if r.code != ExitVerify || !strings.Contains(r.stderr, fmt.Sprintf("failed at event %d: ", seq)) || !strings.Contains(r.stderr, why) {
		t.Fatalf("exit %d, want %d naming event %d (%s)\nstdout: %s\nstderr: %s", r.code, ExitVerify, seq, why, r.stdout, r.stderr)
	}
}

// wantRecordsFailed is a log whose chain is consistent (events valid) but
// whose stored records betray the tampering: audit verify exits 7 naming
// the records that disagree.
func wantRecordsFailed(t *testing.T, r run, events uint64, field string) {
	t.Helper()
	if r.code != ExitVerify || !strings.HasPrefix(r.stdout, fmt.Sprintf("%d events valid\n", events)) ||
		!strings.Contains(r.stdout, ": "+field+": ") || !regexp.MustCompile(`\b(1 stored record field does|([2-9]|\d\d+) stored record fields do) not match the audit log`).MatchString(r.stderr) {
		t.Fatalf("exit %d, want %d with %d events valid and records disagreeing on %s\nstdout: %s\nstderr: %s", r.code, ExitVerify, events, field, r.stdout, r.stderr)
	}
}

func wantValid(t *testing.T, r run, events uint64) {
	t.Helper()
	if r.code != 0 || !strings.HasPrefix(r.stdout, fmt.Sprintf("%d events valid\n", events)) {
		t.Fatalf("exit %d, want %d events valid\nstdout: %s\nstderr: %s", r.code, events, r.stdout, r.stderr)
	}
}

// Every tamper with a log of over 1,000 real events is caught, naming the
// first bad event; truncation and a consistent rewrite only with a
// checkpoint taken before.
func TestAudit_Tampered(t *testing.T) {
	workdir(t)
	f := newAuditFixture(t, 130, 170)
	if f.size < 1000 || f.earlySize < 300 {
		t.Fatalf("the fixture has %d events (checkpoint at %d): too few", f.size, f.earlySize)
	}
	groups, _ := readAudit(t, f.db)
	entries := flatten(groups)
	if uint64(len(entries)) != f.size {
		t.Fatalf("%d entries, checkpoint of %d", len(entries), f.size)
	}
	wantValid(t, f.verify(t, f.db, ""), f.size)
	wantValid(t, f.verify(t, f.db, f.early), f.size)
	wantValid(t, f.verify(t, f.db, f.full), f.size)

	mid := midGroup(t, groups, 3)
	midSeq := groups[mid].first + 1 // inside a group, not its first entry

	t.Run("byte flipped", func(t *testing.T) {
		for _, tc := range []struct {
			seq    uint64
			offset int // in the event's JSON; -1 counts from the end
			why    string
		}{
			{1, 20, "the event was altered"},
			{1, 0, "does not decode"}, // '{' becomes 'z'
			{midSeq, 30, "the event was altered"},
			{midSeq, 12, "the event was altered"},
			{groups[mid].first, 40, "the event was altered"},
			{f.size / 3, 1, "does not decode"},    // '"' becomes '#'
			{f.size, -3, "the event was altered"}, // the last hex digit of a hash
			{f.size, -1, "does not decode"},       // the closing '}'
		} {
			db := f.copyDB(t)
			modifyAudit(t, db, tc.seq, func(v []byte) []byte {
				start := bytes.Index(v, fmt.Appendf(nil, `{"seq":%d,`, tc.seq))
				ev := start + bytes.Index(v[start:], []byte(`"event":`)) + len(`"event":`)
				end := ev + len(entries[tc.seq-1].Event)
				i := ev + tc.offset
				if tc.offset < 0 {
					i = end + tc.offset
				}
				v[i] ^= 0x01
				return v
			})
			wantVerifyFailed(t, f.verify(t, db, ""), tc.seq, tc.why)
			wantVerifyFailed(t, f.verify(t, db, f.full), tc.seq, tc.why)
		}
	})

	t.Run("event deleted", func(t *testing.T) {
		db := f.copyDB(t)
		gs, _ := readAudit(t, db)
		g := &gs[mid]
		g.entries = append(g.entries[:1:1], g.entries[2:]...) // drop midSeq
		writeAudit(t, db, gs, nil)
		wantVerifyFailed(t, f.verify(t, db, ""), midSeq, "missing")
	})

	t.Run("group deleted", func(t *testing.T) {
		db := f.copyDB(t)
		gs, _ := readAudit(t, db)
		writeAudit(t, db, append(gs[:mid:mid], gs[mid+1:]...), nil)
		wantVerifyFailed(t, f.verify(t, db, ""), gs[mid].first, "missing")
	})

	t.Run("two events reordered", func(t *testing.T) {
		for _, pair := range [][2]uint64{{midSeq, midSeq + 1}, {5, f.size - 5}} {
			db := f.copyDB(t)
			gs, _ := readAudit(t, db)
			es := flatten(gs)
			i, j := pair[0]-1, pair[1]-1
			es[i], es[j] = es[j], es[i]
			writeAudit(t, db, regroup(gs, es, true), nil)
			wantVerifyFailed(t, f.verify(t, db, ""), pair[0], "missing")
		}
	})

	t.Run("events' contents swapped", func(t *testing.T) {
		db := f.copyDB(t)
		gs, _ := readAudit(t, db)
		es := flatten(gs)
		es[midSeq-1].Event, es[midSeq+3].Event = es[midSeq+3].Event, es[midSeq-1].Event
		writeAudit(t, db, regroup(gs, es, true), nil)
		wantVerifyFailed(t, f.verify(t, db, ""), midSeq, "the event was altered")
	})

	t.Run("event inserted", func(t *testing.T) {
		// A forged event numbered midSeq and linked after event midSeq-1,
		// put before the real event midSeq in its group; the later events
		// left as they are, or renumbered.
		for _, renumber := range []bool{false, true} {
			db := f.copyDB(t)
			gs, _ := readAudit(t, db)
			prev := gs[mid].entries[0]
			var link [32]byte
			copy(link[:], hashBytes(prev.Hash))
			forged := txn.AuditEntry{Seq: midSeq, PrevHash: prev.Hash,
				Event: bytes.Replace(gs[mid].entries[1].Event, []byte(`"state":"`), []byte(`"state":"X`), 1)}
			h := audit.ChainHash(link, forged.Event)
			forged.Hash = hex.EncodeToString(h[:])
			g := &gs[mid]
			g.entries = append(g.entries[:1:1], append([]txn.AuditEntry{forged}, g.entries[1:]...)...)
			head := []byte(nil)
			if renumber {
				es := flatten(gs)
				for k := midSeq; k < uint64(len(es)); k++ {
					es[k].Seq++
				}
				gs = regroup(gs, es, false)
				head = append(binary.BigEndian.AppendUint64(nil, f.size+1), hashBytes(es[len(es)-1].Hash)...)
			}
			writeAudit(t, db, gs, head)
			wantVerifyFailed(t, f.verify(t, db, ""), midSeq, "inserted")
		}
	})

	t.Run("rewritten from an event on", func(t *testing.T) {
		// Event k altered and every later hash recomputed, head included:
		// the chain is consistent. Only a checkpoint covering event k
		// detects it in the chain, at the checkpoint's size (the chain
		// cannot tell which event changed); the stored record of the
		// event's attempt no longer matches it, which names the attempt.
		for _, k := range []uint64{f.earlySize + 10, f.earlySize - 10} {
			db := f.copyDB(t)
			gs, _ := readAudit(t, db)
			es := flatten(gs)
			es[k-1].Event = bytes.Replace(es[k-1].Event, []byte(`"toolId":"test.echo"`), []byte(`"toolId":"test.ecko"`), 1)
			head := relink(es, int(k-1))
			writeAudit(t, db, regroup(gs, es, true), head)
			wantRecordsFailed(t, f.verify(t, db, ""), f.size, "tool")
			wantVerifyFailed(t, f.verify(t, db, f.full), f.size, "does not extend the checkpoint")
			if k > f.earlySize {
				wantRecordsFailed(t, f.verify(t, db, f.early), f.size, "tool")
			} else {
				wantVerifyFailed(t, f.verify(t, db, f.early), f.earlySize, "does not extend the checkpoint")
			}
		}
	})

	t.Run("tail truncated", func(t *testing.T) {
		// The newest groups deleted and the head rewritten to match: the
		// chain cannot tell, a checkpoint taken before can; and the
		// records of the attempts whose events went have none left.
		db := f.copyDB(t)
		gs, _ := readAudit(t, db)
		keep := len(gs) - 10
		gs = gs[:keep]
		last := gs[keep-1].entries[len(gs[keep-1].entries)-1]
		writeAudit(t, db, gs, headOf(last))
		wantRecordsFailed(t, f.verify(t, db, ""), last.Seq, "events")
		wantRecordsFailed(t, f.verify(t, db, f.early), last.Seq, "events")
		wantVerifyFailed(t, f.verify(t, db, f.full), last.Seq+1, "truncated")
	})

	t.Run("tail truncated, head kept", func(t *testing.T) {
		db := f.copyDB(t)
		gs, _ := readAudit(t, db)
		gs = gs[:len(gs)-1]
		writeAudit(t, db, gs, nil)
		wantVerifyFailed(t, f.verify(t, db, ""), gs[len(gs)-1].entries[len(gs[len(gs)-1].entries)-1].Seq+1, "tail was deleted")
	})

	t.Run("head altered", func(t *testing.T) {
		db := f.copyDB(t)
		gs, head := readAudit(t, db)
		head[39] ^= 0x01
		writeAudit(t, db, gs, head)
		wantVerifyFailed(t, f.verify(t, db, ""), f.size, "head hash")
	})

	t.Run("whole log replaced", func(t *testing.T) {
		// Another database: its own chain is valid, but it does not extend
		// this log's checkpoint.
		other := filepath.Join(t.TempDir(), "other.db")
		invoke(t, other, 140)
		wantVerifyFailed(t, f.verify(t, other, f.early), f.earlySize, "does not extend the checkpoint")
	})
}

// The checkpoint command: the key kept outside the database, the signed
// note format, and the rejection of forged checkpoints.
func TestAudit_Checkpoint(t *testing.T) {
	dir := workdir(t)
	config := filepath.Join(dir, "config")
	t.Setenv("XDG_CONFIG_HOME", config)
	t.Setenv("TOOLGATE_AUDIT_KEY", "")
	db := theDB()
	invoke(t, db, 10)

	r := toolgate(t, "", "audit", "checkpoint")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	keyPath := filepath.Join(config, "toolgate", "audit.key")
	if !strings.Contains(r.stderr, "created the signing key "+keyPath) || !strings.Contains(r.stderr, "verifier key: toolgate-audit+") {
		t.Fatalf("stderr:\n%s", r.stderr)
	}
	for path, mode := range map[string]os.FileMode{keyPath: 0o600, filepath.Dir(keyPath): 0o700 | os.ModeDir} {
		fi, err := os.Stat(path)
		if err != nil || fi.Mode() != mode {
			t.Fatalf("%s: mode %v, %v; want %v", path, fi.Mode(), err, mode)
		}
	}
	keyFile, _ := os.ReadFile(keyPath)
	if !strings.HasPrefix(string(keyFile), "PRIVATE+KEY+toolgate-audit+") || bytes.Contains(keyFile, []byte(r.stdout)) {
		t.Fatalf("key file %q", keyFile)
	}
	// The checkpoint is a signed note that golang.org/x/mod/sumdb/note reads
	// (audit tests check that); its text is the log's size and head hash.
	vkeyLine := r.stderr[strings.Index(r.stderr, "verifier key: ")+len("verifier key: "):]
	vkey := strings.TrimSpace(vkeyLine)
	lines := strings.Split(r.stdout, "\n")
	if len(lines) != 6 || lines[0] != "toolgate audit log" || lines[3] != "" || !strings.HasPrefix(lines[4], "— toolgate-audit ") {
		t.Fatalf("checkpoint:\n%s", r.stdout)
	}
	groups, _ := readAudit(t, db)
	es := flatten(groups)
	last := es[len(es)-1]
	if lines[1] != strconv.Itoa(len(es)) || !strings.Contains(r.stdout, "\n"+b64(hashBytes(last.Hash))+"\n") {
		t.Fatalf("checkpoint of %d events, head %s:\n%s", len(es), last.Hash, r.stdout)
	}
	cp := filepath.Join(dir, "cp.txt")
	must(t, os.WriteFile(cp, []byte(r.stdout), 0o600))

	// The same key is used again, and verify finds it at the default path.
	if r2 := toolgate(t, "", "audit", "checkpoint"); r2.code != 0 || r2.stdout != r.stdout || strings.Contains(r2.stderr, "created") {
		t.Fatalf("second checkpoint: exit %d\n%s%s", r2.code, r2.stdout, r2.stderr)
	}
	if r := toolgate(t, "", "audit", "verify", "--checkpoint", cp); r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("extends the checkpoint of %d events", len(es))) {
		t.Fatalf("verify: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// A file holding only the verifier key verifies too.
	pub := filepath.Join(dir, "audit.pub")
	must(t, os.WriteFile(pub, []byte(vkey+"\n"), 0o644))
	if r := toolgate(t, "", "audit", "verify", "--checkpoint", cp, "--key", pub); r.code != 0 {
		t.Fatalf("verify with the verifier key: exit %d\n%s", r.code, r.stderr)
	}
	// --json
	var out struct {
		Valid      bool
		Events     uint64
		Head       string
		Checkpoint struct {
			Size uint64
			Hash string
		}
	}
	r3 := toolgate(t, "", "audit", "verify", "--json", "--checkpoint", cp)
	if err := json.Unmarshal([]byte(r3.stdout), &out); err != nil || !out.Valid || out.Events != uint64(len(es)) ||
		out.Head != last.Hash || out.Checkpoint.Size != uint64(len(es)) || out.Checkpoint.Hash != last.Hash {
		t.Fatalf("verify --json: %+v %v\n%s", out, err, r3.stdout)
	}

	// $TOOLGATE_AUDIT_KEY names another key; --key overrides it.
	other := filepath.Join(dir, "other", "audit.key")
	t.Setenv("TOOLGATE_AUDIT_KEY", other)
	rOther := toolgate(t, "", "audit", "checkpoint")
	if rOther.code != 0 || !strings.Contains(rOther.stderr, "created the signing key "+other) {
		t.Fatalf("checkpoint with $TOOLGATE_AUDIT_KEY: exit %d\n%s", rOther.code, rOther.stderr)
	}
	otherCP := filepath.Join(dir, "other.txt")
	must(t, os.WriteFile(otherCP, []byte(rOther.stdout), 0o600))
	if r := toolgate(t, "", "audit", "verify", "--checkpoint", otherCP); r.code != 0 {
		t.Fatalf("verify with $TOOLGATE_AUDIT_KEY: exit %d\n%s", r.code, r.stderr)
	}

	// Forged or altered checkpoints are rejected, exit 7.
	sizeChanged := strings.Replace(r.stdout, "\n"+lines[1]+"\n", "\n"+strconv.Itoa(len(es)-3)+"\n", 1)
	sig := []byte(lines[4])
	if sig[len(sig)-5] == 'A' {
		sig[len(sig)-5] = 'B'
	} else {
		sig[len(sig)-5] = 'A'
	}
	sigChanged := strings.Replace(r.stdout, lines[4], string(sig), 1)
	for name, tc := range map[string]struct{ content, key, why string }{
		"size changed":          {sizeChanged, keyPath, "does not verify"},
		"signature changed":     {sigChanged, pub, "does not verify"},
		"signed by another key": {rOther.stdout, keyPath, "not signed by key"},
		"not a checkpoint":      {"hello\n", keyPath, "not a signed note"},
	} {
		file := filepath.Join(t.TempDir(), "cp")
		must(t, os.WriteFile(file, []byte(tc.content), 0o600))
		r := toolgate(t, "", "audit", "verify", "--checkpoint", file, "--key", tc.key)
		if r.code != ExitVerify || !strings.Contains(r.stderr, "rejected") || !strings.Contains(r.stderr, tc.why) || r.stdout != "" {
			t.Errorf("%s: exit %d\n%s%s", name, r.code, r.stdout, r.stderr)
		}
		r = toolgate(t, "", "audit", "verify", "--json", "--checkpoint", file, "--key", tc.key)
		if r.code != ExitVerify || !strings.Contains(r.stdout, `"valid": false`) || !strings.Contains(r.stdout, tc.why) {
			t.Errorf("%s, --json: exit %d\n%s%s", name, r.code, r.stdout, r.stderr)
		}
	}

	// Unreadable inputs are usage errors.
	for name, args := range map[string][]string{
		"no checkpoint file": {"audit", "verify", "--checkpoint", filepath.Join(dir, "nope")},
		"no key file":        {"audit", "verify", "--checkpoint", cp, "--key", filepath.Join(dir, "nope")},
		"bad key file":       {"audit", "verify", "--checkpoint", cp, "--key", cp},
		"bad signing key":    {"audit", "checkpoint", "--key", pub},
	} {
		if r := toolgate(t, "", args...); r.code != ExitUsage {
			t.Errorf("%s: exit %d\n%s", name, r.code, r.stderr)
		}
	}

	// A log that fails verification gets no checkpoint.
	editEvent(t, db, 3, `"attempt":1`, `"attempt":2`)
	if r := toolgate(t, "", "audit", "checkpoint", "--key", keyPath); r.code != ExitVerify || r.stdout != "" || !strings.Contains(r.stderr, "at event 3:") {
		t.Fatalf("checkpoint of a tampered log: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// editEvent replaces old by new in the stored event numbered seq.
func editEvent(t *testing.T, path string, seq uint64, old, new string) {
	t.Helper()
	modifyAudit(t, path, seq, func(v []byte) []byte {
		start := bytes.Index(v, fmt.Appendf(nil, `{"seq":%d,`, seq))
		i := bytes.Index(v[start:], []byte(old))
		if start < 0 || i < 0 {
			t.Fatalf("event %d does not hold %q", seq, old)
		}
		return append(v[:start+i:start+i], append([]byte(new), v[start+i+len(old):]...)...)
	})
}

func TestAudit_VerifyJSONFailure(t *testing.T) {
	workdir(t)
	db := theDB()
	invoke(t, db, 5)
	editEvent(t, db, 4, `{"seq":4,`, `{"seq":5,`)
	r := toolgate(t, "", "audit", "verify", "--json")
	var out struct {
		Valid    bool   `json:"valid"`
		BadEvent uint64 `json:"badEvent"`
		Reason   string `json:"reason"`
	}
	if r.code != ExitVerify || json.Unmarshal([]byte(r.stdout), &out) != nil || out.Valid || out.BadEvent != 4 || out.Reason == "" {
		t.Fatalf("exit %d %+v\n%s%s", r.code, out, r.stdout, r.stderr)
	}
}

func TestAudit_TailExport(t *testing.T) {
	workdir(t)
	db := theDB()
	invoke(t, db, 20)
	groups, _ := readAudit(t, db)
	es := flatten(groups)
	n := len(es)

	// tail: the newest 20 by default, one line each, oldest first.
	r := toolgate(t, "", "audit", "tail")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 20 || seqOf(lines[0]) != n-19 || seqOf(lines[19]) != n {
		t.Fatalf("tail: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "COMPLETED    test.echo@1.0.0") || !strings.Contains(r.stdout, "user tester") {
		t.Fatalf("tail lines:\n%s", r.stdout)
	}
	r = toolgate(t, "", "audit", "tail", "-n", "3")
	if lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n"); r.code != 0 || len(lines) != 3 {
		t.Fatalf("tail -n 3:\n%s", r.stdout)
	}
	r = toolgate(t, "", "audit", "tail", "-n", "1000")
	if lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n"); r.code != 0 || len(lines) != n || seqOf(lines[0]) != 1 {
		t.Fatalf("tail -n 1000: %d lines", len(lines))
	}
	denied := toolgate(t, "", "audit", "tail", "-n", "1000")
	if !strings.Contains(denied.stdout, "DENIED") || !strings.Contains(denied.stdout, "AuthorizationError") {
		t.Fatalf("tail shows no denial:\n%s", denied.stdout)
	}
	r = toolgate(t, "", "audit", "tail", "-n", "2", "--json")
	if lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n"); r.code != 0 || len(lines) != 2 {
		t.Fatalf("tail --json:\n%s", r.stdout)
	} else {
		var e txn.AuditEntry
		if err := json.Unmarshal([]byte(lines[1]), &e); err != nil || e.Seq != uint64(n) || e.Hash != es[n-1].Hash || !bytes.Equal(e.Event, es[n-1].Event) {
			t.Fatalf("tail --json line %q: %v", lines[1], err)
		}
	}
	if r := toolgate(t, "", "audit", "tail", "-n", "-1"); r.code != ExitUsage {
		t.Fatalf("tail -n -1: exit %d", r.code)
	}

	// export: every entry, one per line, the event with its stored bytes,
	// so a receiver can recompute the chain.
	r = toolgate(t, "", "audit", "export")
	if r.code != 0 {
		t.Fatalf("export: exit %d %s", r.code, r.stderr)
	}
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	var link [32]byte
	count := 0
	for sc.Scan() {
		var e txn.AuditEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("export line %q: %v", sc.Text(), err)
		}
		count++
		link = audit.ChainHash(link, e.Event)
		if e.Seq != uint64(count) || e.Hash != hex.EncodeToString(link[:]) || e.Hash != es[count-1].Hash {
			t.Fatalf("export line %d: %s", count, sc.Text())
		}
		if want := fmt.Sprintf(`{"seq":%d,"prevHash":"%s","hash":"%s","event":%s}`, e.Seq, e.PrevHash, e.Hash, es[count-1].Event); sc.Text() != want {
			t.Fatalf("export line %q\nwant %q", sc.Text(), want)
		}
	}
	if count != n {
		t.Fatalf("export: %d lines, want %d", count, n)
	}
	r = toolgate(t, "", "audit", "export", "--from", strconv.Itoa(n-4))
	if lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n"); r.code != 0 || len(lines) != 5 || !strings.HasPrefix(lines[0], fmt.Sprintf(`{"seq":%d,`, n-4)) {
		t.Fatalf("export --from: %s", r.stdout)
	}
	if r := toolgate(t, "", "audit", "export", "--from", strconv.Itoa(n+1)); r.code != 0 || r.stdout != "" {
		t.Fatalf("export past the end: exit %d %q", r.code, r.stdout)
	}

	// A group that no longer decodes: tail and export fail (exit 1) and
	// point at verify.
	modifyAudit(t, db, uint64(n), func(v []byte) []byte { return append(v, '!') })
	for _, args := range [][]string{{"audit", "export"}, {"audit", "tail"}} {
		if r := toolgate(t, "", args...); r.code != ExitInternal || !strings.Contains(r.stderr, "toolgate audit verify") {
			t.Fatalf("%v on a corrupt log: exit %d %s", args, r.code, r.stderr)
		}
	}
}

// seqOf is the seq a line of 'toolgate audit tail' begins with.
func seqOf(line string) int {
	f := strings.Fields(line)
	if len(f) == 0 {
		return -1
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return -1
	}
	return n
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// tail --follow prints new events as writers append them, without holding
// the lock against them, until its context is cancelled.
func TestAudit_TailFollow(t *testing.T) {
	workdir(t)
	db := theDB() // a file, or on Postgres a database without toolgate's schema yet
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int)
	go func() {
		done <- Main(ctx, []string{"audit", "tail", "--follow", "-n", "2"}, Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	}()
	lines := func() []string {
		s := strings.TrimSuffix(out.String(), "\n")
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}
	waitLines := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for len(lines()) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d lines after 10s, want %d:\n%s\nstderr: %s", len(lines()), n, out.String(), errb.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The database does not exist yet: tail waits for it.
	invoke(t, db, 1) // 4 events; the first poll prints the newest 2
	waitLines(2)
	invoke(t, db, 2) // the runtime opens the database beside the follower
	total := int(auditHead(t, db))
	waitLines(2 + total - 4)
	got := lines()
	for i, l := range got {
		if seqOf(l) != 3+i {
			t.Fatalf("line %d = %q, want seq %d:\n%s", i, l, 3+i, out.String())
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("tail --follow did not stop when its context was cancelled")
	}
}

// auditHead is the number of events in the log of the database at path.
func auditHead(t *testing.T, path string) uint64 {
	t.Helper()
	s, err := txn.Open(path, &txn.Options{ReadOnly: true, Timeout: 10 * time.Second})
	must(t, err)
	defer s.Close()
	head, err := s.AuditHead(context.Background())
	must(t, err)
	return head
}

func TestAudit_Empty(t *testing.T) {
	dir := workdir(t)
	// No database: an empty log.
	if r := toolgate(t, "", "audit", "verify"); r.code != 0 || r.stdout != "0 events valid\n0 execution records and 0 intents match their audit events\n" {
		t.Fatalf("verify without a database: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r := toolgate(t, "", "audit", "tail"); r.code != 0 || r.stdout != "" || r.stderr != "no audit events\n" {
		t.Fatalf("tail without a database: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := toolgate(t, "", "audit", "export"); r.code != 0 || r.stdout != "" {
		t.Fatalf("export without a database: exit %d %q", r.code, r.stdout)
	}
	if _, err := os.Stat(filepath.Join(dir, "state")); !os.IsNotExist(err) {
		t.Fatalf("the audit commands created the database directory: %v", err)
	}
	if onPostgres() {
		if s, err := txn.Open(theDB(), &txn.Options{ReadOnly: true}); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the audit commands created toolgate's schema: %v", err)
		} else if s != nil {
			s.Close()
		}
	}
	// A checkpoint of the empty log, then truncation of a later log to
	// nothing is caught against a later checkpoint.
	key := filepath.Join(dir, "audit.key")
	r := toolgate(t, "", "audit", "checkpoint", "--key", key)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "toolgate audit log\n0\n") {
		t.Fatalf("checkpoint of nothing: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestAudit_Locked(t *testing.T) {
	bboltOnly(t, whyLock)
	dir := workdir(t)
	key := filepath.Join(dir, "audit.key")
	// A writer holding the database: exit 1, "locked".
	db := filepath.Join(dir, "state", "toolgate.db")
	invoke(t, db, 1)
	writer, err := txn.Open(db, nil)
	must(t, err)
	defer writer.Close()
	for _, args := range [][]string{{"audit", "verify"}, {"audit", "checkpoint", "--key", key}} {
		if r := toolgate(t, "", args...); r.code != ExitInternal || !strings.Contains(r.stderr, "locked") {
			t.Fatalf("%v beside a writer: exit %d %s", args, r.code, r.stderr)
		}
	}
}

func TestAudit_Help(t *testing.T) {
	r := toolgate(t, "", "audit", "--help")
	for _, want := range []string{"verify", "checkpoint", "tail", "export", "7  verification failed"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("audit --help does not mention %q:\n%s", want, r.stdout)
		}
	}
	r = toolgate(t, "", "audit", "verify", "--help")
	for _, want := range []string{"--checkpoint", "--key", "not that it is complete", "7  verification failed"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("audit verify --help does not mention %q", want)
		}
	}
	if r := toolgate(t, "", "--help"); !strings.Contains(r.stdout, "audit") {
		t.Errorf("the audit command is hidden:\n%s", r.stdout)
	}
}
