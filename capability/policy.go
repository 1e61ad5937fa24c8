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
// non-empty and free of whitespace and control characters. Each grant is
// taken as [Parse] takes its String form (an absolute scope is cleaned, so
// {filesystem.read /srv//data/} is filesystem.read:/srv/data, as a policy
// file would have it), keeping its Place. Filesystem
// grants with absolute scopes are resolved now (see [Resolve]): a grant
// names the place its path leads to when the policy is built.
func NewPolicy(grants map[string][]Capability) (*Policy, error) {
	p := &Policy{grants: make(map[string][]Capability, len(grants))}
	for _, name := range slices.Sorted(maps.Keys(grants)) {
		if err := checkName("principal", name); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrPolicy, err)
		}
		gs := slices.Clone(grants[name])
		for i, g := range gs {
			c, err := Parse(g.String())
			if err != nil {
				return nil, fmt.Errorf("%w: principal %q: %v", ErrPolicy, name, strings.TrimPrefix(err.Error(), "capability: "))
			}
			c.Place = g.Place
			gs[i] = Resolve(c)
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
// approvalKeys is optional (see [Policy.ApprovalKeys]). Unknown fields (the
// three names are matched exactly: "Principals" is unknown, not another
// spelling), a field, principal or approver written twice, a version other
// than 1, an invalid principal name or capability and an approver listed
// without a key are errors that name the line and column. name labels the
// errors (a file name, or "" for none).
//
// A position is 1-based; its column counts bytes, as Go's tools do. An
// error about a principal, an approver, a grant or a key points at the first
// byte inside the quotes of the string as it is written in the file (the
// opening quote of "alice" is column 1 of `"alice"`, the position names
// column 2). A syntax error names the byte at fault, and a value of the
// wrong type the byte where reading it stopped: the opening bracket of a
// list or an object, the last byte of a string, number or literal. A field
// named twice or misspelt is reported before what decoding finds; then the
// principals are checked in the file's order, each grant in its order, and
// the first error is reported; then the approval keys, in the file's order.
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
	fail := func(off int64, format string, args ...any) error {
		line, col := position(data, off)
		if name == "" {
			return fmt.Errorf("%w: line %d column %d: %s", ErrPolicy, line, col, fmt.Sprintf(format, args...))
		}
		return fmt.Errorf("%w: %s:%d:%d: %s", ErrPolicy, name, line, col, fmt.Sprintf(format, args...))
	}
	at, bad := scan(data)
	if bad != nil {
		return nil, fail(bad.off, "%s", bad.msg)
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	var f policyFile
	if err := d.Decode(&f); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se): // Offset counts the bytes read: the one at fault is the last
			return nil, fail(se.Offset-1, "%v", err)
		case errors.As(err, &te): // after the value: its last byte
			return nil, fail(te.Offset-1, "%s", mustBe(te))
		case errors.Is(err, io.EOF):
			return nil, fmt.Errorf("%w: %s: empty; a policy is a JSON object such as {\"version\": 1, \"principals\": {}}", ErrPolicy, labelOr(name))
		}
		return nil, fail(d.InputOffset(), "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fail(d.InputOffset(), "unexpected data after the policy object")
	}
	if f.Version != 1 {
		return nil, fmt.Errorf("%w: %s: \"version\" must be 1, got %d", ErrPolicy, labelOr(name), f.Version)
	}
	grants := make(map[string][]Capability, len(f.Principals))
	for _, principal := range inFileOrder(at, "principals", f.Principals) {
		if err := checkName("principal", principal); err != nil {
			return nil, fail(at[spot{"principals", principal, -1}], "%v", err)
		}
		gs := make([]Capability, 0, len(f.Principals[principal]))
		for i, s := range f.Principals[principal] {
			c, err := Parse(s)
			if err == nil && check != nil {
				err = check(s)
			}
			if err != nil {
				return nil, fail(at[spot{"principals", principal, i}], "principal %q: %s", principal, strings.TrimPrefix(err.Error(), "capability: "))
			}
			gs = append(gs, c)
		}
		grants[principal] = gs
	}
	p, err := NewPolicy(grants)
	if err != nil {
		return nil, err
	}
	for _, approver := range inFileOrder(at, "approvalKeys", f.ApprovalKeys) {
		if i, err := checkApprovalKeys(approver, f.ApprovalKeys[approver]); err != nil {
			return nil, fail(at[spot{"approvalKeys", approver, i}], "approvalKeys: %v", err)
		}
	}
	if f.ApprovalKeys != nil {
		if p, err = p.WithApprovalKeys(f.ApprovalKeys); err != nil {
			return nil, err
		}
	}
	for _, g := range inFileOrder(at, "groups", f.Groups) {
		if err := checkName("group", g); err != nil {
			return nil, fail(at[spot{"groups", g, -1}], "%v", err)
		}
		for i, m := range f.Groups[g] {
			if err := checkName("principal", m); err != nil {
				return nil, fail(at[spot{"groups", g, i}], "group %q: %v", g, err)
			}
		}
	}
	if len(f.Cedar) == 0 && len(f.Groups) == 0 {
		return p, nil
	}
	if len(f.Cedar) == 0 {
		return nil, fail(at[spot{"groups", "", fieldKey}], "\"groups\" are for Cedar policies, and \"cedar\" names none")
	}
	files := make([]string, len(f.Cedar))
	for i, c := range f.Cedar {
		if c == "" {
			return nil, fail(at[spot{"cedar", "", i}], "an empty Cedar file name")
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

// maxApprovalKeys bounds the keys listed for one approver, and
// maxApprovalKey the length of one key, in bytes.
const (
	maxApprovalKeys = 64
	maxApprovalKey  = 512
)

// WithApprovalKeys returns a policy with p's grants that lists, for each
// approver, the keys whose signatures make its approvals count, "*" for
// keys that may sign for any approver (a server that authenticates its
// approvers itself). A key is a verifier key as `toolgate intent keygen`
// prints it (name+hash+key); its form is checked by the runtime that uses
// the policy. Here an approver must be "*" or a valid principal name and
// list 1 to 64 keys, each a word (no whitespace or control character) of at
// most 512 bytes; a key listed twice counts once. The approvers are checked
// in sorted order and the first error is returned. A nil or empty map lists
// none, and keeps the revision of the policy without keys.
func (p *Policy) WithApprovalKeys(keys map[string][]string) (*Policy, error) {
	q := &Policy{grants: p.grants, err: p.err, rules: p.rules}
	if len(keys) > 0 {
		q.approvalKeys = make(map[string][]string, len(keys))
	}
	for _, approver := range slices.Sorted(maps.Keys(keys)) {
		ks := keys[approver]
		if _, err := checkApprovalKeys(approver, ks); err != nil {
			return nil, fmt.Errorf("%w: approvalKeys: %v", ErrPolicy, err)
		}
		ks = slices.Clone(ks)
		slices.Sort(ks)
		q.approvalKeys[approver] = slices.Compact(ks)
	}
	q.revision = q.computeRevision()
	return q, nil
}

// checkApprovalKeys says what is wrong with the keys listed for approver,
// and which key is at fault (-1: the approver's entry as a whole).
func checkApprovalKeys(approver string, keys []string) (int, error) {
	if approver != "*" {
		if err := checkName("approver", approver); err != nil {
			return -1, err
		}
	}
	if len(keys) == 0 {
		return -1, fmt.Errorf("%q lists no key; remove it or list one", approver)
	}
	if len(keys) > maxApprovalKeys {
		return -1, fmt.Errorf("%q lists %d keys; at most %d", approver, len(keys), maxApprovalKeys)
	}
	for i, k := range keys {
		if k == "" || len(k) > maxApprovalKey || strings.ContainsFunc(k, spaceOrControl) {
			return i, fmt.Errorf("%q: %q is not a key (name+hash+key, as toolgate intent keygen prints it)", approver, k)
		}
	}
	return 0, nil
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

// checkName refuses a principal (or approver: kind) name that is empty or
// holds whitespace or control characters.
func checkName(kind, name string) error {
	if name == "" {
		return fmt.Errorf("empty %s name", kind)
	}
	if strings.ContainsFunc(name, spaceOrControl) {
		return fmt.Errorf("%s %q contains whitespace or control characters", kind, name)
	}
	return nil
}

func spaceOrControl(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }

func labelOr(name string) string {
	if name == "" {
		return "policy"
	}
	return name
}

// position turns a byte offset into a 1-based line and column; the column
// counts bytes.
func position(data []byte, off int64) (line, col int) {
	before := data[:min(max(off, 0), int64(len(data)))]
	line = bytes.Count(before, []byte("\n")) + 1
	col = len(before) - bytes.LastIndexByte(before, '\n')
	return line, col
}

// mustBe says what a value of the wrong type should have been, naming
// where it sits (encoding/json names the member, not the map key below it).
func mustBe(te *json.UnmarshalTypeError) string {
	kind := te.Type.Kind().String()
	if te.Field == "principals" && kind == "string" {
		return `each capability in "principals" must be a string`
	}
	if te.Field == "principals" && kind == "slice" {
		return `each principal in "principals" must have a list of capability strings`
	}
	if te.Field == "approvalKeys" && kind == "string" {
		return `each key in "approvalKeys" must be a string`
	}
	if te.Field == "approvalKeys" && kind == "slice" {
		return `each approver in "approvalKeys" must have a list of keys`
	}
	if te.Field == "version" {
		return `"version" must be 1`
	}
	if te.Field == "" {
		return "the policy must be an object"
	}
	return fmt.Sprintf("%q must be an object", te.Field)
}

// spot names a place in a policy file: the key of a member of its field
// "principals", "approvalKeys" or "groups" (item -1), or the item-th string
// of that member's list; the item-th file name of "cedar" (key ""); a
// field's own key (key "", item fieldKey).
type spot struct {
	field, key string
	item       int
}

// problem is what [scan] finds wrong, where.
type problem struct {
	off int64
	msg string
}

// policyFields are the members of a policy file, spelt as they must be.
var policyFields = []string{"version", "principals", "approvalKeys", "cedar", "groups"}

// fieldKey is the item of a spot that places a field's own key.
const fieldKey = -2

// scan walks the JSON of a policy file as it is written, before it is
// decoded, for what decoding does not tell: where each principal, approver,
// grant and key is written (the offset of its first byte after the quote),
// and the mistakes encoding/json would accept silently, each with its
// place: a member named twice (it keeps the last), and a field that is not
// spelt exactly as policyFields (it matches names ignoring case, so
// "Principals" after "principals" would replace its grants). It stops,
// reporting nothing more, at what is not valid JSON or not of the policy's
// shape: decoding reports that.
func scan(data []byte) (map[spot]int64, *problem) {
	at := map[spot]int64{}
	d := json.NewDecoder(bytes.NewReader(data))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return at, nil
	}
	seen := map[string]bool{}
	for d.More() {
		field, off, err := key(d, data)
		if err != nil {
			return at, nil
		}
		if !slices.Contains(policyFields, field) {
			return at, &problem{off, fmt.Sprintf("unknown field %q; a policy has \"version\", \"principals\", \"approvalKeys\", \"cedar\" and \"groups\"", field)}
		}
		if seen[field] {
			return at, &problem{off, fmt.Sprintf("%q is listed twice", field)}
		}
		seen[field] = true
		at[spot{field, "", fieldKey}] = off
		if field == "cedar" { // a list of file names
			if bad, err := scanList(d, data, field, at); bad != nil || err != nil {
				return at, bad
			}
			continue
		}
		if field == "version" {
			if err := d.Decode(new(json.RawMessage)); err != nil {
				return at, nil
			}
			continue
		}
		if bad, err := scanMembers(d, data, field, at); bad != nil || err != nil {
			return at, bad
		}
	}
	return at, nil
}

// scanMembers records the members of the object d is at, the value of
// field, in at. Its error stops the scan.
func scanMembers(d *json.Decoder, data []byte, field string, at map[spot]int64) (*problem, error) {
	tok, err := d.Token()
	if err != nil || tok == nil { // null: no members
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, errNotShaped
	}
	kind := map[string]string{"principals": "principal", "approvalKeys": "approver", "groups": "group"}[field]
	seen := map[string]bool{}
	for d.More() {
		k, off, err := key(d, data)
		if err != nil {
			return nil, err
		}
		if seen[k] {
			return &problem{off, fmt.Sprintf("%s %q is listed twice", kind, k)}, nil
		}
		seen[k] = true
		at[spot{field, k, -1}] = off
		tok, err := d.Token()
		if err != nil {
			return nil, err
		}
		if tok == nil { // null: no grants
			continue
		}
		if tok != json.Delim('[') {
			return nil, errNotShaped
		}
		for i := 0; d.More(); i++ {
			at[spot{field, k, i}] = stringAt(data, d.InputOffset())
			if err := d.Decode(new(json.RawMessage)); err != nil {
				return nil, err
			}
		}
		if _, err := d.Token(); err != nil {
			return nil, err
		}
	}
	_, err = d.Token()
	return nil, err
}

// scanList records the strings of the list d is at, the value of field,
// in at (spot{field, "", i}). Its error stops the scan.
func scanList(d *json.Decoder, data []byte, field string, at map[spot]int64) (*problem, error) {
	tok, err := d.Token()
	if err != nil || tok == nil {
		return nil, err
	}
	if tok != json.Delim('[') {
		return nil, errNotShaped
	}
	for i := 0; d.More(); i++ {
		at[spot{field, "", i}] = stringAt(data, d.InputOffset())
		if err := d.Decode(new(json.RawMessage)); err != nil {
			return nil, err
		}
	}
	_, err = d.Token()
	return nil, err
}

// errNotShaped stops a scan at a value decoding will refuse.
var errNotShaped = errors.New("not a policy's shape")

// key reads the key d is at, with the offset of its first byte after the
// quote.
func key(d *json.Decoder, data []byte) (string, int64, error) {
	from := d.InputOffset()
	tok, err := d.Token()
	k, _ := tok.(string)
	return k, stringAt(data, from), err
}

// stringAt is the offset of the first byte inside the next string at or
// after from: only whitespace, ':' and ',' lie between a token and the next.
func stringAt(data []byte, from int64) int64 {
	return from + int64(bytes.IndexByte(data[from:], '"')) + 1
}

// inFileOrder returns the keys of m in the order they are written in field
// (a key the scan did not place first, at offset 0).
func inFileOrder[V any](at map[spot]int64, field string, m map[string]V) []string {
	return slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		return cmp.Or(cmp.Compare(at[spot{field, a, -1}], at[spot{field, b, -1}]), strings.Compare(a, b))
	})
}
