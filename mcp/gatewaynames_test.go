package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/mcp"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

func TestMappedName(t *testing.T) {
	for name, want := range map[string]string{
		"echo":                              "echo",
		"read_file":                         "read_file",
		"a.b-c":                             "a.b-c",
		"greet (structured)":                "greet_structured",
		"greet (content with ResourceLink)": "greet_content_with_resource_link",
		"elicit (url)":                      "elicit_url",
		"getTinyImage":                      "get_tiny_image",
		"URL":                               "url",
		"__x__":                             "x",
		"9lives":                            "t9lives",
		"a--b":                              "a_b",
		"a/b":                               "a_b",
		"été":                               "t",
	} {
		if got := mcp.MappedName(name); got != want {
			t.Errorf("MappedName(%q) = %q, want %q", name, got, want)
		}
	}
	if got := mcp.MappedName("()"); !strings.HasPrefix(got, "tool-") || len(got) != len("tool-")+8 || got != mcp.MappedName("()") {
		t.Errorf(`MappedName("()") = %q`, got)
	}
}

// Upstream names an id cannot hold are mapped (getTinyImage is
// up.get_tiny_image, granted as mcp.call:up/get_tiny_image, and the call
// reaches the upstream under its own name); two names that map to one id
// are both left out, the warning naming both; a server version that is
// not a semantic version is said once, not once per tool; the upstream's
// standard error reaches toolgate's, each line prefixed with the server's
// name, escape sequences defused.
func TestGateway_NamesAndNoise(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("UPSTREAM_EXTRA", "getTinyImage,say (hello),say_hello")
	t.Setenv("UPSTREAM_HELLO", "1")
	file, log := upstreamFile(t, dir, "")
	body, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	body = bytes.Replace(body, []byte("env_inherit: [UPSTREAM_DRIFT]"), []byte("env_inherit: [UPSTREAM_EXTRA, UPSTREAM_HELLO, UPSTREAM_VERSION]"), 1)
	if err := os.WriteFile(file, body, 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	gw := mcp.NewGateway(&mcp.GatewayOptions{Stderr: &stderr})
	reg, err := tools.LoadRegistryFileWith(file, gw.Tools)
	if err != nil {
		gw.Close()
		t.Fatal(err)
	}
	e, err := reg.Lookup("up.get_tiny_image", "")
	if err != nil {
		t.Fatal(err)
	}
	if server, name, ok := mcp.Upstream(e.Tool()); !ok || server != "up" || name != "getTinyImage" {
		t.Errorf("Upstream: %q %q %v", server, name, ok)
	}
	for _, id := range []string{"up.say_hello"} {
		if _, err := reg.Lookup(id, ""); err == nil {
			t.Errorf("%s, a collision, is registered", id)
		}
	}
	warnings := strings.Join(gw.Warnings(), "\n")
	if strings.Count(warnings, `the server's tools "say (hello)" and "say_hello" all map to the id up.say_hello`) != 2 {
		t.Errorf("warnings:\n%s", warnings)
	}

	rt, err := tgruntime.Open(dir+"/tg.db", &tgruntime.Options{Registry: reg, OpenTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	out, err := rt.Execute(ctx, tgruntime.Invocation{Tool: "up.get_tiny_image", Input: json.RawMessage(`{"text":"hi"}`),
		Principal: "p", Grants: []capability.Capability{capability.MustParse("mcp.call:up/get_tiny_image")}})
	if err != nil || out.State != "COMPLETED" {
		t.Errorf("up.get_tiny_image: %v %+v", err, out)
	}
	if n := calls(t, log, "getTinyImage"); n != 1 {
		t.Errorf("the upstream got %d getTinyImage calls, want 1", n)
	}
	rt.Close(ctx)
	gw.Close()
	want := "toolgate: MCP server up: hello\ntoolgate: MCP server up: from ?[31mred\ntoolgate: MCP server up: no newline\n"
	if got := stderr.String(); got != want {
		t.Errorf("stderr:\n%q\nwant:\n%q", got, want)
	}

	// tools: takes the server's own names; a mapped one is pointed to.
	if err := os.WriteFile(file, append(body, []byte("    tools:\n      get_tiny_image: {idempotent: true}\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	gw = mcp.NewGateway(nil)
	_, err = tools.LoadRegistryFileWith(file, gw.Tools)
	gw.Close()
	if err == nil || !strings.Contains(err.Error(), `tool get_tiny_image (line 8) is not one the server lists (it is the id of its tool "getTinyImage": tools: takes the server's own names)`) {
		t.Errorf("tools: keyed by a mapped name: %v", err)
	}
	if err := os.WriteFile(file, body, 0o600); err != nil {
		t.Fatal(err)
	}

	t.Setenv("UPSTREAM_VERSION", "nightly")
	gw = mcp.NewGateway(nil)
	defer gw.Close()
	_, err = tools.LoadRegistryFileWith(file, gw.Tools)
	if n := strings.Count(err.Error(), "not a semantic version"); n != 1 {
		t.Errorf("the version problem is said %d times: %v", n, err)
	}
}
