package capability

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/toolgate/toolgate/internal/uuid"
	"github.com/toolgate/toolgate/rules"
)

// ErrPolicy is wrapped by every error loading or building a policy.
var ErrPolicy = errors.New("capability: invalid policy")

// Policy grants capabilities to principals. It denies by default: a
// principal it does not list holds nothing. A Policy is immutable once
// built, so one value may be shared by any number of goroutines.
//
// A policy that could not be loaded (see [LoadPolicy]) denies everything,
// to every principal, and says why in each decision.
type Policy struct {
	grants       map[string][]Capability
	approvalKeys map[string][]string // approver (or "*") -> verifier keys
	revision     string
	err          error      // the load failure of a deny-all policy
	rules        *rules.Set // the Cedar policies over a call's arguments, if any
}

// NewPolicy builds a policy from a Go value: each principal and the
// capabilities it holds. The map is copied. Principal names must be
// non-empty and free of whitespace and control characters. Filesystem
// grants with absolute scopes are resolved now (see [Resolve]): a grant
// names the place its path leads to when the policy is built.
func NewPolicy(grants map[string][]Capability) (*Policy, error) {
	p := &Policy{grants: make(map[string][]Capability, len(grants))}
	for _, name := range slices.Sorted(maps.Keys(grants)) {
		if err := checkPrincipal(name); err != nil {
			return nil, err
		}
		gs := slices.Clone(grants[name])
		for i, g := range gs {
			if _, err := Parse(g.String()); err != nil {
				return nil, fmt.Errorf("%w: principal %q: %v", ErrPolicy, name, err)
			}
			gs[i] = Resolve(g)
		}
		slices.SortFunc(gs, func(a, b Capability) int { return strings.Compare(a.String(), b.String()) })
		p.grants[name] = slices.Compact(gs)
	}
	p.revision = p.computeRevision()
	return p, nil
}

// DenyAll returns a policy that denies everything to everyone, carrying
// the reason: what a runtime uses when its policy cannot be read.
func DenyAll(reason error) *Policy {
	if reason == nil {
		reason = errors.New("no policy")
	}
	sum := sha256.Sum256([]byte("deny-all\x00" + reason.Error()))
	return &Policy{grants: map[string][]Capability{}, revision: "sha256:" + hex.EncodeToString(sum[:]), err: reason}
}

// policyFile is the JSON form of a policy file.
type policyFile struct {
	// Version is the file format, 1.
	Version int `json:"version"`
	// Principals maps each principal to the capabilities it holds.
	Principals map[string][]string `json:"principals"`
	// ApprovalKeys maps approvers to the keys whose signatures make their
	// approvals count (see [Policy.ApprovalKeys]).
	ApprovalKeys map[string][]string `json:"approvalKeys"`
	// Cedar names the files of Cedar policies over a call's arguments
	// (package rules), relative to the policy file's directory.
	Cedar []string `json:"cedar"`
	// Groups maps each group to its member principals: Cedar policies see
	// them as Toolgate::Group entities, and @approval("GROUP") lets only
	// its members approve.
	Groups map[string][]string `json:"groups"`
}

// ParsePolicy parses the JSON form of a policy:
//
//	{
//	  "version": 1,
//	  "principals": {
//	    "alice":  ["filesystem.read:/srv/data", "state.write:orders"],
//	    "ci-bot": ["process.exec:git"]
//	  },
//	  "approvalKeys": {
//	    "alice": ["alice+5c3e1a9b+AXt0...="],
//	    "*":     ["toolgate-serve+0f2d4b6a+ATq8...="]
//	  }
//	}
//
// approvalKeys is optional (see [Policy.ApprovalKeys]). Unknown fields, a
// version other than 1, a duplicate principal, an invalid capability and
// an approver listed without a key are errors that name the line and
// column. name labels the errors (a file name, or "" for none).
func ParsePolicy(name string, data []byte) (*Policy, error) {
	return ParsePolicyChecked(name, data, nil)
}

