package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/internal/explain"
	"github.com/toolgate/toolgate/rules"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

const policyHelp = `Policy: --policy FILE (or $TOOLGATE_POLICY) grants capabilities to
principals; nothing is granted without it but what --allow adds for one call.
A policy file is JSON:

  {
    "version": 1,
    "principals": {
      "alice":  ["filesystem.read:/srv/data", "filesystem.write:/srv/out"],
      "ci-bot": ["process.exec:git"]
    }
  }

A policy that cannot be read or is invalid is refused (exit 2, naming the file,
line and column): its grants are checked as --allow checks its values, so a
capability name no tool requires (a typo) and '*' are errors.

A policy may also name Cedar files over a call's arguments ("cedar":
["rules.cedar"], relative to the policy file) and groups of principals
("groups": {"finance": ["fiona"]}): a call must be granted by the policy and
not forbidden by a Cedar policy; a forbid annotated @approval("GROUP") makes
it run only as an intent a member of GROUP approved. Cedar never grants. A
Cedar file that does not parse, or names an action for no tool, is refused
(exit 2, naming the file, line and column). 'policy check --input' shows the
Cedar decision: the policy ids and the policy set's revision.

A filesystem grant names a place: its symbolic links are followed once, when
the grant is made (the policy is loaded, or --allow is given), and the tool is
held to where they led, following no link in it afterwards. "policy check"
shows where each grant it would use leads.`

// policy loads the policy named by --policy or $TOOLGATE_POLICY: nil when
// neither is set; a deny-all policy and the error when it cannot be read.
//
// A policy file that cannot be read or is invalid is a configuration
// error, a usage error (exit 2) for every command that decides with it,
// returned before anything is run or recorded; the policy returned with it
// denies everything, for a caller that reports and goes on (doctor).
func (g *globals) policy() (*capability.Policy, error) {
	path, from := g.policyPath, "--policy"
	if path == "" {
		path, from = os.Getenv("TOOLGATE_POLICY"), "$TOOLGATE_POLICY"
	}
	if path == "" {
		return nil, nil
	}
	known := g.knownNames()
	p, err := capability.LoadPolicyChecked(path, func(grant string) error { return checkGrant(grant, known) })
	if err != nil {
		return p, usageErr("%s: %v", from, err)
	}
	if set := p.Rules(); set != nil {
		if known := g.knownTool(); known != nil {
			if err := set.CheckActions(known); err != nil {
				err = fmt.Errorf("%w: %w", capability.ErrPolicy, err)
				return capability.DenyAll(err), usageErr("%s: %v", from, err)
			}
		}
	}
	return p, nil
}

// knownTool reports whether a tool (version "": any version) is
// registered, for the actions of Cedar policies: nil when the registry
// cannot be read (the command that loads it says why). The tools of
// upstream MCP servers not started yet are taken as known; the runtime
// checks them again once they are.
func (g *globals) knownTool() func(tool, version string) bool {
	reg, upstreams := g.reg, false
	if reg == nil {
		path := g.registryPath
		if path == "" {
			path = os.Getenv("TOOLGATE_REGISTRY")
		}
		var err error
		if path == "" {
			if reg, err = builtinRegistry(); err != nil {
				return nil
			}
		} else if reg, err = tools.LoadRegistryFileWith(path, func(servers []tools.MCPServer) ([]tools.Tool, error) {
			upstreams = len(servers) > 0
			return nil, nil
		}, tools.Builtins()...); err != nil {
			return nil
		}
	}
	return func(tool, version string) bool {
		_, err := reg.Lookup(tool, version)
		return err == nil || upstreams
	}
}

// knownNames are the capability names a grant of the policy can mean
// something for, as --allow takes them (knownCapabilities): those the
// registry's tools require, and the runtime's own. A registry file not
// loaded yet is read for them without starting its upstream MCP servers
// (their tools require mcp.call). Nil when the registry cannot be read:
// the command that loads it says why.
func (g *globals) knownNames() []string {
	var regs []*tools.Registry
	path := g.registryPath
	if path == "" {
		path = os.Getenv("TOOLGATE_REGISTRY")
	}
	extra := []string{}
	switch {
	case g.reg != nil: // its gateway tools, if any, require mcp.call
		regs = []*tools.Registry{g.reg}
	case path != "":
		reg, err := tools.LoadRegistryFileWith(path, func(servers []tools.MCPServer) ([]tools.Tool, error) {
			if len(servers) > 0 {
				extra = append(extra, "mcp.call")
			}
			return nil, nil
		}, tools.Builtins()...)
		if err != nil {
			return nil
		}
		regs = []*tools.Registry{reg}
	}
	known, err := knownCapabilities(regs)
	if err != nil {
		return nil
	}
	known = append(known, extra...)
	slices.Sort(known)
	return slices.Compact(known)
}

