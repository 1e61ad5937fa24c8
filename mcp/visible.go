package mcp

import (
	"context"
	"encoding/json"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/oauth"
	"github.com/toolgate/toolgate/rules"
	"github.com/toolgate/toolgate/tools"
)

// visibleTools answers tools/list with the tools its caller could run, or
// propose for a person's approval: those whose declared capabilities the
// caller's grants meet (the policy's for its principal, Options.Grants, and
// what an OAuth token's scopes and claims are granted). A capability that
// only some inputs require (a working directory, a path) does not hide a
// tool: the call decides it. An upstream tool of the gateway follows its
// mcp.call grant like any other. toolgate.execute_intent is always listed:
// running an approved intent decides its own grants.
func (s *Server) visibleTools(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		res, err := next(ctx, method, req)
		if method != "tools/list" || err != nil {
			return res, err
		}
		list, ok := res.(*sdk.ListToolsResult)
		if !ok {
			return res, nil
		}
		principal, grants, _ := s.caller(req.GetExtra())
		who := tools.Caller{Principal: principal}
		who.Scopes, who.Claims = tokenClaims(req.GetExtra())
		shown := make([]*sdk.Tool, 0, len(list.Tools))
		for _, t := range list.Tools {
			if s.mayCall(who, grants, t.Name) {
				shown = append(shown, t)
			}
		}
		out := *list
		out.Tools = shown
		return &out, nil
	}
}

// mayCall reports whether who, with grants, could call the tool named name
// with an input that gives no optional field. A Cedar policy that forbids
// such a call hides the tool; one that fails on the empty input (it reads
// a field only a call gives) does not: the call decides it.
func (s *Server) mayCall(who tools.Caller, grants []capability.Capability, name string) bool {
	if name == ExecuteIntentTool {
		return true
	}
	e, ok := s.entries[name]
	if !ok {
		return false // not one of toolgate's: never shown by mistake
	}
	d := s.rt.DecideFor(who, e, json.RawMessage(`{}`), grants)
	return d.Allowed() || (len(d.Missing) == 0 && d.Rules != nil && d.Rules.Effect == rules.Deny && d.Rules.Failed)
}

// tokenClaims are the scopes and grant claims of a request's OAuth token,
// if any: what Cedar policies see of the caller.
func tokenClaims(extra *sdk.RequestExtra) ([]string, map[string][]string) {
	if extra == nil || extra.TokenInfo == nil {
		return nil, nil
	}
	if id, ok := extra.TokenInfo.Extra[identityKey].(*oauth.Identity); ok {
		return id.Scopes, id.Claims
	}
	return nil, nil
}

// privateToolList marks every tools/list answer private (protocol
// 2026-07-28's cacheScope): each caller sees its own.
func privateToolList(_ context.Context, req sdk.Request, c *sdk.Cacheable) {
	if _, ok := req.(*sdk.ListToolsRequest); ok {
		c.CacheScope = "private"
	}
}
