// Package capability names what a tool may do and decides, deny by default,
// whether a principal holds what a tool requires.
//
// # Names and scopes
//
// A capability is a dotted name with an optional scope after a colon:
//
//	filesystem.read            any file, wherever the grant allows
//	filesystem.read:/srv/data  files at or below /srv/data
//	process.exec:git           running git
//	state.write:orders         writing the "orders" state namespace
//	mcp.call:files/read_file   calling the tool read_file of the upstream MCP server files
//	mcp.call:files             calling every tool of that server (see below)
//
// # Matching
//
// The rules are meant to be explained in one breath:
//
//   - names match exactly; there are no wildcards;
//   - a scope covers itself and what is below it, where "below" means after a
//     "/" (so /srv/data covers /srv/data/x but not /srv/database, and
//     api.example.com covers only itself);
//   - a grant without a scope covers every scope of its name;
//   - a requirement without a scope (a tool declaring "filesystem.read") is
//     met by any grant of that name; the tool's handle then confines it to
//     the granted scopes;
//   - a requirement may take its scope from the call's input (the tools
//     package's input capabilities: "filesystem.read:{cwd}" requires
//     filesystem.read:/srv/repo of a call whose cwd is /srv/repo, nothing of
//     a call without one); it is matched like any other, and
//     [Policy.DecideIn] takes a grant's relative filesystem scope from the
//     caller's working directory, as the tools' handles do.
//
// Nothing is granted unless it is listed: [Authorize] denies by default and
// names what is missing.
//
// # Places
//
// A filesystem grant names a place. Matching is on the scope as written,
// but the symbolic links in an absolute scope are followed once, when the
// grant is made, and where they lead is kept in [Capability.Place] (see
// [Resolve]): a [Policy] resolves its grants when it is built, and
// [Policy.Decide] the grants given for that decision. The tools' handles
// open the place and follow no link in it afterwards, so retargeting the
// granted link, or swapping a link in for the place, does not move a grant
// already made. A relative scope is not resolved: the handle joins it to
// its working directory, and that whole path must hold no link.
//
// # Policies
//
// A [Policy] grants capabilities to principals. It comes from a Go value
// ([NewPolicy]) or a JSON file ([LoadPolicy], [ParsePolicy]):
//
//	{
//	  "version": 1,
//	  "principals": {
//	    "alice":  ["filesystem.read:/srv/data", "state.write:orders"],
//	    "ci-bot": ["process.exec:git"]
//	  }
//	}
//
// A file with an error (unknown or misspelt field, a field or principal
// named twice, invalid capability) is refused with the line and column of
// the string at fault, as written (see [ParsePolicy]); a policy that cannot be
// read or parsed denies everything, to everyone, with the reason in every
// decision. [Policy.Decide] returns a [Decision] record: a decision id, the
// principal, the tool, what was required, granted and missing, the
// policy's revision (the SHA-256 of its content, the same for the same
// grants from a file or a Go value) and the time. [Decision.Effective] is
// what the tool's handles then expose: its declared capabilities, narrowed
// to the grants.
package capability
