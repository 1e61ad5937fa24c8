// Package rules holds policies over a call's arguments, written in Cedar
// (github.com/cedar-policy/cedar-go): rules such as "refunds over 100 need
// a person" or "this principal may run kubectl get, never kubectl delete",
// which capability grants cannot say.
//
// A call is a Cedar request:
//
//   - principal: Toolgate::Principal::"NAME", with the attributes scopes
//     (a set of strings: the OAuth token's scopes, empty without one) and
//     claims (a record: each grant claim of the token to the set of its
//     values), and as parents the groups (Toolgate::Group::"G") the JSON
//     policy puts it in;
//   - action: Toolgate::Action::"TOOL@VERSION", one per tool version, whose
//     parent is Toolgate::Action::"TOOL" (so `action in
//     Toolgate::Action::"git.push"` matches every version);
//   - resource: Toolgate::Tool::"TOOL", with the attribute version;
//   - context: {input: the validated input, tool: "TOOL", version: "VERSION"}.
//     JSON numbers become Longs when whole, decimals otherwise.
//
// Cedar here only takes away: capabilities are granted by the JSON policy
// alone, and a call must be granted there and not forbidden here. So a
// policy set holds forbid policies only (a permit is refused when it
// loads: it could grant nothing). A forbid policy with the annotation
// @approval is not a denial but a question to a person: the call runs only
// as an approved intent; @approval("GROUP") restricts who may approve it
// to the members of GROUP (a group of the JSON policy). A call that a plain
// forbid matches is denied, whatever the @approval ones say.
//
// A policy whose evaluation fails on a call (it reads an input field the
// call does not give, compares a string with a number) denies the call:
// an error never lets a call through that the policy meant to stop. Guard
// optional fields with `has`.
package rules

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	cedar "github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	"github.com/cedar-policy/cedar-go/x/exp/ast"
	"github.com/go-json-experiment/json/jsontext"
)

// The entity types of a call's request.
const (
	PrincipalType = "Toolgate::Principal"
	ActionType    = "Toolgate::Action"
	ToolType      = "Toolgate::Tool"
	GroupType     = "Toolgate::Group"
)

// ApprovalAnnotation marks a forbid policy that asks a person instead of
// denying; its value, when not empty, names the approver group.
const ApprovalAnnotation = "approval"

// Effects of a decision.
const (
	Allow    = "allow"    // no policy forbids the call
	Deny     = "deny"     // a forbid policy matched, or a policy failed on the call
	Approval = "approval" // only @approval policies matched: a person must approve the call
)

// Error is a policy set that does not load: a file that cannot be read or
// parsed, a permit, an unknown group, or an action for no tool; with the
// file and the position (line and column, 1-based; 0 when unknown).
type Error struct {
	File   string
	Line   int
	Column int
	Reason string
}

func (e *Error) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("cedar policy %s: %s", e.File, e.Reason)
	}
	return fmt.Sprintf("cedar policy %s:%d:%d: %s", e.File, e.Line, e.Column, e.Reason)
}

// Set is a loaded, validated policy set. It is immutable once loaded, so
// one value may be shared by any number of goroutines.
type Set struct {
	policies cedar.PolicyMap
	info     map[cedar.PolicyID]*policyInfo
	files    []string
	revision string
	groups   map[string][]string           // group -> members
	parents  map[string]types.EntityUIDSet // principal -> its groups
	groupEnt map[types.EntityUID]types.Entity
	byAction sync.Map // "TOOL@VERSION" -> policyList: the policies whose action scope may match it
	// principals keeps the entities of principals without token scopes
	// and claims (principal -> *types.Entity), at most
	// maxCachedPrincipals of them (cached counts them).
	principals sync.Map
	cached     atomic.Int64
}

// policyList is the policies a call's action may match, in load order.
type policyList []listed

type listed struct {
	id cedar.PolicyID
	p  *cedar.Policy
}

func (l policyList) All() iter.Seq2[cedar.PolicyID, *cedar.Policy] {
	return func(yield func(cedar.PolicyID, *cedar.Policy) bool) {
		for _, x := range l {
			if !yield(x.id, x.p) {
				return
			}
		}
	}
}

