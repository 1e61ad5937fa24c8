package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
)

// net/http refuses some requests itself, before any handler runs: a
// malformed request line or header, no Host, an HTTP version it does not
// speak, headers past MaxHeaderBytes (431), a transfer coding it does not
// know (501), an Expect other than 100-continue (417). It writes those
// answers straight to the connection, in plain text, and offers no hook to
// shape them. refusalListener wraps the server's connections and rewrites
// exactly those answers, as net/http writes them (one Write each, in a form
// no handler of this server produces), into RFC 9457 problem documents; any
// other write passes through untouched.
type refusalListener struct{ net.Listener }

func (l refusalListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return refusalConn{c}, nil
}

type refusalConn struct{ net.Conn }

// Write sends b, or the problem document of the refusal b is.
func (c refusalConn) Write(b []byte) (int, error) {
	p := refusalProblem(b)
	if p == nil {
		return c.Conn.Write(b)
	}
	if _, err := c.Conn.Write(p); err != nil {
		return 0, err
	}
	return len(b), nil
}

// CloseWrite half-closes a TCP connection, as net/http does after a 431 so
// that the client reads the answer rather than a reset.
func (c refusalConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// plainRefusal is how net/http's refusals continue after their status line
// ("HTTP/1.1 400 Bad Request", maybe with ": " and a reason); the body
// repeats the status.
const plainRefusal = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// refusalTypes are the problem types of the refusals, by status.
var refusalTypes = map[int]string{
	http.StatusBadRequest:                  "malformed-request",
	http.StatusRequestHeaderFieldsTooLarge: "headers-too-large",
	http.StatusNotImplemented:              "unsupported-transfer-encoding",
	http.StatusHTTPVersionNotSupported:     "http-version-not-supported",
	http.StatusExpectationFailed:           "expectation-failed",
}

// refusalProblem returns the whole answer that replaces the refusal b, or
// nil if b is not one. JSON bodies never hold a raw line break, so no
// piece of a handler's answer, however the buffers cut it, can match.
func refusalProblem(b []byte) []byte {
	line, rest, ok := bytes.Cut(b, []byte("\r\n"))
	status, ok2 := bytes.CutPrefix(line, []byte("HTTP/1.1 "))
	if !ok || !ok2 || len(status) < 4 || status[3] != ' ' {
		return nil
	}
	code, err := strconv.Atoi(string(status[:3]))
	if err != nil || refusalTypes[code] == "" {
		return nil
	}
	var reason string
	switch {
	case bytes.HasPrefix(b[len(line):], []byte(plainRefusal)):
		// "HTTP/1.1 400 Bad Request: missing required Host header": the
		// reason is net/http's own words, never the request's.
		if _, r, found := bytes.Cut(status[4:], []byte(": ")); found {
			reason = string(r)
		}
	case code == http.StatusExpectationFailed && bytes.HasSuffix(rest, []byte("\r\n\r\n")) &&
		bytes.Contains(rest, []byte("Content-Length: 0\r\n")) && bytes.Contains(rest, []byte("Connection: close\r\n")):
		reason = "the server meets no expectation but 100-continue"
	default:
		return nil
	}
	title := http.StatusText(code)
	detail := refusalDetail(code, reason)
	doc, _ := json.Marshal(map[string]any{"type": "https://toolgate.dev/problems/" + refusalTypes[code], "title": title, "status": code, "detail": detail})
	doc = append(doc, '\n')
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/problem+json\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		code, title, len(doc), doc)
}

// refusalDetail says what was wrong, in the terms of the request.
func refusalDetail(code int, reason string) string {
	switch code {
	case http.StatusRequestHeaderFieldsTooLarge:
		return fmt.Sprintf("the request line and headers are limited to %d bytes", maxHeaderBytes)
	case http.StatusNotImplemented:
		return "the Transfer-Encoding is not one the server decodes (chunked, or none)"
	case http.StatusHTTPVersionNotSupported:
		return "the server speaks HTTP/1.0 and HTTP/1.1"
	}
	if reason == "" {
		return "the request is not well-formed HTTP/1.1 (its request line, a header, Host or Content-Length); the connection is closed"
	}
	return apiDetail(reason) + "; the connection is closed"
}
