package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// A check's status.
const (
	checkOK          = "ok"
	checkFallback    = "fallback"     // works, by a weaker method: the detail says what it can and cannot do
	checkNotEnforced = "not_enforced" // this limit is not enforced here; the detail says why
	checkFailed      = "failed"       // broken: toolgate cannot work as configured
)

type check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

func newDoctorCmd(g *globals, stdio Stdio) *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check the database, the policy, the registry, and which limits this machine can enforce",
		Long: `Check what toolgate needs and report, for each resource limit, whether this
machine enforces it and how: ok, fallback (a weaker method, with what it can
and cannot do), or not_enforced (and why). Nothing is skipped silently.
Exits 1 when something is broken (the database cannot be opened, the policy
is invalid, the registry file does not load), 0 otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			g.ownWarnings = true // the MCP servers' checks show them
			checks := []check{g.checkDatabase(cmd.Context()), g.checkPolicy(), g.checkApprovalKey(), g.checkRegistry()}
			checks = append(checks, checkMCPServers(g.reg, g.gateway)...)
			checks = append(checks, check{"filesystem handles", checkOK,
				"confined with os.Root at the granted scopes: no '..', absolute-path or symbolic-link escape"})
			checks = append(checks, check{"maxExecutionTime (in-process tools)", checkOK,
				"context deadline; Execute returns at the deadline even if the tool ignores it (its goroutine is abandoned, not stopped)"})
			for _, s := range tools.ProcessSupport() {
				c := check{Name: s.Name, Status: checkOK, Detail: s.Detail}
				switch {
				case !s.OK:
					c.Status = checkNotEnforced
				case s.Fallback:
					c.Status = checkFallback
				}
				checks = append(checks, c)
			}
			checks = append(checks,
				check{"maxMemory (in-process tools)", checkNotEnforced,
					"Go cannot bound one goroutine's memory: in-process tools are trusted code. The runtime bounds what it holds for a tool (its buffered state writes, its output); isolation is enforced for process tools"},
				check{"maxFileSize (in-process tools)", checkOK, "the filesystem handle refuses writes past it (a tool that bypasses its handles is not bounded: in-process tools are trusted code)"},
				check{"output bytes", checkOK, "maxOutputBytes checked before the output is accepted"},
			)
			broken := false
			for _, c := range checks {
				broken = broken || c.Status == checkFailed
			}
			for i := range checks {
				checks[i].Detail = userText(checks[i].Detail)
			}
			if g.json {
				if err := encodeJSON(stdio, map[string]any{"checks": checks, "ok": !broken}); err != nil {
					return internalErr(err)
				}
			} else {
				tw := tabwriter.NewWriter(stdio.Out, 0, 4, 2, ' ', 0)
				for _, c := range checks {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, c.Status, c.Detail)
				}
				tw.Flush()
			}
			if broken {
				return &exitError{code: ExitInternal}
			}
			return nil
		},
	}
}

// failed is c failed with err, in the user's terms.
func failed(c check, err error) check {
	c.Status, c.Detail = checkFailed, tgruntime.Message(err)
	return c
}

// userText is a detail line as a person reads it: the text of a stored
// message or of an error formatted with %v is in the user's terms too
// (tgruntime.Message: no Go package prefixes, no system call names).
func userText(s string) string { return tgruntime.Message(errors.New(s)) }

// exists reports whether there is a file (of any kind) at path.
func exists(path string) bool {
	_, err := os.Stat(path)
	return !os.IsNotExist(err)
}

func (g *globals) checkDatabase(ctx context.Context) check {
	c := check{Name: "database"}
	path, err := g.dbPath()
	if err != nil {
		return failed(c, err)
	}
	shown := txn.ShownPath(path) // a postgres:// URL without its password
	pg := txn.IsPostgresURL(path)
	if !pg && !exists(path) { // a URL is not a file
		dir := filepath.Dir(path)
		for ; dir != "/" && dir != "."; dir = filepath.Dir(dir) {
			if _, err := os.Stat(dir); err == nil {
				break
			}
		}
		probe, err := os.CreateTemp(dir, ".toolgate-doctor-")
		if err != nil {
			// The probe's name is the doctor's, not the user's: say why
			// no file can be created in dir.
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			c.Status, c.Detail = checkFailed, fmt.Sprintf("%s does not exist and cannot be created: no file can be created in %s: %s", path, dir, tgruntime.Message(err))
			return c
		}
		probe.Close()
		os.Remove(probe.Name())
		c.Status, c.Detail = checkOK, path+" (not created yet; the first run creates it)"
		return c
	}
	store, err := g.openReadOnly()
	if err != nil {
		if ee, ok := err.(*exitError); ok && ee.err != nil {
			err = ee.err
		}
		return failed(c, err)
	}
	if store == nil {
		c.Status, c.Detail = checkOK, shown+" (empty)"
		if pg {
			c.Detail = shown + " (empty: no toolgate schema yet; the first toolgate run or serve creates it)"
		}
		return c
	}
	defer store.Close()
	recs, err := store.List(ctx, txn.Filter{})
	if err != nil {
		return failed(c, err)
	}
	backend, err := store.Backend(ctx) // which backend, and its version
	if err != nil {
		return failed(c, err)
	}
	c.Status, c.Detail = checkOK, fmt.Sprintf("%s (%s; %d executions recorded)", shown, backend, len(recs))
	parked, err := store.StateValues(ctx, tgruntime.FailedWritesNamespace)
	if err != nil {
		return failed(c, err)
	}
	if len(parked) > 0 {
		var first struct {
			Intent struct{ Root, Target, Staged string } `json:"intent"`
			Error  string                                `json:"error"`
		}
		for _, b := range parked {
			json.Unmarshal(b, &first)
			break
		}
		c.Status = checkFailed
		c.Detail += fmt.Sprintf("; %d committed file writes could not be made visible (e.g. %s: %s); their staged files are kept next to their targets (%s)",
			len(parked), filepath.Join(first.Intent.Root, first.Intent.Target), first.Error, first.Intent.Staged)
	}
	return c
}

func (g *globals) checkPolicy() check {
	c := check{Name: "policy"}
	p, err := g.policy()
	switch {
	case err != nil:
		c.Status, c.Detail = checkFailed, tgruntime.Message(err)+": every capability is denied until it is fixed"
	case p == nil:
		c.Status, c.Detail = checkOK, "none (--policy, $TOOLGATE_POLICY): nothing is granted but what --allow adds for one call"
	default:
		c.Status, c.Detail = checkOK, fmt.Sprintf("%d principals, revision %s", len(p.Principals()), p.Revision())
		if keys := p.ApprovalKeys(); len(keys) > 0 {
			c.Detail += fmt.Sprintf("; approvals count only signed by a key it lists (keys for %d approvers)", len(keys))
		}
	}
	return c
}

// checkApprovalKey says whether decisions made here are signed, and, when
// the policy lists approval keys, whether this key is one of them.
func (g *globals) checkApprovalKey() check {
	c := check{Name: "approval key"}
	key, err := g.loadApprovalKey()
	if err != nil {
		if ee, ok := err.(*exitError); ok && ee.err != nil {
			err = ee.err
		}
		c.Status, c.Detail = checkFailed, tgruntime.Message(err)+": approving here fails until it is fixed"
		return c
	}
	var keys map[string][]string
	if p, _ := g.policy(); p != nil {
		keys = p.ApprovalKeys()
	}
	var listed []string
	if key != nil {
		pub := key.Verifier().String()
		for approver, ks := range keys {
			if slices.Contains(ks, pub) {
				listed = append(listed, approver)
			}
		}
		slices.Sort(listed)
	}
	required := len(keys) > 0
	switch {
	case key == nil && required:
		c.Status, c.Detail = checkFailed, "none (--approval-key, $TOOLGATE_APPROVAL_KEY, 'toolgate intent keygen'), and the policy requires signed approvals: approving here is refused"
	case key == nil:
		c.Status, c.Detail = checkOK, "none: decisions made here are not signed (see 'toolgate intent keygen')"
	case required && len(listed) == 0:
		c.Status, c.Detail = checkFailed, fmt.Sprintf("%s, which the policy's approvalKeys do not list: approving here is refused", key.Verifier())
	case required:
		c.Status, c.Detail = checkOK, fmt.Sprintf("%s, listed for %s", key.Verifier(), strings.Join(listed, ", "))
	default:
		c.Status, c.Detail = checkOK, fmt.Sprintf("%s: decisions made here are signed", key.Verifier())
	}
	return c
}

// checkRegistry loads the registry file (--registry, $TOOLGATE_REGISTRY),
// as every command that runs a tool does: a file that does not load fails
// them all.
func (g *globals) checkRegistry() check {
	c := check{Name: "registry"}
	path := g.registryPath
	if path == "" {
		path = os.Getenv("TOOLGATE_REGISTRY")
	}
	reg, err := g.registry()
	switch {
	case err != nil:
		c.Status, c.Detail = checkFailed, tgruntime.Message(err)+": no command can run a tool until it is fixed"
	case path == "":
		c.Status, c.Detail = checkOK, fmt.Sprintf("none (--registry, $TOOLGATE_REGISTRY): the %d built-in tools only", len(reg.Entries()))
	default:
		c.Status, c.Detail = checkOK, fmt.Sprintf("%s: %d tools, the built-in ones included", path, len(reg.Entries()))
	}
	return c
}
