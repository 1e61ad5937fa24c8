package server_test

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/server"
)

// The notify config: URLs must be http(s), header values are named
// environment variables (never the value), resolved when asked, and a
// variable that is not set is an error.
func TestLoadConfig_Notify(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"relative url":       `{"notify":{"webhook":{"url":"/hook"}}}`,
		"ftp url":            `{"notify":{"webhook":{"url":"ftp://h/x"}}}`,
		"literal secret":     `{"notify":{"webhook":{"url":"https://h/x","headers":{"Authorization":"Bearer abc"}}}}`,
		"bad header name":    `{"notify":{"webhook":{"url":"https://h/x","headers":{"Bad Header":"X"}}}}`,
		"bad base url":       `{"notify":{"baseURL":"toolgate.local"}}`,
		"unknown notify key": `{"notify":{"slack":{}}}`,
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".json")
		writeFile(t, p, body)
		if _, err := server.LoadConfig(p); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	p := filepath.Join(dir, "ok.json")
	writeFile(t, p, `{"notify":{"baseURL":"https://tg.example","webhook":{"url":"https://h/x","headers":{"Authorization":"TG_HOOK_AUTH"}}}}`)
	c, err := server.LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TG_HOOK_AUTH": "Bearer s3cret"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	h, err := c.Notify.Webhook.ResolveHeaders(lookup)
	if err != nil || h.Get("Authorization") != "Bearer s3cret" {
		t.Fatalf("ResolveHeaders: %v %v", h, err)
	}
	delete(env, "TG_HOOK_AUTH")
	if _, err := c.Notify.Webhook.ResolveHeaders(lookup); err == nil || !strings.Contains(err.Error(), "TG_HOOK_AUTH") {
		t.Fatalf("a missing variable: %v", err)
	}
}

// Options.Handlers are served under their prefix, ahead of the API's path
// rules; every other path is the API's.
func TestServer_Handlers(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ui " + r.URL.Path)) })
	srv, err := server.New(nil, &server.Config{}, &server.Options{Handlers: map[string]http.Handler{"/ui/": ui}})
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{"/ui/": "ui /ui/", "/ui": "ui /ui", "/ui/intents/x": "ui /ui/intents/x"} {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Body.String() != want {
			t.Errorf("GET %s: %q, want %q", path, rec.Body.String(), want)
		}
	}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/uix", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET /uix: %d, want the API's 404", rec.Code)
	}
}
