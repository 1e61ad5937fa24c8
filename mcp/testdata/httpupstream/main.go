// Command httpupstream is an MCP server over streamable HTTP that the
// gateway tests put behind toolgate: a real server built from the SDK, in
// a process of its own, built without the race detector. Its tool huge
// answers 20 MiB of text, ping answers "pong". It listens on a free
// loopback port, prints "URL http://..." on its standard output once it
// does, and exits when its standard input closes. $UPSTREAM_JSON=1 makes it
// answer with JSON instead of an event stream.
//
// A process of its own, because the 20 MiB answer is the upstream's work,
// not toolgate's: encoded by the SDK under the race detector, in the test's
// process, it took seconds of CPU, and on a loaded machine most of the
// call's deadline.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	s := sdk.NewServer(&sdk.Implementation{Name: "web", Version: "0.3.0"}, nil)
	s.AddTool(&sdk.Tool{Name: "huge", Description: "answers 20 MiB", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, r *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Repeat("x", 20<<20)}}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "ping", Description: "answers", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, r *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "pong"}}}, nil
		})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s },
		&sdk.StreamableHTTPOptions{JSONResponse: os.Getenv("UPSTREAM_JSON") == "1"})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	fmt.Printf("URL http://%s\n", l.Addr())
	if err := http.Serve(l, h); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
