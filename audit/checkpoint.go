package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// CheckpointOrigin is the first line of a checkpoint's text: it names what
// the checkpoint is about.
const CheckpointOrigin = "toolgate audit log"

// ErrCheckpoint is wrapped by every error about a checkpoint that is
// malformed or whose signature does not verify with the given key.
var ErrCheckpoint = errors.New("audit: invalid checkpoint")

// Checkpoint is a statement of the head of an audit log at some moment: how
// many events it held and the chain hash of the last one ([ChainHash]).
// A later log extends it when its event Size has that hash: the chain then
// proves that events 1 to Size are unchanged, and a log with fewer events
// was truncated. Kept signed and outside the database, it is what detects
// truncation and a log rewritten with every hash recomputed (see
// [Verifier]).
//
// Its signed form is a signed note, the format of golang.org/x/mod/sumdb/note
// (readable by that package's Open): the text
//
//	toolgate audit log
//	<size, in decimal>
//	<hash, in standard base64>
//
// then a blank line and one signature line per key, "— <key name>
// <base64 of the 4-byte key hash and the ed25519 signature of the text>".
type Checkpoint struct {
	Size uint64   // the number of events
	Hash [32]byte // the hash of event Size; zero when Size is 0
}

// Text returns the checkpoint's text, the part its signature covers.
func (c Checkpoint) Text() []byte {
	return fmt.Appendf(nil, "%s\n%d\n%s\n", CheckpointOrigin, c.Size, base64.StdEncoding.EncodeToString(c.Hash[:]))
}

// ParseCheckpoint parses a checkpoint's text (not its signed form: see
// [VerifierKey.Open]).
func ParseCheckpoint(text []byte) (Checkpoint, error) {
	var c Checkpoint
	lines := strings.Split(string(text), "\n")
	if len(lines) != 4 || lines[3] != "" {
		return c, fmt.Errorf("%w: the text is not three lines", ErrCheckpoint)
	}
	if lines[0] != CheckpointOrigin {
		return c, fmt.Errorf("%w: it is about %q, not the %s", ErrCheckpoint, lines[0], CheckpointOrigin)
	}
	size, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil || strconv.FormatUint(size, 10) != lines[1] {
		return c, fmt.Errorf("%w: bad size %q", ErrCheckpoint, lines[1])
	}
	hash, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(hash) != len(c.Hash) {
		return c, fmt.Errorf("%w: bad hash %q", ErrCheckpoint, lines[2])
	}
	c.Size = size
	copy(c.Hash[:], hash)
	if size == 0 && c.Hash != ([32]byte{}) {
		return c, fmt.Errorf("%w: an empty log has no hash", ErrCheckpoint)
	}
	return c, nil
}

// algEd25519 is the signed-note algorithm byte of an ed25519 key.
const algEd25519 = 1

// SigningKey is an ed25519 key that signs checkpoints, in the key format of
// golang.org/x/mod/sumdb/note: a name, and a 4-byte hash of the name and the
// public key that identifies the key in signatures.
type SigningKey struct {
	name string
	hash uint32
	key  ed25519.PrivateKey
}

// VerifierKey is the public half of a [SigningKey]: it checks checkpoints.
type VerifierKey struct {
	name string
	hash uint32
	key  ed25519.PublicKey
}

// GenerateSigningKey returns a new key with the given name (non-empty, no
// spaces or '+'), from the random source rand (crypto/rand.Reader).
func GenerateSigningKey(rand io.Reader, name string) (*SigningKey, error) {
	if !validKeyName(name) {
		return nil, fmt.Errorf("audit: invalid key name %q", name)
	}
	_, priv, err := ed25519.GenerateKey(rand)
	if err != nil {
		return nil, fmt.Errorf("audit: generating a key: %w", err)
	}
	return newSigningKey(name, priv), nil
}

func newSigningKey(name string, priv ed25519.PrivateKey) *SigningKey {
	return &SigningKey{name: name, hash: keyHash(name, priv.Public().(ed25519.PublicKey)), key: priv}
}

// ParseSigningKey parses a key in its encoded form ([SigningKey.Encode]):
// "PRIVATE+KEY+<name>+<hash>+<base64 of 0x01 and the 32-byte seed>".
func ParseSigningKey(s string) (*SigningKey, error) {
	rest, ok := strings.CutPrefix(s, "PRIVATE+KEY+")
	name, hash, key, err := parseKey(rest, ed25519.SeedSize, ok)
	if err != nil {
		return nil, fmt.Errorf("audit: malformed signing key: %w", err)
	}
	k := newSigningKey(name, ed25519.NewKeyFromSeed(key))
	if k.hash != hash {
		return nil, errors.New("audit: malformed signing key: its hash does not match its name and key")
	}
	return k, nil
}

// ParseVerifierKey parses a verifier key ([VerifierKey.String]):
// "<name>+<hash>+<base64 of 0x01 and the 32-byte public key>".
func ParseVerifierKey(s string) (*VerifierKey, error) {
	name, hash, key, err := parseKey(s, ed25519.PublicKeySize, true)
	if err != nil {
		return nil, fmt.Errorf("audit: malformed verifier key: %w", err)
	}
	if keyHash(name, key) != hash {
		return nil, errors.New("audit: malformed verifier key: its hash does not match its name and key")
	}
	return &VerifierKey{name: name, hash: hash, key: key}, nil
}

