package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/client"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/server"
)

// A program serves its runtime over HTTP until it stops, and keeps the
// runtime: Serve returns with it open (the calls the server started have
// ended), and the program closes it.
func ExampleServer_Serve() {
	dir, _ := os.MkdirTemp("", "toolgate-example")
	defer os.RemoveAll(dir)
	notes := filepath.Join(dir, "notes.txt")
	os.WriteFile(notes, []byte("hello"), 0o600)

	rt, err := tgruntime.Open(filepath.Join(dir, "toolgate.db"), &tgruntime.Options{
		Grants: map[string][]capability.Capability{"agent": {{Name: "filesystem.read", Scope: dir}}},
	})
	if err != nil {
		log.Fatal(err)
	}
	srv, err := server.New(rt, &server.Config{Tokens: []server.TokenConfig{
		{Principal: "agent", SHA256: server.HashToken("agent-token")},
	}}, nil)
	if err != nil {
		log.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, l) }()

	c, _ := client.New("http://"+l.Addr().String(), "agent-token", nil)
	res, err := c.Execute(context.Background(), client.Invocation{Tool: "file.read", Input: json.RawMessage(`{"path":"` + notes + `"}`)})
	fmt.Println("over HTTP:", res.State, err)

	stop()
	fmt.Println("Serve:", <-served)

	// The runtime is the program's, still open.
	r, err := rt.Execute(context.Background(), tgruntime.Invocation{Tool: "file.read", Principal: "agent", Input: json.RawMessage(`{"path":"` + notes + `"}`)})
	fmt.Println("after Serve:", r.State, err)

	closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Println("Close:", rt.Close(closeCtx))
	// Output:
	// over HTTP: COMPLETED <nil>
	// Serve: <nil>
	// after Serve: COMPLETED <nil>
	// Close: <nil>
}