// forAction returns the policies whose action scope may match a call of
// tool@version: a policy for another tool's action is never evaluated.
func (s *Set) forAction(tool, version string) policyList {
	key := tool + "@" + version
	if l, ok := s.byAction.Load(key); ok {
		return l.(policyList)
	}
	var l policyList
	for i := range len(s.policies) {
		id := cedar.PolicyID(strconv.Itoa(i))
		p := s.policies[id]
		if !actionMayMatch(p, tool, version) {
			continue
		}
		// The action scope matches every call of tool@version exactly (its
		// action is in itself and in the tool's action, nothing else):
		// evaluated without it, the policy decides the same, without
		// building the scope's set of actions on each call.
		if _, all := p.AST().Action.(ast.ScopeTypeAll); !all {
			a := *p.AST()
			a.Action = ast.ScopeTypeAll{}
			q := cedar.NewPolicyFromAST(&a)
			q.SetFilename(p.Position().Filename)
			p = q
		}
		l = append(l, listed{id, p})
	}
	s.byAction.Store(key, l)
	return l
}

// actionMayMatch reports whether p's action scope may match a call of
// tool@version (whose action's parent is the tool's action).
func actionMayMatch(p *cedar.Policy, tool, version string) bool {
	self := types.NewEntityUID(ActionType, types.String(tool+"@"+version))
	parent := types.NewEntityUID(ActionType, types.String(tool))
	switch sc := p.AST().Action.(type) {
	case ast.ScopeTypeEq:
		return sc.Entity == self
	case ast.ScopeTypeIn:
		return sc.Entity == self || sc.Entity == parent
	case ast.ScopeTypeInSet:
		return slices.Contains(sc.Entities, self) || slices.Contains(sc.Entities, parent)
	}
	return true
}

type policyInfo struct {
	id       string // @id, or FILE:LINE:COLUMN
	pos      cedar.Position
	approval bool
	group    string // the approver group ("" for anyone)
}

// Load reads and validates the Cedar files in order, with groups (group to
// member principals) from the JSON policy. A file that does not parse, a
// permit policy, a duplicate @id and an @approval group that groups does
// not define are an *Error naming the file and position. Actions are
// checked against the registered tools by [Set.CheckActions].
func Load(files []string, groups map[string][]string) (*Set, error) {
	s := &Set{policies: cedar.PolicyMap{}, info: map[cedar.PolicyID]*policyInfo{}, files: slices.Clone(files),
		groups: map[string][]string{}, parents: map[string]types.EntityUIDSet{}, groupEnt: map[types.EntityUID]types.Entity{}}
	h := sha256.New()
	members := map[string][]types.EntityUID{}
	for _, g := range slices.Sorted(mapsKeys(groups)) {
		ms := slices.Clone(groups[g])
		slices.Sort(ms)
		ms = slices.Compact(ms)
		s.groups[g] = ms
		uid := types.NewEntityUID(GroupType, types.String(g))
		s.groupEnt[uid] = types.Entity{UID: uid}
		for _, m := range ms {
			members[m] = append(members[m], uid)
		}
		fmt.Fprintf(h, "group %q %q\n", g, ms)
	}
	for m, gs := range members {
		s.parents[m] = types.NewEntityUIDSet(gs...)
	}
	seen := map[string]cedar.Position{}
	n := 0
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			return nil, &Error{File: file, Reason: "cannot be read: " + strings.TrimPrefix(errors.Unwrap(err).Error(), "open ")}
		}
		fmt.Fprintf(h, "file %q %d\n", filepath.Base(file), len(src))
		h.Write(src)
		list, err := cedar.NewPolicyListFromBytes(file, src)
		if err != nil {
			return nil, parseError(file, err)
		}
		for _, p := range list {
			pos := p.Position()
			at := func(reason string) *Error {
				return &Error{File: file, Line: pos.Line, Column: pos.Column, Reason: reason}
			}
			if p.Effect() == cedar.Permit {
				return nil, at("a permit policy grants nothing here: capabilities are granted by the JSON policy; write forbid, or forbid with @approval to ask a person")
			}
			info := &policyInfo{pos: pos, id: fmt.Sprintf("%s:%d:%d", filepath.Base(file), pos.Line, pos.Column)}
			ann := p.Annotations()
			if v, ok := ann["id"]; ok {
				if v == "" {
					return nil, at("@id is empty")
				}
				info.id = string(v)
			}
			if prev, dup := seen[info.id]; dup {
				return nil, at(fmt.Sprintf("policy id %q is used already, at %s:%d:%d", info.id, prev.Filename, prev.Line, prev.Column))
			}
			seen[info.id] = pos
			if v, ok := ann[ApprovalAnnotation]; ok {
				info.approval, info.group = true, string(v)
				if info.group != "" {
					if _, ok := s.groups[info.group]; !ok {
						return nil, at(fmt.Sprintf("@approval(%q) names a group the JSON policy does not define (its \"groups\")", info.group))
					}
				}
			}
			pid := cedar.PolicyID(strconv.Itoa(n))
			n++
			s.policies[pid] = p
			s.info[pid] = info
		}
	}
	s.revision = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return s, nil
}