// parseKey parses "<name>+<hash>+<base64 of 0x01 and size bytes>".
func parseKey(s string, size int, ok bool) (name string, hash uint32, key []byte, err error) {
	name, rest, ok1 := strings.Cut(s, "+")
	hash16, key64, ok2 := strings.Cut(rest, "+")
	h, err1 := strconv.ParseUint(hash16, 16, 32)
	b, err2 := base64.StdEncoding.DecodeString(key64)
	switch {
	case !ok || !ok1 || !ok2 || !validKeyName(name) || len(hash16) != 8 || err1 != nil || err2 != nil:
		return "", 0, nil, errors.New("not of the form name+hash+key")
	case len(b) != 1+size || b[0] != algEd25519:
		return "", 0, nil, errors.New("not an ed25519 key")
	}
	return name, uint32(h), b[1:], nil
}

// Encode returns the key's encoded form, which [ParseSigningKey] reads.
// It is the private key: keep it secret.
func (k *SigningKey) Encode() string {
	return fmt.Sprintf("PRIVATE+KEY+%s+%08x+%s", k.name, k.hash, base64.StdEncoding.EncodeToString(append([]byte{algEd25519}, k.key.Seed()...)))
}

// Verifier returns the key's public half.
func (k *SigningKey) Verifier() *VerifierKey {
	return &VerifierKey{name: k.name, hash: k.hash, key: k.key.Public().(ed25519.PublicKey)}
}

// Sign returns the checkpoint in its signed form, signed by k.
func (k *SigningKey) Sign(c Checkpoint) []byte {
	text := c.Text()
	sig := binary.BigEndian.AppendUint32(make([]byte, 0, 4+ed25519.SignatureSize), k.hash)
	sig = append(sig, ed25519.Sign(k.key, text)...)
	msg := append(text, '\n')
	msg = append(msg, sigPrefix...)
	msg = append(msg, k.name...)
	msg = append(msg, ' ')
	msg = base64.StdEncoding.AppendEncode(msg, sig)
	return append(msg, '\n')
}

// String returns the verifier key's encoded form, which
// [ParseVerifierKey] reads (and golang.org/x/mod/sumdb/note.NewVerifier).
func (k *VerifierKey) String() string {
	return fmt.Sprintf("%s+%08x+%s", k.name, k.hash, base64.StdEncoding.EncodeToString(append([]byte{algEd25519}, k.key...)))
}

const (
	sigPrefix = "— "
	maxSigs   = 100
)

// Open checks that msg, a signed checkpoint, carries a valid signature by
// k, and returns the checkpoint. Signatures by other keys are ignored. It
// fails, with an error wrapping [ErrCheckpoint], on a malformed note, a note
// that k did not sign, and a signature that does not verify: the note was
// forged or altered.
func (k *VerifierKey) Open(msg []byte) (Checkpoint, error) {
	for i := 0; i < len(msg); {
		r, size := utf8.DecodeRune(msg[i:])
		if r < 0x20 && r != '\n' || r == utf8.RuneError && size == 1 {
			return Checkpoint{}, fmt.Errorf("%w: not a signed note (control character or invalid UTF-8 at byte %d)", ErrCheckpoint, i)
		}
		i += size
	}
	split := bytes.LastIndex(msg, []byte("\n\n"))
	if split < 0 {
		return Checkpoint{}, fmt.Errorf("%w: not a signed note (no signature)", ErrCheckpoint)
	}
	text, sigs := msg[:split+1], msg[split+2:]
	if len(sigs) == 0 || sigs[len(sigs)-1] != '\n' {
		return Checkpoint{}, fmt.Errorf("%w: not a signed note (no signature)", ErrCheckpoint)
	}
	var others []string
	found := false
	for n := 0; len(sigs) > 0; n++ {
		i := bytes.IndexByte(sigs, '\n')
		line := string(sigs[:i])
		sigs = sigs[i+1:]
		rest, ok := strings.CutPrefix(line, sigPrefix)
		name, b64, _ := strings.Cut(rest, " ")
		sig, err := base64.StdEncoding.DecodeString(b64)
		if !ok || err != nil || !validKeyName(name) || len(sig) < 5 || n == maxSigs {
			return Checkpoint{}, fmt.Errorf("%w: malformed signature line %q", ErrCheckpoint, line)
		}
		hash := binary.BigEndian.Uint32(sig)
		if name != k.name || hash != k.hash {
			others = append(others, fmt.Sprintf("%s+%08x", name, hash))
			continue
		}
		if !ed25519.Verify(k.key, text, sig[4:]) {
			return Checkpoint{}, fmt.Errorf("%w: the signature by key %s+%08x does not verify: the checkpoint was altered or forged", ErrCheckpoint, k.name, k.hash)
		}
		found = true
	}
	if !found {
		return Checkpoint{}, fmt.Errorf("%w: not signed by key %s+%08x (signed by %s)", ErrCheckpoint, k.name, k.hash, strings.Join(others, ", "))
	}
	return ParseCheckpoint(text)
}

// keyHash is the signed-note key hash: the first 4 bytes of SHA-256 of the
// name, a newline, the algorithm byte and the public key.
func keyHash(name string, pub []byte) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{'\n', algEd25519})
	h.Write(pub)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

func validKeyName(name string) bool {
	return name != "" && utf8.ValidString(name) && strings.IndexFunc(name, unicode.IsSpace) < 0 && !strings.Contains(name, "+")
}
