package cli

import (
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/server"
)

// The web UI's requests are in serve's request log, with the principal,
// never the session cookie.
func TestServe_UIRequestLog(t *testing.T) {
	dir := workdir(t)
	cfg := filepath.Join(dir, "server.json")
	must(t, os.WriteFile(cfg, []byte(`{"tokens":[{"principal":"alice","sha256":"`+server.HashToken("tok")+`","approver":true}]}`), 0o600))
	addr, stderr := startServe(t, "--config", cfg)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	resp, err := c.PostForm("http://"+addr+"/ui/login", url.Values{"token": {"tok"}}) // then GET /ui/intents
	must(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/ui/intents" {
		t.Fatalf("login: %d at %s", resp.StatusCode, resp.Request.URL)
	}
	u, _ := url.Parse("http://" + addr + "/ui/")
	var cookie string
	for _, k := range jar.Cookies(u) {
		cookie = k.Value
	}
	var line string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, "msg=request") && strings.Contains(l, "method=GET") && strings.Contains(l, "path=/ui/intents ") {
			line = l
		}
	}
	if line == "" || !strings.Contains(line, "principal=alice") || !strings.Contains(line, "status=200") {
		t.Errorf("no request log line for GET /ui/intents by alice:\n%s", stderr.String())
	}
	if cookie == "" || strings.Contains(stderr.String(), cookie) {
		t.Errorf("the session cookie (%q) is in the log:\n%s", cookie, stderr.String())
	}
}
