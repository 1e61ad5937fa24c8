package cli

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/capability"
)

const policyHelp = `Policy: --policy FILE (or $TOOLGATE_POLICY) grants capabilities to
principals; nothing is granted without it but what --allow adds for one call.
A policy file is JSON:

  {
    "version": 1,
    "principals": {
      "alice":  ["filesystem.read:/srv/data", "state.write:orders"],
      "ci-bot": ["process.exec:git"]
    }
  }

A policy that cannot be read or is invalid denies everything, and says why.`

// policy loads the policy named by --policy or $TOOLGATE_POLICY: nil when
// neither is set; a deny-all policy and the error when it cannot be read.
func (g *globals) policy() (*capability.Policy, error) {
	path := g.policyPath
	if path == "" {
		path = os.Getenv("TOOLGATE_POLICY")
	}
	if path == "" {
		return nil, nil
	}
	return capability.LoadPolicy(path)
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

// decisionView is the JSON form of an explained decision.
type decisionView struct {
	Allowed        bool      `json:"allowed"`
	DecisionID     string    `json:"decisionId"`
	Principal      string    `json:"principal"`
	Tool           string    `json:"tool"`
	Required       []string  `json:"required"`
	Granted        []string  `json:"granted"`
	Missing        []string  `json:"missing"`
	Effective      []string  `json:"effective"`
	PolicyRevision string    `json:"policyRevision"`
	Reason         string    `json:"reason,omitempty"`
	At             time.Time `json:"at"`
}

func newPolicyCheckCmd(g *globals, stdio Stdio) *cobra.Command {
	var (
		who   string
		allow []string
	)
	cmd := &cobra.Command{
		Use:   "check TOOL[@VERSION]",
		Short: "Explain whether a principal may run a tool, without running it",
		Long: `Explain the capability decision for a principal and a tool, without running
anything: what the tool requires, which grant meets each requirement, what is
missing, and what the tool's handles would expose (its declared capabilities,
narrowed to the grants). Exits 0 when allowed, 4 when denied.

` + policyHelp,
		Example: `  toolgate policy check --policy policy.json --principal alice file.read
  toolgate policy check --principal alice --allow filesystem.read:. file.read --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := g.lookup(args[0])
			if err != nil {
				return err
			}
			extra, err := parseAllow(allow)
			if err != nil {
				return usageErr("--allow: %v", err)
			}
			policy, perr := g.policy()
			if policy == nil {
				policy, _ = capability.NewPolicy(nil)
			}
			if who == "" {
				who = principal()
			}
			decl := e.Declaration()
			d := policy.Decide(who, decl.Key(), decl.RequiredCapabilities, extra, time.Now())
			v := decisionView{
				Allowed: d.Allowed(), DecisionID: d.ID, Principal: d.Principal, Tool: d.Tool,
				Required: capability.Strings(d.Required), Granted: capability.Strings(d.Granted),
				Missing: capability.Strings(d.Missing), PolicyRevision: d.PolicyRevision, Reason: d.Reason, At: d.At,
				Effective: []string{},
			}
			if d.Allowed() {
				v.Effective = capability.Strings(d.Effective())
			}
			if g.json {
				if err := encodeJSON(stdio, v); err != nil {
					return internalErr(err)
				}
			} else {
				printDecision(stdio, v, policy.Grants(who), extra)
				if perr != nil {
					fmt.Fprintf(stdio.Err, "toolgate: %v\n", perr)
				}
			}
			if !d.Allowed() {
				return &exitError{code: ExitDenied}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&who, "principal", "", "the principal to decide for (default: cli:$USER)")
	cmd.Flags().StringArrayVar(&allow, "allow", nil, "a grant added for the call, as 'toolgate run --allow' (repeatable)")
	return cmd
}

func printDecision(stdio Stdio, v decisionView, held, extra []capability.Capability) {
	w := tabwriter.NewWriter(stdio.Out, 0, 4, 2, ' ', 0)
	if v.Allowed {
		fmt.Fprintf(stdio.Out, "ALLOWED: %s may run %s\n", v.Principal, v.Tool)
	} else {
		fmt.Fprintf(stdio.Out, "DENIED: %s may not run %s\n", v.Principal, v.Tool)
	}
	fmt.Fprintf(w, "policy revision\t%s\n", v.PolicyRevision)
	if v.Reason != "" {
		fmt.Fprintf(w, "reason\t%s\n", v.Reason)
	}
	if len(v.Required) == 0 {
		fmt.Fprintln(w, "requires\tnothing")
	}
	grants := append(append([]capability.Capability{}, held...), extra...)
	for _, r := range v.Required {
		req := capability.MustParse(r)
		var by []string
		for _, gr := range grants {
			if v.Reason == "" && gr.Covers(req) {
				by = append(by, gr.String())
			}
		}
		if len(by) == 0 {
			fmt.Fprintf(w, "requires %s\tMISSING\n", r)
			continue
		}
		fmt.Fprintf(w, "requires %s\tmet by %s\n", r, strings.Join(by, ", "))
	}
	if v.Allowed {
		eff := strings.Join(v.Effective, ", ")
		if eff == "" {
			eff = "nothing"
		}
		fmt.Fprintf(w, "handles expose\t%s\n", eff)
	}
	w.Flush()
	if !v.Allowed && len(v.Missing) > 0 && v.Reason == "" {
		fmt.Fprintln(stdio.Out, denyHint(capabilitiesOf(v.Missing)))
	}
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
				return &exitError{code: ExitDenied, err: fmt.Errorf("%v (every decision is denied until it is fixed)", err)}
			}
			if policy == nil {
				return usageErr("no policy: pass --policy FILE or set TOOLGATE_POLICY")
			}
			if g.json {
				grants := map[string][]string{}
				for _, p := range policy.Principals() {
					grants[p] = capability.Strings(policy.Grants(p))
				}
				return encodeJSON(stdio, map[string]any{"revision": policy.Revision(), "principals": grants})
			}
			w := tabwriter.NewWriter(stdio.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "revision\t%s\n", policy.Revision())
			for _, p := range policy.Principals() {
				fmt.Fprintf(w, "%s\t%s\n", p, strings.Join(capability.Strings(policy.Grants(p)), ", "))
			}
			return w.Flush()
		},
	}
}