// parseLoc finds the position in cedar-go's parse errors ("parse error at
// <input>:3:24 ...").
var parseLoc = regexp.MustCompile(`at <input>:(\d+):(\d+) (.*)$`)

// parseExpect is cedar-go's "a token was not the one expected" message.
var parseExpect = regexp.MustCompile(`^"(.*)": exact got (.*) want (.*)$`)

func parseError(file string, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "parser error: ")
	if m := parseLoc.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		col, _ := strconv.Atoi(m[2])
		why := m[3]
		if e := parseExpect.FindStringSubmatch(why); e != nil {
			why = fmt.Sprintf("expected %q, found %q", e[3], e[2])
		} else if tok, rest, ok := strings.Cut(why, ": "); ok {
			why = rest + " at " + tok
		}
		return &Error{File: file, Line: line, Column: col, Reason: "does not parse: " + why}
	}
	return &Error{File: file, Reason: "does not parse: " + msg}
}

// Revision identifies the policy set: "sha256:" and the SHA-256 of its
// files (names and contents, in order) and groups.
func (s *Set) Revision() string { return s.revision }

// Files are the files the set was loaded from.
func (s *Set) Files() []string { return slices.Clone(s.files) }

// Len is the number of policies.
func (s *Set) Len() int { return len(s.policies) }

// InGroup reports whether principal is a member of group.
func (s *Set) InGroup(principal, group string) bool {
	_, ok := slices.BinarySearch(s.groups[group], principal)
	return ok
}

// CheckActions refuses a policy whose scope names an action for no tool:
// known reports whether a tool id (version "") or tool@version is
// registered. The *Error names the file and position of the policy.
func (s *Set) CheckActions(known func(tool, version string) bool) error {
	ids := slices.Sorted(mapsKeys(s.policies))
	slices.SortFunc(ids, func(a, b cedar.PolicyID) int {
		pa, pb := s.info[a].pos, s.info[b].pos
		if c := strings.Compare(pa.Filename, pb.Filename); c != 0 {
			return c
		}
		return pa.Offset - pb.Offset
	})
	for _, id := range ids {
		var uids []types.EntityUID
		switch sc := s.policies[id].AST().Action.(type) {
		case ast.ScopeTypeEq:
			uids = []types.EntityUID{sc.Entity}
		case ast.ScopeTypeIn:
			uids = []types.EntityUID{sc.Entity}
		case ast.ScopeTypeInSet:
			uids = sc.Entities
		}
		pos := s.info[id].pos
		for _, u := range uids {
			tool, version, _ := strings.Cut(string(u.ID), "@")
			if string(u.Type) != ActionType || !known(tool, version) {
				return &Error{File: pos.Filename, Line: pos.Line, Column: pos.Column,
					Reason: fmt.Sprintf("action %s names no registered tool: an action is %s::\"TOOL@VERSION\" or %s::\"TOOL\" ('toolgate tools' lists them)", u, ActionType, ActionType)}
			}
		}
		if sc, ok := s.policies[id].AST().Action.(ast.ScopeTypeEq); ok && !strings.Contains(string(sc.Entity.ID), "@") {
			return &Error{File: pos.Filename, Line: pos.Line, Column: pos.Column,
				Reason: fmt.Sprintf("action == %s never matches: a call's action is %s::\"%s@VERSION\"; write action in %s to match every version", sc.Entity, ActionType, sc.Entity.ID, sc.Entity)}
		}
	}
	return nil
}

// MayAsk reports whether an @approval policy of the set may match a call
// of tool@version (by its action scope; its conditions decide the call):
// whether such a call may need a person's approval.
func (s *Set) MayAsk(tool, version string) bool {
	match := func(u types.EntityUID) bool {
		return string(u.Type) == ActionType && (string(u.ID) == tool || string(u.ID) == tool+"@"+version)
	}
	for id, p := range s.policies {
		if !s.info[id].approval {
			continue
		}
		switch sc := p.AST().Action.(type) {
		case ast.ScopeTypeEq:
			if match(sc.Entity) {
				return true
			}
		case ast.ScopeTypeIn:
			if match(sc.Entity) {
				return true
			}
		case ast.ScopeTypeInSet:
			if slices.ContainsFunc(sc.Entities, match) {
				return true
			}
		default:
			return true
		}
	}
	return false
}