// ParsePolicyChecked is [ParsePolicy] with each grant also checked, as it
// is written, by check (nil: none): an error of check is reported as a
// grant that does not parse is, with the file, line and column of the
// grant. A program that knows which capabilities mean something to it
// refuses the others here (toolgate refuses the names no tool requires,
// and '*', as its --allow does), so that a typo in a policy is an error,
// not a grant that never matches.
func ParsePolicyChecked(name string, data []byte, check func(grant string) error) (*Policy, error) {
	where := func(off int64) string {
		line, col := position(data, off)
		if name == "" {
			return fmt.Sprintf("line %d column %d", line, col)
		}
		return fmt.Sprintf("%s:%d:%d", name, line, col)
	}
	if err := checkDuplicates(data); err != nil {
		var de *dupError
		if errors.As(err, &de) {
			return nil, fmt.Errorf("%w: %s: principal %q is listed twice", ErrPolicy, where(de.off), de.key)
		}
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	var f policyFile
	if err := d.Decode(&f); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return nil, fmt.Errorf("%w: %s: %v", ErrPolicy, where(se.Offset), err)
		case errors.As(err, &te):
			return nil, fmt.Errorf("%w: %s: %s", ErrPolicy, where(te.Offset), mustBe(te))
		case errors.Is(err, io.EOF):
			return nil, fmt.Errorf("%w: %s: empty; a policy is a JSON object such as {\"version\": 1, \"principals\": {}}", ErrPolicy, labelOr(name))
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrPolicy, where(d.InputOffset()), strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: %s: unexpected data after the policy object", ErrPolicy, where(d.InputOffset()))
	}
	if f.Version != 1 {
		return nil, fmt.Errorf("%w: %s: \"version\" must be 1, got %d", ErrPolicy, labelOr(name), f.Version)
	}
	grants := make(map[string][]Capability, len(f.Principals))
	principals := slices.SortedFunc(maps.Keys(f.Principals), func(a, b string) int { // in the file's order: the first error is reported
		return cmp.Compare(offsetOfKey(data, a), offsetOfKey(data, b))
	})
	for _, principal := range principals {
		caps := f.Principals[principal]
		off := offsetOfKey(data, principal)
		if err := checkPrincipal(principal); err != nil {
			return nil, fmt.Errorf("%s: %w", where(off), err)
		}
		gs := make([]Capability, 0, len(caps))
		at := off
		for _, s := range caps {
			// The grant's own position: its string, after the principal's
			// key and the grants before it.
			if i := bytes.Index(data[min(at, int64(len(data))):], mustQuote(s)); i >= 0 {
				at += int64(i) + 1
			}
			c, err := Parse(s)
			if err == nil && check != nil {
				err = check(s)
			}
			if err != nil {
				return nil, fmt.Errorf("%w: %s: principal %q: %v", ErrPolicy, where(at), principal, strings.TrimPrefix(err.Error(), "capability: "))
			}
			gs = append(gs, c)
		}
		grants[principal] = gs
	}
	p, err := NewPolicy(grants)
	if err != nil {
		return nil, err
	}
	if f.ApprovalKeys != nil {
		for approver := range f.ApprovalKeys {
			if err := checkApprovalKeys(approver, f.ApprovalKeys[approver]); err != nil {
				return nil, fmt.Errorf("%s: %w", where(offsetOfKey(data, approver)), err)
			}
		}
		if p, err = p.WithApprovalKeys(f.ApprovalKeys); err != nil {
			return nil, err
		}
	}
	for _, g := range slices.Sorted(maps.Keys(f.Groups)) {
		if err := checkPrincipal(g); err != nil {
			return nil, fmt.Errorf("%s: group: %w", where(offsetOfKey(data, g)), err)
		}
		for _, m := range f.Groups[g] {
			if err := checkPrincipal(m); err != nil {
				return nil, fmt.Errorf("%s: group %q: %w", where(offsetOfKey(data, g)), g, err)
			}
		}
	}
	if len(f.Cedar) == 0 && len(f.Groups) == 0 {
		return p, nil
	}
	if len(f.Cedar) == 0 {
		return nil, fmt.Errorf("%w: %s: \"groups\" are for Cedar policies, and \"cedar\" names none", ErrPolicy, where(offsetOfKey(data, "groups")))
	}
	files := make([]string, len(f.Cedar))
	for i, c := range f.Cedar {
		if c == "" {
			return nil, fmt.Errorf("%w: %s: an empty Cedar file name", ErrPolicy, where(offsetOfKey(data, "cedar")))
		}
		files[i] = c
		if !filepath.IsAbs(c) && name != "" {
			files[i] = filepath.Join(filepath.Dir(name), c)
		}
	}
	set, err := rules.Load(files, f.Groups)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPolicy, err)
	}
	return p.WithRules(set), nil
}

// WithRules returns a policy with p's grants and approval keys whose
// calls are also decided by set, Cedar policies over a call's arguments
// (nil: none). Its revision covers set's.
func (p *Policy) WithRules(set *rules.Set) *Policy {
	q := *p
	q.rules = set
	q.revision = q.computeRevision()
	return &q
}

// Rules returns the policy's Cedar policies over a call's arguments, or
// nil when it has none. A call must be granted its capabilities by the
// policy and not be forbidden by them (see package rules).
func (p *Policy) Rules() *rules.Set { return p.rules }

// maxApprovalKeys bounds the keys listed for one approver.
const maxApprovalKeys = 64

