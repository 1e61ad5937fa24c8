package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/toolgate/toolgate/audit"
)

const approvalKeyHelp = `Signed approvals. The audit log proves that the record is consistent, not who
wrote it: whoever can write the database can append a well-formed approval.
A policy that lists approval keys closes that:

  {"version": 1, "principals": {...},
   "approvalKeys": {"cli:alice": ["alice+5c3e1a9b+AXt0..."],
                    "*":         ["server+0f2d4b6a+ATq8..."]}}

Under it, an approval counts only if it is signed by a key listed for its
approver ("*": for any approver, e.g. the key of a 'toolgate serve' that
authenticates its approvers itself). toolgate signs each decision with the
key in --approval-key, $TOOLGATE_APPROVAL_KEY, or the default file when it
exists ($XDG_CONFIG_HOME/toolgate/approval.key, ~/.config/toolgate/approval.key);
it refuses to record an approval it cannot sign with a listed key, and runs
no intent whose approval is not so signed (intent_unsigned, exit 4).
'toolgate audit verify --policy FILE' names every approval the policy's keys
do not prove. Keep each private key where the database's writers cannot read
it: the keys are what a forger lacks.`

// approvalKeyPath resolves the approval key's path: --approval-key,
// $TOOLGATE_APPROVAL_KEY, then the default file; explicit is true for the
// first two (the file must then exist).
func (g *globals) approvalKeyPath() (path string, explicit bool, err error) {
	return keyPath(g.approvalKey, "TOOLGATE_APPROVAL_KEY", "approval.key")
}

// loadApprovalKey reads the key that signs this command's decisions on
// intents: nil when none is named and the default file does not exist.
func (g *globals) loadApprovalKey() (*audit.SigningKey, error) {
	path, explicit, err := g.approvalKeyPath()
	if err != nil {
		return nil, nil // no home directory: no default key
	}
	b, err := readSmallFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !explicit:
		return nil, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, usageErr("approval key %s does not exist: create it with 'toolgate intent keygen NAME'", path)
	case err != nil:
		return nil, usageErr("approval key %s: %v", path, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 && g.stderr != nil {
		fmt.Fprintf(g.stderr, "warning: the approval key %s is accessible to other users (mode %v): chmod 600 it\n", path, fi.Mode().Perm())
	}
	key, err := audit.ParseSigningKey(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, usageErr("approval key %s: %v", path, err)
	}
	return key, nil
}

func newIntentKeygenCmd(g *globals, stdio Stdio) *cobra.Command {
	return &cobra.Command{
		Use:   "keygen NAME",
		Short: "Create the key that signs your approvals, and print the line the policy lists",
		Long: `Create a signing key named NAME at --approval-key, $TOOLGATE_APPROVAL_KEY, or
the default file, readable only by you, and print its public half: the line a
policy's approvalKeys lists for the approvers it may sign for. An existing
key is never overwritten: its public half is printed again.

` + approvalKeyHelp,
		Example: `  toolgate intent keygen alice
  toolgate --approval-key /etc/toolgate/server.key intent keygen server`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, _, err := g.approvalKeyPath()
			if err != nil {
				return usageErr("no approval key path: set --approval-key or TOOLGATE_APPROVAL_KEY (%v)", err)
			}
			key, err := createSigningKey(path, args[0], "approval key")
			created := err == nil
			if errors.Is(err, fs.ErrExist) {
				key, err = g.loadApprovalKey()
				if err == nil && key == nil {
					err = usageErr("approval key %s: it exists but could not be read", path)
				}
			}
			if err != nil {
				return err
			}
			pub := key.Verifier().String()
			if g.json {
				return encodeJSON(stdio, map[string]any{"path": path, "created": created, "name": key.Verifier().Name(), "verifierKey": pub})
			}
			if created {
				fmt.Fprintf(stdio.Err, "created %s (keep it private: it signs your approvals)\n", path)
			} else {
				fmt.Fprintf(stdio.Err, "%s exists; its public key:\n", path)
			}
			fmt.Fprintln(stdio.Out, pub)
			// The approver it signs for is the principal the approvals name:
			// 'intent approve --approver NAME', or the token's principal of a
			// server's approver, whose key signs for all ("*").
			name := key.Verifier().Name()
			fmt.Fprintf(stdio.Err, "list it in the policy's approvalKeys for the approvers it signs for, e.g.\n  \"approvalKeys\": {%q: [%q]}\n"+
				"(%s approves with 'toolgate intent approve ID --approver %s'; a key of 'toolgate serve' or 'toolgate mcp' signs for every approver: list it under \"*\")\n",
				name, pub, name, name)
			return nil
		},
	}
}