// Request is a call, as a policy set decides it.
type Request struct {
	Principal string
	Scopes    []string            // the OAuth token's scopes
	Claims    map[string][]string // the OAuth token's grant claims
	Tool      string
	Version   string
	Input     json.RawMessage // valid against the tool's input schema
}

// Decision is a policy set's decision on a call.
type Decision struct {
	Effect string `json:"effect"` // Allow, Deny or Approval
	// Policies are the ids of the policies that determined it: those
	// that forbid (Deny: the plain forbids, or the policies that failed;
	// Approval: the @approval ones). None for Allow.
	Policies []string `json:"policies,omitempty"`
	// Approvers are, for Approval, the groups whose member must approve
	// (a member of each); none: any approver.
	Approvers []string `json:"approvers,omitempty"`
	Revision  string   `json:"revision"`
	// Reason says why, in the user's terms, for Deny and Approval.
	Reason string `json:"reason,omitempty"`
	// Failed is set for a Deny because a policy failed on the call (or
	// the input could not be given to the policies), not because one
	// forbids it.
	Failed bool `json:"failed,omitempty"`
}

// Decide evaluates the policy set on r.
func (s *Set) Decide(r Request) Decision {
	d := Decision{Effect: Allow, Revision: s.revision}
	ctx, err := contextOf(r)
	if err != nil {
		d.Effect, d.Reason, d.Failed = Deny, "the input cannot be given to the Cedar policies: "+err.Error(), true
		return d
	}
	ents := &entities{s: s, r: &r}
	ents.principal = types.NewEntityUID(PrincipalType, types.String(r.Principal))
	ents.action = types.NewEntityUID(ActionType, types.String(r.Tool+"@"+r.Version))
	req := cedar.Request{
		Principal: ents.principal,
		Action:    ents.action,
		Resource:  types.NewEntityUID(ToolType, types.String(r.Tool)),
		Context:   ctx,
	}
	_, diag := cedar.Authorize(s.forAction(r.Tool, r.Version), ents, req)
	if len(diag.Errors) > 0 {
		var msgs []string
		for _, e := range diag.Errors {
			d.Policies = append(d.Policies, s.info[e.PolicyID].id)
			msgs = append(msgs, s.info[e.PolicyID].id+": "+e.Message)
		}
		slices.Sort(d.Policies)
		slices.Sort(msgs)
		d.Effect, d.Reason, d.Failed = Deny, "a Cedar policy failed on this call, which denies it: "+strings.Join(msgs, "; "), true
		return d
	}
	var plain, ask, groups []string
	for _, rs := range diag.Reasons { // forbids only: a set holds no permit
		info := s.info[rs.PolicyID]
		if !info.approval {
			plain = append(plain, info.id)
			continue
		}
		ask = append(ask, info.id)
		if info.group != "" {
			groups = append(groups, info.group)
		}
	}
	slices.Sort(plain)
	slices.Sort(ask)
	switch {
	case len(plain) > 0:
		d.Effect, d.Policies = Deny, plain
		d.Reason = "forbidden by Cedar policy " + strings.Join(plain, ", ")
	case len(ask) > 0:
		slices.Sort(groups)
		d.Effect, d.Policies, d.Approvers = Approval, ask, slices.Compact(groups)
		d.Reason = "Cedar policy " + strings.Join(ask, ", ") + " requires a person's approval"
		if len(d.Approvers) > 0 {
			d.Reason += " by a member of " + strings.Join(d.Approvers, " and ")
		}
	}
	return d
}

// entities are the entities of one request: its principal (attributes
// and groups), its action (whose parent is the tool's action), its tool
// and the groups. Each is built once, when a policy first reads it.
type entities struct {
	s                 *Set
	r                 *Request
	principal, action types.EntityUID
	pEnt, aEnt, tEnt  *types.Entity
}

func (e *entities) Get(uid types.EntityUID) (types.Entity, bool) {
	switch {
	case uid == e.principal:
		if e.pEnt == nil {
			e.pEnt = e.s.principalEntity(e.r)
		}
		return *e.pEnt, true
	case uid == e.action:
		if e.aEnt == nil {
			e.aEnt = &types.Entity{UID: uid, Parents: types.NewEntityUIDSet(types.NewEntityUID(ActionType, types.String(e.r.Tool)))}
		}
		return *e.aEnt, true
	case uid.Type == ToolType && string(uid.ID) == e.r.Tool:
		if e.tEnt == nil {
			e.tEnt = &types.Entity{UID: uid, Attributes: types.NewRecord(types.RecordMap{"version": types.String(e.r.Version)})}
		}
		return *e.tEnt, true
	}
	ent, ok := e.s.groupEnt[uid]
	return ent, ok
}

