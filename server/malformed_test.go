package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/txn"
)

// Requests net/http refuses before any handler runs (a malformed request
// line, a transfer coding it does not know, headers past the limit, no
// Host, an HTTP version it does not speak, an Expect it cannot meet) are
// answered with RFC 9457 problem documents too, as are the body errors a
// handler meets; none of them runs anything.
func TestServer_MalformedRequestsAreProblems(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.http.Close() // Serve's own listener: the path toolgate serve takes
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- f.srv.Serve(ctx, l) }()
	defer func() { stop(); <-served }()
	addr := l.Addr().String()

	const exec = "POST /v1/tools/test.echo/execute HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + agentToken + "\r\nContent-Type: application/json\r\n"
	for _, tc := range []struct {
		name, req  string
		closeWrite bool // the client stops sending: a body cut short
		want       int
	}{
		{"malformed request line", "GARBAGE\r\n\r\n", false, 400},
		{"request line without a version", "GET /healthz\r\nHost: x\r\n\r\n", false, 400},
		{"unknown HTTP version", "GET /healthz HTTP/2.5\r\nHost: x\r\n\r\n", false, 505},
		{"no Host", "GET /healthz HTTP/1.1\r\n\r\n", false, 400},
		{"two Hosts", "GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", false, 400},
		{"invalid header name", "GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n", false, 400},
		{"header line without a colon", "GET /healthz HTTP/1.1\r\nHost: x\r\nnocolon\r\n\r\n", false, 400},
		{"headers too large", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 80<<10) + "\r\n\r\n", false, 431},
		{"unknown transfer coding", exec + "Transfer-Encoding: gzip\r\n\r\n", false, 501},
		{"bad Content-Length", exec + "Content-Length: ten\r\n\r\n", false, 400},
		{"two Content-Lengths", exec + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", false, 400},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", false, 400},
		{"CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", false, 400},
		{"unmet Expect", "GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n\r\n", false, 417},
		{"malformed chunked body", exec + "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", false, 400},
		{"body cut short", exec + "Content-Length: 100\r\n\r\n{\"input\":", true, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(conn, tc.req); err != nil {
				t.Fatal(err)
			}
			if tc.closeWrite {
				conn.(*net.TCPConn).CloseWrite()
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			var p map[string]any
			if resp.StatusCode != tc.want || resp.Header.Get("Content-Type") != "application/problem+json" || json.Unmarshal(body, &p) != nil ||
				p["status"] != float64(tc.want) || p["title"] == nil || !strings.HasPrefix(p["type"].(string), "https://toolgate.dev/problems/") {
				t.Errorf("%d %q %s; want a %d problem document", resp.StatusCode, resp.Header.Get("Content-Type"), body, tc.want)
			}
		})
	}
	if recs := f.records(t, txn.Filter{}); len(recs) != 0 {
		t.Errorf("%d executions recorded", len(recs))
	}
	// Well-formed requests pass through untouched, on a connection kept
	// alive, answers larger than a write buffer included.
	c, err := client.New("http://"+addr, agentToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("y", 64)
	for range 3 {
		if res, err := c.Execute(context.Background(), inv("test.echo", `{"msg":"`+big+`"}`)); err != nil || res.State != "COMPLETED" {
			t.Fatalf("a well-formed call: %v", err)
		}
		if ts, err := c.Tools(context.Background()); err != nil || len(ts) != 4 {
			t.Fatalf("a well-formed read: %d tools, %v", len(ts), err)
		}
	}
}
