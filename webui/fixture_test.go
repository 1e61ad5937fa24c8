package webui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/capability"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/testdb"
	"github.com/toolgate/toolgate/internal/testkit"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/server"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/webui"
)

const msgSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {"msg": {"type": "string", "description": "a message", "maxLength": 1024}},
  "required": ["msg"],
  "additionalProperties": false
}`

type msg struct {
	Msg string `json:"msg"`
}

// The principals: alice approves; agent and mallory propose; the last
// one's name is markup, to be shown as text.
const (
	aliceToken   = "alice-secret-token"
	agentToken   = "agent-secret-token"
	malloryToken = "mallory-secret-token"
	markupToken  = "markup-secret-token"
	markupName   = `<b id="injected-principal">eve</b><script>window.__pwned="principal"</script>`
)

func testConfig() *server.Config {
	return &server.Config{Tokens: []server.TokenConfig{
		{Principal: "alice", SHA256: server.HashToken(aliceToken), Approver: true},
		{Principal: "agent", SHA256: server.HashToken(agentToken)},
		{Principal: "mallory", SHA256: server.HashToken(malloryToken)},
		{Principal: markupName, SHA256: server.HashToken(markupToken)},
	}}
}

// uiConfig is testConfig's tokens as the UI's config, as toolgate serve
// builds it from its config file.
func uiConfig() *webui.Config {
	c := &webui.Config{}
	for _, t := range testConfig().Tokens {
		c.Tokens = append(c.Tokens, webui.Token{Principal: t.Principal, SHA256: t.SHA256, Approver: t.Approver})
	}
	return c
}

type fixture struct {
	rt  *tgruntime.Runtime
	ui  *webui.UI
	srv *httptest.Server
	url string
	now *clock
}

// clock is a settable clock for the UI (sessions' expiry).
type clock struct{ d time.Duration }

func (c *clock) now() time.Time { return time.Now().Add(c.d) }

func echoTool() tools.Tool {
	return tools.NewTyped(tools.Declaration{
		ID: "test.echo", Version: "1.0.0", Name: "echo", Description: "Echoes its message and stores it under test/<msg>.",
		InputSchema: json.RawMessage(msgSchema), OutputSchema: json.RawMessage(msgSchema),
		RequiredCapabilities: []capability.Capability{capability.MustParse("state.write:test")},
		ResourceLimits:       tools.ResourceLimits{MaxExecutionTime: 30 * time.Second},
		RequiresApproval:     true,
	}, func(ctx context.Context, env *tools.Env, in msg) (msg, error) {
		return in, env.State.Put("test", "last", []byte(in.Msg))
	})
}

// newFixture serves the API and the UI over real HTTP on loopback (TLS
// when tls is set), with the runtime's proposals going to onPropose.
func newFixture(t testing.TB, tls bool, onPropose func(*tgruntime.Intent), uopts *webui.Options, adjust ...func(*tgruntime.Options)) *fixture {
	t.Helper()
	reg := tools.NewRegistry()
	for _, tl := range append([]tools.Tool{echoTool()}, tools.ProcessTools()...) {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	grants := map[string][]capability.Capability{}
	for _, p := range []string{"alice", "agent", "mallory"} { // the markup principal holds nothing: the policy allows no principal with spaces
		grants[p] = []capability.Capability{capability.MustParse("state.write:test")}
	}
	ropts := &tgruntime.Options{Registry: reg, Grants: grants, NoSync: true, OnPropose: onPropose}
	for _, a := range adjust {
		a(ropts)
	}
	path := testdb.Path(t, "toolgate.db")
	rt, err := tgruntime.Open(path, ropts)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Check(t, rt, path) // closes it, after the cleanup below
	f := &fixture{rt: rt, now: &clock{}}
	if uopts == nil {
		uopts = &webui.Options{}
	}
	uopts.Now = f.now.now
	f.ui, err = webui.New(rt, uiConfig(), uopts)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(rt, testConfig(), &server.Options{Handlers: map[string]http.Handler{"/ui/": f.ui}})
	if err != nil {
		t.Fatal(err)
	}
	if tls {
		f.srv = httptest.NewTLSServer(srv.Handler())
	} else {
		f.srv = httptest.NewServer(srv.Handler())
	}
	f.url = f.srv.URL
	t.Cleanup(func() {
		f.srv.Close()
	})
	return f
}

// api is a client of the HTTP API with token.
func (f *fixture) api(t testing.TB, token string) *client.Client {
	t.Helper()
	c, err := client.New(f.url, token, f.srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// propose proposes test.echo with msg as the token's principal, over the
// API. The body is sent as written, markup unescaped (the client package's
// encoder would escape it as \u003c).
func (f *fixture) propose(t testing.TB, token, m string) *client.Intent {
	t.Helper()
	body := `{"tool":"test.echo","input":{"msg":` + string(mustJSON(t, m)) + `}}`
	req, _ := http.NewRequest("POST", f.url+"/v1/intents", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var in client.Intent
	if err := json.NewDecoder(resp.Body).Decode(&in); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("propose: %d %v", resp.StatusCode, err)
	}
	return &in
}

// mustJSON encodes v, markup as is (no \u003c escapes): the pages must
// escape it themselves.
func mustJSON(t testing.TB, v any) json.RawMessage {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSpace(b.Bytes())
}

// browser is an HTTP client with its own cookie jar that does not follow
// redirects: a session as a browser holds it.
type browser struct {
	t   *testing.T
	f   *fixture
	c   *http.Client
	jar *cookiejar.Jar
}

func (f *fixture) browser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	c := *f.srv.Client()
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &browser{t: t, f: f, c: &c, jar: jar}
}

// login logs in with token and returns the login's answer.
func (b *browser) login(token string) *http.Response {
	b.t.Helper()
	resp, err := b.c.PostForm(b.f.url+"/ui/login", url.Values{"token": {token}})
	if err != nil {
		b.t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// get fetches path, returning the answer and its body.
func (b *browser) get(path string) (*http.Response, string) {
	b.t.Helper()
	resp, err := b.c.Get(b.f.url + path)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// post posts form to path.
func (b *browser) post(path string, form url.Values, header ...string) (*http.Response, string) {
	b.t.Helper()
	req, _ := http.NewRequest("POST", b.f.url+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the session's CSRF token, read from a page's forms.
func (b *browser) csrf() string {
	b.t.Helper()
	_, body := b.get("/ui/intents")
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		b.t.Fatalf("no CSRF token in the page:\n%s", body)
	}
	return m[1]
}

// cookie is the session cookie the browser holds, "" if none.
func (b *browser) cookie() string {
	u, _ := url.Parse(b.f.url + "/ui/")
	for _, c := range b.jar.Cookies(u) {
		if c.Name == "toolgate_session" {
			return c.Value
		}
	}
	return ""
}

func (f *fixture) status(t testing.TB, id string) string {
	t.Helper()
	in, err := f.rt.Intent(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return in.Status
}

func (o webuiOpts) o() *webui.Options { return &webui.Options{SessionTTL: o.SessionTTL} }