// WithApprovalKeys returns a policy with p's grants that lists, for each
// approver, the keys whose signatures make its approvals count, "*" for
// keys that may sign for any approver (a server that authenticates its
// approvers itself). A key is a verifier key as `toolgate intent keygen`
// prints it (name+hash+key); its form is checked by the runtime that uses
// the policy. A nil or empty map lists none.
func (p *Policy) WithApprovalKeys(keys map[string][]string) (*Policy, error) {
	q := &Policy{grants: p.grants, err: p.err, rules: p.rules}
	if len(keys) > 0 {
		q.approvalKeys = make(map[string][]string, len(keys))
	}
	for approver, ks := range keys {
		if err := checkApprovalKeys(approver, ks); err != nil {
			return nil, err
		}
		ks = slices.Clone(ks)
		slices.Sort(ks)
		q.approvalKeys[approver] = slices.Compact(ks)
	}
	q.revision = q.computeRevision()
	return q, nil
}

func checkApprovalKeys(approver string, keys []string) error {
	if approver != "*" {
		if err := checkPrincipal(approver); err != nil {
			return err
		}
	}
	switch {
	case len(keys) == 0:
		return fmt.Errorf("%w: approvalKeys: %q lists no key; remove it or list one", ErrPolicy, approver)
	case len(keys) > maxApprovalKeys:
		return fmt.Errorf("%w: approvalKeys: %q lists %d keys; at most %d", ErrPolicy, approver, len(keys), maxApprovalKeys)
	}
	for _, k := range keys {
		if k == "" || len(k) > 512 || strings.IndexFunc(k, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
			return fmt.Errorf("%w: approvalKeys: %q: %q is not a key (name+hash+key, as toolgate intent keygen prints it)", ErrPolicy, approver, k)
		}
	}
	return nil
}

// ApprovalKeys returns the keys the policy lists for signing approvals:
// approver (or "*", any approver) to its verifier keys. When it lists any,
// an approval counts only if it is signed by a key listed for its
// approver or under "*": whoever can write the database, but holds none
// of those keys, cannot record an approval that runs. Nil when it lists
// none.
func (p *Policy) ApprovalKeys() map[string][]string {
	if p.approvalKeys == nil {
		return nil
	}
	out := make(map[string][]string, len(p.approvalKeys))
	for a, ks := range p.approvalKeys {
		out[a] = slices.Clone(ks)
	}
	return out
}

// LoadPolicy reads and parses the policy file at path. On any error it
// returns, with the error, a policy that denies everything (see
// [DenyAll]), so a caller that goes on regardless still fails closed.
func LoadPolicy(path string) (*Policy, error) { return LoadPolicyChecked(path, nil) }

// LoadPolicyChecked is [LoadPolicy] with each grant also checked by check
// (see [ParsePolicyChecked]).
func LoadPolicyChecked(path string, check func(grant string) error) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrPolicy, err)
		return DenyAll(err), err
	}
	p, err := ParsePolicyChecked(path, data, check)
	if err != nil {
		return DenyAll(err), err
	}
	return p, nil
}

// Revision identifies the policy's content: "sha256:" and the hex SHA-256
// of its canonical form (principals and their grants, sorted), so the same
// grants have the same revision whether they came from a file or a Go
// value, and any change to them changes it. A grant resolved to a place
// other than its scope (see [Resolve]) counts with its place, so the same
// file naming other places has another revision.
func (p *Policy) Revision() string { return p.revision }

// Err returns why a deny-all policy denies everything, or nil.
func (p *Policy) Err() error { return p.err }

// Principals returns the principals the policy lists, sorted.
func (p *Policy) Principals() []string { return slices.Sorted(maps.Keys(p.grants)) }

// Grants returns a copy of what principal holds (nil for an unknown one).
func (p *Policy) Grants(principal string) []Capability { return slices.Clone(p.grants[principal]) }

// Decide authorizes principal to run tool: every requirement must be
// covered by a grant of the policy or by one of extra (grants given for
// this decision only, such as the CLI's --allow; they are made now, so
// their places are resolved now, see [Resolve]). The decision carries a
// new id, the policy's revision and the time. A deny-all policy denies
// everything, even a tool that requires nothing.
func (p *Policy) Decide(principal, tool string, required, extra []Capability, at time.Time) Decision {
	return p.DecideIn("", principal, tool, required, extra, at)
}

