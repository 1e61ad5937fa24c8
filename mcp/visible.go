package mcp

import (
	"context"
	"encoding/json"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/capability"
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
		shown := make([]*sdk.Tool, 0, len(list.Tools))
		for _, t := range list.Tools {
			if s.mayCall(principal, grants, t.Name) {
				shown = append(shown, t)
			}
		}
		out := *list
		out.Tools = shown
		return &out, nil
	}
}

// mayCall reports whether principal, with grants, could call the tool named
// name with an input that gives no optional field.
func (s *Server) mayCall(principal string, grants []capability.Capability, name string) bool {
	if name == ExecuteIntentTool {
		return true
	}
	e, ok := s.entries[name]
	if !ok {
		return false // not one of toolgate's: never shown by mistake
	}
	return s.rt.Decide(principal, e, json.RawMessage(`{}`), grants).Allowed()
}

// privateToolList marks every tools/list answer private (protocol
// 2026-07-28's cacheScope): each caller sees its own.
func privateToolList(_ context.Context, req sdk.Request, c *sdk.Cacheable) {
	if _, ok := req.(*sdk.ListToolsRequest); ok {
		c.CacheScope = "private"
	}
}
