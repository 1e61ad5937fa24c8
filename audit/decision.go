package audit

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// Signed decisions.
//
// The chain proves that the log is consistent, not who wrote it: whoever can
// write the database can append a well-formed approval. A decision signed
// with a key that the database's writer does not hold, and that the
// operator lists (the policy's approval keys), proves its author.

// ErrUnsigned is returned by [VerifyDecision] for a decision that carries no
// signature.
var ErrUnsigned = errors.New("audit: the decision is not signed")

// ErrDecisionSignature is wrapped by every error [VerifyDecision] returns
// for a signature that is malformed or does not verify.
var ErrDecisionSignature = errors.New("audit: invalid decision signature")

// DecisionOrigin is the first line of a [DecisionStatement].
const DecisionOrigin = "toolgate intent decision"

// DecisionStatement returns the text that the signature of an intent's
// decision covers: every field of its event that says what was decided, on
// what, by whom and when:
//
//	toolgate intent decision
//	<intent id>
//	<intent hash>
//	<action: approved or rejected>
//	<userId: who decided>
//	<timestamp, Unix milliseconds>
//	<via, or empty>
//	<hex SHA-256 of the reason>
//
// The fields are single lines (ids, hashes, principals and via words hold
// no newline: [DecisionStatement] refuses one that does); the reason, which
// may span lines, is hashed.
func DecisionStatement(e *Event) ([]byte, error) {
	in := e.Intent
	if in == nil || (in.Action != IntentApproved && in.Action != IntentRejected) {
		return nil, fmt.Errorf("%w: the event is not an intent's decision", ErrDecisionSignature)
	}
	for _, f := range []string{in.ID, in.Hash, in.Action, e.UserID, in.Via} {
		for i := range len(f) {
			if f[i] == '\n' || f[i] == '\r' {
				return nil, fmt.Errorf("%w: a field holds a line break", ErrDecisionSignature)
			}
		}
	}
	reason := sha256.Sum256([]byte(in.Reason))
	b := make([]byte, 0, 256)
	b = append(b, DecisionOrigin+"\n"...)
	for _, f := range []string{in.ID, in.Hash, in.Action, e.UserID, strconv.FormatInt(e.Timestamp, 10), in.Via, hex.EncodeToString(reason[:])} {
		b = append(b, f...)
		b = append(b, '\n')
	}
	return b, nil
}

// SignDecision signs the decision e records (an intent's approval or
// rejection) with k: it sets e.Intent.Signer to k's verifier key and
// e.Intent.Signature to the signature of e's [DecisionStatement].
func (k *SigningKey) SignDecision(e *Event) error {
	text, err := DecisionStatement(e)
	if err != nil {
		return err
	}
	e.Intent.Signer = k.Verifier().String()
	e.Intent.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(k.key, text))
	return nil
}

// VerifyDecision checks the signature of the decision e records and
// returns the key that made it. An unsigned decision returns
// [ErrUnsigned]; a malformed signer or signature, or one that does not
// verify (the event was changed after it was signed, or the signature
// forged), an error wrapping [ErrDecisionSignature]. Whether the key may
// sign for e's userId is the caller's to decide.
func VerifyDecision(e *Event) (*VerifierKey, error) {
	if e.Intent == nil || e.Intent.Signer == "" && e.Intent.Signature == "" {
		return nil, ErrUnsigned
	}
	text, err := DecisionStatement(e)
	if err != nil {
		return nil, err
	}
	k, err := ParseVerifierKey(e.Intent.Signer)
	if err != nil {
		return nil, fmt.Errorf("%w: signer: %v", ErrDecisionSignature, err)
	}
	sig, err := base64.StdEncoding.DecodeString(e.Intent.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, fmt.Errorf("%w: the signature is not %d bytes of base64", ErrDecisionSignature, ed25519.SignatureSize)
	}
	if !ed25519.Verify(k.key, text, sig) {
		return nil, fmt.Errorf("%w: the signature by key %s+%08x does not verify: the decision was altered or its signature forged", ErrDecisionSignature, k.name, k.hash)
	}
	return k, nil
}

// Equal reports whether k and o are the same key (name and public key).
func (k *VerifierKey) Equal(o *VerifierKey) bool {
	return k != nil && o != nil && k.name == o.name && k.hash == o.hash && k.key.Equal(o.key)
}

// Name returns the key's name.
func (k *VerifierKey) Name() string { return k.name }