// DecideIn is Decide for a caller whose relative paths are taken from the
// directory workDir (a runtime's working directory): a grant with a
// relative filesystem scope (filesystem.read:data, which the tools' handles
// join to the working directory) meets a requirement scoped by an absolute
// path below workDir/data. workDir "" is Decide.
func (p *Policy) DecideIn(workDir, principal, tool string, required, extra []Capability, at time.Time) Decision {
	var d Decision
	if p.err != nil {
		d = Decision{Principal: principal, Tool: tool, Required: slices.Clone(required), Missing: slices.Clone(required), At: at}
		d.Reason = "policy unavailable: " + strings.TrimPrefix(p.err.Error(), "capability: ")
	} else {
		d = authorize(workDir, principal, tool, required, slices.Concat(p.grants[principal], ResolveAll(extra)), at)
	}
	d.ID = uuid.New()
	d.PolicyRevision = p.revision
	return d
}

func (p *Policy) computeRevision() string {
	canon := make(map[string][]string, len(p.grants))
	for name, gs := range p.grants {
		canon[name] = Strings(gs) // already sorted and compacted
		for i, g := range gs {
			if g.Place != "" {
				canon[name][i] += " => " + g.Place
			}
		}
	}
	b, _ := json.Marshal(canon) // map keys are sorted by encoding/json; strings cannot fail
	if p.approvalKeys != nil {
		// Only when there are any: a policy without keys keeps the
		// revision it had before approval keys existed.
		k, _ := json.Marshal(p.approvalKeys)
		b = append(append(b, "\x00approvalKeys"...), k...)
	}
	if p.rules != nil {
		// Likewise only when there are any.
		b = append(append(b, "\x00cedar"...), p.rules.Revision()...)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func checkPrincipal(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty principal name", ErrPolicy)
	}
	if strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return fmt.Errorf("%w: principal %q contains whitespace or control characters", ErrPolicy, name)
	}
	return nil
}

func labelOr(name string) string {
	if name == "" {
		return "policy"
	}
	return name
}

// position turns a byte offset into a 1-based line and column.
func position(data []byte, off int64) (line, col int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	if off < 0 {
		off = 0
	}
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off) - bytes.LastIndexByte(before, '\n')
	return line, col
}

// mustBe says what a value of the wrong type should have been, naming
// where it sits (encoding/json names the member, not the map key below it).
func mustBe(te *json.UnmarshalTypeError) string {
	kind := te.Type.Kind().String()
	switch {
	case te.Field == "principals" && kind == "string":
		return `each capability in "principals" must be a string`
	case te.Field == "principals" && kind == "slice":
		return `each principal in "principals" must have a list of capability strings`
	case te.Field == "approvalKeys" && kind == "string":
		return `each key in "approvalKeys" must be a string`
	case te.Field == "approvalKeys" && kind == "slice":
		return `each approver in "approvalKeys" must have a list of keys`
	}
	return fieldName(te) + " must be " + expected(te)
}

func fieldName(te *json.UnmarshalTypeError) string {
	if te.Field == "" {
		return "the policy"
	}
	return fmt.Sprintf("%q", te.Field)
}

func expected(te *json.UnmarshalTypeError) string {
	switch te.Type.Kind().String() {
	case "map", "struct":
		return "an object"
	case "slice":
		return "a list of capability strings"
	case "string":
		return "a string"
	case "int":
		return "a number"
	}
	return te.Type.String()
}

func mustQuote(s string) []byte {
	b, _ := json.Marshal(s) // a string cannot fail
	return b
}

// offsetOfKey finds where principal's key is written in the principals
// object, for error positions; 0 when it cannot tell.
func offsetOfKey(data []byte, key string) int64 {
	quoted, _ := json.Marshal(key)
	if i := bytes.Index(data, quoted); i >= 0 {
		return int64(i + 1)
	}
	return 0
}

type dupError struct {
	key string
	off int64
}

func (e *dupError) Error() string { return "duplicate key " + e.key }

// checkDuplicates refuses a principals object that names a principal
// twice: encoding/json would silently keep the last one.
func checkDuplicates(data []byte) error {
	d := json.NewDecoder(bytes.NewReader(data))
	var walk func(depth int, inPrincipals bool) error
	walk = func(depth int, inPrincipals bool) error {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		delim, ok := tok.(json.Delim)
		if !ok {
			return nil
		}
		switch delim {
		case '{':
			seen := map[string]bool{}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return err
				}
				k, _ := kt.(string)
				if inPrincipals && seen[k] {
					quoted, _ := json.Marshal(k)
					return &dupError{key: k, off: d.InputOffset() - int64(len(quoted))}
				}
				seen[k] = true
				if err := walk(depth+1, depth == 0 && (k == "principals" || k == "approvalKeys")); err != nil {
					return err
				}
			}
			_, err = d.Token()
			return err
		case '[':
			for d.More() {
				if err := walk(depth+1, false); err != nil {
					return err
				}
			}
			_, err = d.Token()
			return err
		}
		return nil
	}
	return walk(0, false)
}
