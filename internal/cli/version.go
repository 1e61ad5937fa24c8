package cli

import (
	"runtime/debug"
	"strings"
)

// version says which toolgate this is, from the build info Go embeds: the
// module version (v1.2.3 for `go install ...@v1.2.3`, "(devel)" for a build
// from a checkout) and, for a build from a checkout, the VCS revision, its
// time and whether the tree had uncommitted changes.
func version(info *debug.BuildInfo, ok bool) string {
	if !ok || info == nil {
		return "unknown (no build information)"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	if info.Main.Path != "" {
		v += " (module " + info.Main.Path + ")"
	}
	var rev, at, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	var b strings.Builder
	b.WriteString(v)
	if rev != "" {
		b.WriteString("\nrevision " + rev)
		if at != "" {
			b.WriteString(" (" + at + ")")
		}
		if modified == "true" {
			b.WriteString(", with uncommitted changes")
		}
	} else {
		b.WriteString("\nrevision unknown (the build recorded none: built outside a checkout, or with -buildvcs=false)")
	}
	if info.GoVersion != "" {
		b.WriteString("\nbuilt with " + info.GoVersion)
	}
	return b.String()
}
