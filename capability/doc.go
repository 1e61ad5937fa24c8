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
//     the granted scopes.
//
// Nothing is granted unless it is listed: [Authorize] denies by default and
// names what is missing.
package capability