// maxCachedPrincipals bounds the principal entities a set keeps.
const maxCachedPrincipals = 4096

// principalEntity is r's principal as an entity. That of a caller without
// a token's scopes and claims is the same on every call: it is kept.
func (s *Set) principalEntity(r *Request) *types.Entity {
	plain := len(r.Scopes) == 0 && len(r.Claims) == 0
	if plain {
		if e, ok := s.principals.Load(r.Principal); ok {
			return e.(*types.Entity)
		}
	}
	scopes := make([]types.Value, len(r.Scopes))
	for i, sc := range r.Scopes {
		scopes[i] = types.String(sc)
	}
	claims := make(types.RecordMap, len(r.Claims))
	for k, vs := range r.Claims {
		set := make([]types.Value, len(vs))
		for i, v := range vs {
			set[i] = types.String(v)
		}
		claims[types.String(k)] = types.NewSet(set...)
	}
	e := &types.Entity{UID: types.NewEntityUID(PrincipalType, types.String(r.Principal)), Parents: s.parents[r.Principal],
		Attributes: types.NewRecord(types.RecordMap{"scopes": types.NewSet(scopes...), "claims": types.NewRecord(claims)})}
	if plain && s.cached.Add(1) <= maxCachedPrincipals {
		s.principals.Store(r.Principal, e)
	}
	return e
}

// contextOf is the request's context: the input, as Cedar values.
func contextOf(r Request) (types.Record, error) {
	input := types.Value(types.NewRecord(nil))
	if len(bytes.TrimSpace(r.Input)) > 0 {
		d := decoders.Get().(*jsontext.Decoder)
		d.Reset(bytes.NewReader(r.Input))
		v, err := valueOf(d, "input")
		d.Reset(bytes.NewReader(nil))
		decoders.Put(d)
		if err != nil {
			return types.Record{}, err
		}
		if v != nil {
			input = v
		}
	}
	return types.NewRecord(types.RecordMap{
		"input": input, "tool": types.String(r.Tool), "version": types.String(r.Version),
	}), nil
}

var decoders = sync.Pool{New: func() any { return jsontext.NewDecoder(bytes.NewReader(nil)) }}

// valueOf reads the next JSON value of d as a Cedar value. null has none in
// Cedar (nil is returned): a field that is null is left out of its record
// (`has` is false), an element out of its set. A JSON array becomes a set:
// its order and repetitions are lost.
func valueOf(d *jsontext.Decoder, at string) (types.Value, error) {
	tok, err := d.ReadToken()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", at, err)
	}
	switch tok.Kind() {
	case 'n':
		return nil, nil
	case 't', 'f':
		return types.Boolean(tok.Bool()), nil
	case '"':
		return types.String(tok.String()), nil
	case '0':
		return number(tok.String(), at)
	case '[':
		var vals []types.Value
		for i := 0; d.PeekKind() != ']'; i++ {
			v, err := valueOf(d, at+"["+strconv.Itoa(i)+"]")
			if err != nil {
				return nil, err
			}
			if v != nil {
				vals = append(vals, v)
			}
		}
		if _, err := d.ReadToken(); err != nil {
			return nil, fmt.Errorf("%s: %w", at, err)
		}
		return types.NewSet(vals...), nil
	case '{':
		rec := types.RecordMap{}
		for d.PeekKind() != '}' {
			name, err := d.ReadToken()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", at, err)
			}
			k := name.String()
			v, err := valueOf(d, at+"."+k)
			if err != nil {
				return nil, err
			}
			if v != nil {
				rec[types.String(k)] = v
			}
		}
		if _, err := d.ReadToken(); err != nil {
			return nil, fmt.Errorf("%s: %w", at, err)
		}
		return types.NewRecord(rec), nil
	}
	return nil, fmt.Errorf("%s: a value Cedar cannot hold", at)
}

// number is a JSON number as a Cedar value: a Long when whole, else a
// decimal.
func number(raw, at string) (types.Value, error) {
	if i, err := strconv.ParseInt(raw, 10, 64); err == nil {
		return types.Long(i), nil
	}
	f, err := strconv.ParseFloat(raw, 64)
	if err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<63 {
		return types.Long(int64(f)), nil
	}
	d, derr := types.ParseDecimal(raw)
	if derr != nil && err == nil {
		d, derr = types.NewDecimalFromFloat(f)
	}
	if derr != nil {
		return nil, fmt.Errorf("%s: the number %s is neither a whole number nor a decimal Cedar holds (4 places, about ±922337203685477)", at, raw)
	}
	return d, nil
}

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