func newPolicyCmd(g *globals, stdio Stdio) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Inspect the capability policy and explain decisions",
		Long:  "Inspect the capability policy and explain decisions before running anything.\n\n" + policyHelp,
	}
	cmd.AddCommand(newPolicyCheckCmd(g, stdio), newPolicyShowCmd(g, stdio))
	return cmd
}

// placeView and decisionView are the explained decision (package
// explain, shared with the web UI's intent page).
type (
	placeView    = explain.Place
	decisionView = explain.Decision
)

func newPolicyCheckCmd(g *globals, stdio Stdio) *cobra.Command {
	var (
		who   string
		allow []string
		input string
	)
	cmd := &cobra.Command{
		Use:   "check TOOL[@VERSION]",
		Short: "Explain whether a principal may run a tool, without running it",
		Long: `Explain the capability decision for a principal and a tool, without running
anything: what the tool requires, which grant meets each requirement, what is
missing, and what the tool's handles would expose (its declared capabilities,
narrowed to the grants). Exits 0 when allowed, 4 when denied.

Some capabilities are required by some calls only, scoped by a field of the
input (a process tool's cwd requires filesystem.read covering it). With
--input, the call's input, the decision is the one 'toolgate run' makes for
that input (an input that does not match the tool's schema is refused, exit
3, as run refuses it before deciding); without it, those capabilities are
listed as also required when their field is given.

` + policyHelp,
		Example: `  toolgate policy check --policy policy.json --principal alice file.read
  toolgate policy check --principal alice --allow filesystem.read:. file.read --json
  toolgate policy check --principal ci-bot exec_capture --input '{"command":"git","args":["status"],"cwd":"."}'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			reg, err := g.registry()
			if err != nil {
				return err
			}
			id, version, _ := strings.Cut(args[0], "@")
			e, err := reg.Lookup(id, version)
			if err != nil {
				return usageErr("%v; 'toolgate tools' lists the registered tools", err)
			}
			extra, err := parseAllow(allow, reg)
			if err != nil {
				return usageErr("--allow: %v", err)
			}
			warnBroadGrants(stdio.Err, extra)
			policy, err := g.policy()
			if err != nil {
				return err
			}
			if policy == nil {
				policy, _ = capability.NewPolicy(nil)
			}
			if who == "" {
				who = principal()
			}
			var in json.RawMessage
			if cmd.Flags().Changed("input") {
				if in, err = readInput(input, stdio.In); err != nil {
					return usageErr("--input: %v", err)
				}
				if err := e.ValidateInput(in); err != nil {
					return &exitError{code: ExitFailed, err: userError{fmt.Errorf("--input: %w", &tgruntime.ValidationError{Phase: "input", Err: err})}}
				}
			}
			v := decide(policy, who, e.Declaration(), in, extra)
			if g.json {
				if err := encodeJSON(stdio, v); err != nil {
					return internalErr(err)
				}
			} else {
				printDecision(stdio, v, append(policy.Grants(who), capability.ResolveAll(extra)...))
			}
			if !v.Allowed {
				return &exitError{code: ExitDenied}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&who, "principal", "", "the principal to decide for (default: cli:$USER)")
	cmd.Flags().StringArrayVar(&allow, "allow", nil, "a grant added for the call, as 'toolgate run --allow' (repeatable)")
	cmd.Flags().StringVar(&input, "input", "", "the call's input JSON, as 'toolgate run --input': @FILE reads it from FILE, - from stdin")
	return cmd
}

// checkView is what policy check explains (--json prints it).
type checkView = explain.Decision

// decide makes the decision Execute makes at AUTHORIZED for a call of
// decl by principal with input (nil: none given), relative paths taken
// from the working directory (the CLI's runtime has no other).
func decide(policy *capability.Policy, principal string, decl tools.Declaration, input json.RawMessage, extra []capability.Capability) checkView {
	return explain.Call(policy, principal, decl, input, extra, "", time.Now(), tgruntime.Message)
}

// printDecision prints v; held are the grants the principal has for the
// call (the policy's and --allow), named in a denial's hint.
func printDecision(stdio Stdio, v checkView, held []capability.Capability) {
	w := tabwriter.NewWriter(stdio.Out, 0, 4, 2, ' ', 0)
	switch {
	case v.Allowed && v.RequiresApproval:
		who := "a person"
		if v.Cedar != nil && len(v.Cedar.Approvers) > 0 {
			who = "a member of " + strings.Join(v.Cedar.Approvers, " and ")
		}
		fmt.Fprintf(stdio.Out, "ALLOWED AS AN APPROVED INTENT: %s may run %s once %s approves the exact call (toolgate intent propose); called directly, it is denied\n", v.Principal, v.Tool, who)
	case v.Allowed:
		fmt.Fprintf(stdio.Out, "ALLOWED: %s may run %s\n", v.Principal, v.Tool)
	default:
		fmt.Fprintf(stdio.Out, "DENIED: %s may not run %s\n", v.Principal, v.Tool)
	}
	fmt.Fprintf(w, "policy revision\t%s\n", v.PolicyRevision)
	if v.CedarPolicySet != "" {
		fmt.Fprintf(w, "cedar policy set\t%s\n", v.CedarPolicySet)
	}
	switch c := v.Cedar; {
	case c == nil && v.CedarPolicySet != "":
		fmt.Fprintln(w, "cedar\tnot decided: Cedar policies decide on the call's input (--input)")
	case c != nil && c.Effect == rules.Allow:
		fmt.Fprintln(w, "cedar\tallow: no policy forbids this call")
	case c != nil:
		fmt.Fprintf(w, "cedar\t%s by %s: %s\n", c.Effect, strings.Join(c.Policies, ", "), c.Reason)
	}
	if v.Reason != "" {
		fmt.Fprintf(w, "reason\t%s\n", v.Reason)
	}
	if len(v.Required) == 0 {
		fmt.Fprintln(w, "requires\tnothing")
	}
	for _, r := range v.Requirements {
		if len(r.MetBy) == 0 {
			fmt.Fprintf(w, "requires %s\tMISSING\n", r.Capability)
			continue
		}
		fmt.Fprintf(w, "requires %s\tmet by %s\n", r.Capability, strings.Join(r.MetBy, ", "))
	}
	for _, a := range v.AlsoRequired {
		fmt.Fprintf(w, "requires %s\talso required when %s is given (--input decides for a call's input)\n", a.Capability, a.Field)
	}
	if v.Allowed {
		eff := strings.Join(v.Effective, ", ")
		if eff == "" {
			eff = "nothing"
		}
		fmt.Fprintf(w, "handles expose\t%s\n", eff)
		for _, p := range v.Places {
			fmt.Fprintf(w, "place\t%s -> %s (%s)\n", p.Capability, p.Place, p.Kind)
		}
	}
	for _, p := range v.Paths {
		fmt.Fprintf(w, "%s %s\t%s\n", p.Field, p.Path, pathLine(p))
	}
	w.Flush()
	if !v.Allowed && len(v.Missing) > 0 && v.Reason == "" {
		fmt.Fprintln(stdio.Out, denyHint(capabilitiesOf(v.Missing), held))
	}
}

// pathLine says where an input path leads, what is there, and the grant
// it lies inside or those it falls outside of.
func pathLine(p tools.PathCheck) string {
	var b strings.Builder
	if p.Leads != p.Path {
		b.WriteString("leads to " + p.Leads + " ")
	}
	b.WriteString("(" + p.Kind + ")")
	if p.DirMissing {
		b.WriteString(", and so is its directory")
	}
	switch {
	case p.Refused != "":
		b.WriteString("; REFUSED: it " + p.Refused)
	case p.Grant != "":
		b.WriteString("; inside " + p.Grant)
	case len(p.Outside) > 0:
		b.WriteString("; OUTSIDE " + strings.Join(p.Outside, ", "))
	default:
		b.WriteString("; inside no grant of " + p.Capability)
	}
	return b.String()
}

func capabilitiesOf(ss []string) []capability.Capability {
	out := make([]capability.Capability, 0, len(ss))
	for _, s := range ss {
		if c, err := capability.Parse(s); err == nil {
			out = append(out, c)
		}
	}
	return out
}

func newPolicyShowCmd(g *globals, stdio Stdio) *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Print the principals of the policy, their grants, and its revision",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			policy, err := g.policy()
			if err != nil {
				return err
			}
			if policy == nil {
				return usageErr("no policy: pass --policy FILE or set TOOLGATE_POLICY")
			}
			if g.json {
				grants := map[string][]string{}
				for _, p := range policy.Principals() {
					grants[p] = capability.Strings(policy.Grants(p))
				}
				v := map[string]any{"revision": policy.Revision(), "principals": grants}
				if set := policy.Rules(); set != nil {
					v["cedar"] = map[string]any{"revision": set.Revision(), "files": set.Files(), "policies": set.Len()}
				}
				return encodeJSON(stdio, v)
			}
			w := tabwriter.NewWriter(stdio.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "revision\t%s\n", policy.Revision())
			if set := policy.Rules(); set != nil {
				fmt.Fprintf(w, "cedar policy set\t%s (%d policies in %s)\n", set.Revision(), set.Len(), strings.Join(set.Files(), ", "))
			}
			for _, p := range policy.Principals() {
				var gs []string
				for _, g := range policy.Grants(p) {
					s := g.String()
					if g.Place != "" {
						s += " (leads to " + g.Place + ")"
					}
					gs = append(gs, s)
				}
				fmt.Fprintf(w, "%s\t%s\n", p, strings.Join(gs, ", "))
			}
			return w.Flush()
		},
	}
}
