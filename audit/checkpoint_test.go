package audit_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/toolgate/toolgate/audit"
)

func newKey(t *testing.T) *audit.SigningKey {
	t.Helper()
	k, err := audit.GenerateSigningKey(rand.Reader, "toolgate-audit")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestCheckpoint_Text(t *testing.T) {
	c := audit.Checkpoint{Size: 1834, Hash: sha256.Sum256([]byte("x"))}
	want := "toolgate audit log\n1834\nLXEWQrcmsEQBYnyp+6wy9chTD7GQPMTbAiWHF5IaSIE=\n"
	if got := string(c.Text()); got != want {
		t.Fatalf("Text() = %q, want %q", got, want)
	}
	if back, err := audit.ParseCheckpoint(c.Text()); err != nil || back != c {
		t.Fatalf("ParseCheckpoint(Text()) = %+v, %v", back, err)
	}
	if back, err := audit.ParseCheckpoint((audit.Checkpoint{}).Text()); err != nil || back != (audit.Checkpoint{}) {
		t.Fatalf("empty checkpoint: %+v, %v", back, err)
	}
	for _, bad := range []string{
		"",
		"toolgate audit log\n1834\nLXEWQrcmsEQBYnyp+6wy9chTD7GQPMTbAiWHF5IaSIE=",          // no final newline
		"toolgate audit log\n1834\nLXEWQrcmsEQBYnyp+6wy9chTD7GQPMTbAiWHF5IaSIE=\nextra\n", // a fourth line
		"go.sum database tree\n1834\nLXEWQrcmsEQBYnyp+6wy9chTD7GQPMTbAiWHF5IaSIE=\n",      // another origin
		"toolgate audit log\n01834\nLXEWQrcmsEQBYnyp+6wy9chTD7GQPMTbAiWHF5IaSIE=\n",       // leading zero
		"toolgate audit log\n+1834\nLXEWQrcmsEQBYnyp+6wy9chTD7GQPMTbAiWHF5IaSIE=\n",       // sign
		"toolgate audit log\n-1\nLXEWQrcmsEQBYnyp+6wy9chTD7GQPMTbAiWHF5IaSIE=\n",          // negative
		"toolgate audit log\n1834\nLXEWQrcmsEQBYnyp+6wy9chTD7GQPMTbAiWHF5IaSIE\n",         // bad base64
		"toolgate audit log\n1834\nLXGOhjmaKGy0vBgUE+1u72TJsvFGWaF3eZ3fxx5u\n",            // short hash
		"toolgate audit log\n0\nLXEWQrcmsEQBYnyp+6wy9chTD7GQPMTbAiWHF5IaSIE=\n",           // empty with a hash
		"toolgate audit log\r\n1834\r\nLXEWQrcmsEQBYnyp+6wy9chTD7GQPMTbAiWHF5IaSIE=\r\n",  // CRLF
	} {
		if c, err := audit.ParseCheckpoint([]byte(bad)); !errors.Is(err, audit.ErrCheckpoint) {
			t.Errorf("ParseCheckpoint(%q) = %+v, %v; want ErrCheckpoint", bad, c, err)
		}
	}
}

func TestCheckpoint_SignOpen(t *testing.T) {
	k := newKey(t)
	c := audit.Checkpoint{Size: 42, Hash: sha256.Sum256([]byte("head"))}
	msg := k.Sign(c)
	if !bytes.HasPrefix(msg, c.Text()) || !bytes.Contains(msg, []byte("\n\n— toolgate-audit ")) {
		t.Fatalf("signed checkpoint:\n%s", msg)
	}
	for name, vk := range map[string]*audit.VerifierKey{"verifier": k.Verifier(), "parsed": mustVerifier(t, k.Verifier().String())} {
		if got, err := vk.Open(msg); err != nil || got != c {
			t.Fatalf("%s: Open = %+v, %v", name, got, err)
		}
	}

	// A forged or altered checkpoint is rejected.
	other := newKey(t)
	rejects := map[string][]byte{
		"size changed":          bytes.Replace(msg, []byte("\n42\n"), []byte("\n41\n"), 1),
		"hash changed":          bytes.Replace(msg, c.Text()[len("toolgate audit log\n42\n"):][:4], []byte("AAAA"), 1),
		"signature changed":     flipSig(msg),
		"signed by another key": other.Sign(c),
		"unsigned":              c.Text(),
		"no signature lines":    append(c.Text(), '\n'),
		"garbage":               []byte("hello\n\n— x y\n"),
		"control character":     bytes.Replace(msg, []byte("toolgate"), []byte("tool\x00ate"), 1),
		"invalid UTF-8":         append(msg[:len(msg):len(msg)], 0xff),
		"another key's name":    bytes.Replace(other.Sign(c), []byte("— toolgate-audit"), []byte("— toolgate-other"), 1),
	}
	for name, bad := range rejects {
		if got, err := k.Verifier().Open(bad); !errors.Is(err, audit.ErrCheckpoint) {
			t.Errorf("%s: Open = %+v, %v; want ErrCheckpoint", name, got, err)
		}
	}
	_, err := k.Verifier().Open(rejects["size changed"])
	if err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Errorf("altered checkpoint: %v", err)
	}
	_, err = k.Verifier().Open(rejects["signed by another key"])
	if err == nil || !strings.Contains(err.Error(), "not signed by key "+k.Verifier().String()[:len("toolgate-audit+12345678")]) {
		t.Errorf("another key: %v", err)
	}

	// Signatures by other keys are ignored: a co-signed checkpoint opens.
	n, err := note.Open(msg, note.VerifierList(xVerifier(t, k.Verifier().String())))
	if err != nil {
		t.Fatal(err)
	}
	cosigned, err := note.Sign(n, xSigner(t, other.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := k.Verifier().Open(cosigned); err != nil || got != c {
		t.Fatalf("co-signed: %+v, %v", got, err)
	}
}

func flipSig(msg []byte) []byte {
	b := bytes.Clone(msg)
	i := len(b) - 10
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return b
}

func mustVerifier(t *testing.T, s string) *audit.VerifierKey {
	t.Helper()
	v, err := audit.ParseVerifierKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func xVerifier(t *testing.T, vkey string) note.Verifier {
	t.Helper()
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func xSigner(t *testing.T, skey string) note.Signer {
	t.Helper()
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The checkpoint and its keys are golang.org/x/mod/sumdb/note's formats,
// both ways.
func TestCheckpoint_NoteCompatible(t *testing.T) {
	k := newKey(t)
	c := audit.Checkpoint{Size: 7, Hash: sha256.Sum256([]byte("seven"))}

	// Ours, read by note.
	n, err := note.Open(k.Sign(c), note.VerifierList(xVerifier(t, k.Verifier().String())))
	if err != nil {
		t.Fatalf("note.Open: %v", err)
	}
	if n.Text != string(c.Text()) {
		t.Fatalf("note text %q", n.Text)
	}
	s := xSigner(t, k.Encode())
	if s.Name() != "toolgate-audit" || !strings.Contains(k.Verifier().String(), "+"+hex8(s.KeyHash())+"+") {
		t.Fatalf("note reads the key as %s+%08x", s.Name(), s.KeyHash())
	}

	// note's, read by ours.
	skey, vkey, err := note.GenerateKey(rand.Reader, "someone")
	if err != nil {
		t.Fatal(err)
	}
	sk, err := audit.ParseSigningKey(skey)
	if err != nil {
		t.Fatal(err)
	}
	if sk.Encode() != skey || sk.Verifier().String() != vkey {
		t.Fatalf("key round trip: %s %s\nwant %s %s", sk.Encode(), sk.Verifier(), skey, vkey)
	}
	msg, err := note.Sign(&note.Note{Text: string(c.Text())}, xSigner(t, skey))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(msg, sk.Sign(c)) { // ed25519 signatures are deterministic
		t.Fatalf("note.Sign and Sign differ:\n%s\n%s", msg, sk.Sign(c))
	}
	if got, err := mustVerifier(t, vkey).Open(msg); err != nil || got != c {
		t.Fatalf("Open(note.Sign) = %+v, %v", got, err)
	}
}

func hex8(h uint32) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 8)
	for i := 7; i >= 0; i-- {
		b[i] = digits[h&0xf]
		h >>= 4
	}
	return string(b)
}

func TestCheckpoint_Keys(t *testing.T) {
	k := newKey(t)
	back, err := audit.ParseSigningKey(k.Encode())
	if err != nil || back.Encode() != k.Encode() || back.Verifier().String() != k.Verifier().String() {
		t.Fatalf("ParseSigningKey(Encode()) = %v, %v", back, err)
	}
	for _, name := range []string{"", "two words", "a+b", "tab\there", "\xff"} {
		if _, err := audit.GenerateSigningKey(rand.Reader, name); err == nil {
			t.Errorf("GenerateSigningKey(%q) accepted", name)
		}
	}
	enc := k.Encode()
	vk := k.Verifier().String()
	for _, bad := range []string{
		"", enc[len("PRIVATE+KEY+"):], strings.Replace(enc, "toolgate-audit", "toolgate-other", 1), // hash no longer matches
		enc[:len(enc)-4], vk, enc + "x",
	} {
		if _, err := audit.ParseSigningKey(bad); err == nil {
			t.Errorf("ParseSigningKey(%q) accepted", bad)
		}
	}
	for _, bad := range []string{
		"", enc, strings.Replace(vk, "toolgate-audit", "toolgate-other", 1), vk[:len(vk)-4], "a+b+c", "name+1234567+AQ==",
	} {
		if _, err := audit.ParseVerifierKey(bad); err == nil {
			t.Errorf("ParseVerifierKey(%q) accepted", bad)
		}
	}
}

// Open says why it refuses a note, and tolerates what the signed-note format
// allows: a short signature by another key.
func TestCheckpoint_OpenSaysWhy(t *testing.T) {
	k := newKey(t)
	c := audit.Checkpoint{Size: 7, Hash: sha256.Sum256([]byte("head"))}
	msg := k.Sign(c)
	line := func(name string, n int) string {
		return "— " + name + " " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, n)) + "\n"
	}
	many := string(msg)
	for range 100 {
		many += line("other", 8)
	}
	for _, tc := range []struct {
		name, note, want string // want "": opens
	}{
		{"control character", strings.Replace(string(msg), "toolgate", "tool\x01gate", 1), "control character or invalid UTF-8 at byte"},
		{"invalid UTF-8", string(msg) + "\xff", "control character or invalid UTF-8 at byte"},
		{"101 signature lines", many, "malformed signature line"},
		{"a key name beginning with a space", string(msg) + line("\u00a0other", 8), "malformed signature line"},
		{"nothing before the signatures", "\n\n— x y\n", "malformed signature line"},
		{"another key's signature of 5 bytes", string(msg) + line("other", 5), ""},
	} {
		got, err := k.Verifier().Open([]byte(tc.note))
		switch {
		case tc.want == "" && (err != nil || got != c):
			t.Errorf("%s: Open = %+v, %v; want it to open", tc.name, got, err)
		case tc.want != "" && (!errors.Is(err, audit.ErrCheckpoint) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: Open = %v; want ErrCheckpoint saying %q", tc.name, err, tc.want)
		}
	}
}
