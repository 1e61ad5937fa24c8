package webui_test

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/txn"
)

var (
	olderRE  = regexp.MustCompile(`href="([^"]+)" id="older"`)
	newestRE = regexp.MustCompile(`href="([^"]+)" id="newest"`)
	execRE   = regexp.MustCompile(`href="/ui/executions/([0-9a-f-]+)"`)
	intentRE = regexp.MustCompile(`<tr data-id="([0-9a-f-]+)">`)
)

// pages follows a list's "older" links from path on, returning each page's
// ids (matched by re) and checking each later page links to the newest.
func (b *browser) pages(path string, re *regexp.Regexp) [][]string {
	b.t.Helper()
	var out [][]string
	for path != "" && len(out) < 100 {
		resp, body := b.get(path)
		if resp.StatusCode != http.StatusOK {
			b.t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		var ids []string
		for _, m := range re.FindAllStringSubmatch(body, -1) {
			ids = append(ids, m[1])
		}
		if len(out) > 0 && newestRE.FindStringSubmatch(body) == nil {
			b.t.Errorf("%s: no link to the newest page", path)
		}
		out = append(out, ids)
		path = ""
		if m := olderRE.FindStringSubmatch(body); m != nil {
			path = html.UnescapeString(m[1])
		}
	}
	return out
}

// newestFirst is ids reversed.
func newestFirst(ids []string) []string {
	out := slices.Clone(ids)
	slices.Reverse(out)
	return out
}

// The executions list shows 50 a page, newest first, with an "older" link
// to the next page that keeps the filters; the pages together are every
// matching execution once. A non-approver's pages hold only its own.
func TestExecutions_Pages(t *testing.T) {
	f := newFixture(t, false, nil, nil)
	f.fill(t, 120, 0)
	for range 7 {
		f.rt.Execute(context.Background(), tgruntime.Invocation{Tool: "test.echo", Input: json.RawMessage(`{"msg":"m"}`), Principal: "mallory"})
	}
	recs, err := f.rt.Executions(context.Background(), txn.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var all, agents, mallorys []string
	for _, r := range recs {
		all = append(all, r.ExecutionID)
		if r.Principal == "agent" {
			agents = append(agents, r.ExecutionID)
		} else {
			mallorys = append(mallorys, r.ExecutionID)
		}
	}
	b := f.browser(t)
	b.login(aliceToken)
	check := func(b *browser, path string, want []string) {
		t.Helper()
		pages := b.pages(path, execRE)
		var sizes []int
		for _, p := range pages {
			sizes = append(sizes, len(p))
		}
		wantSizes := []int{}
		for n := len(want); n > 0; n -= 50 {
			wantSizes = append(wantSizes, min(n, 50))
		}
		if !slices.Equal(sizes, wantSizes) {
			t.Errorf("%s: pages of %v, want %v", path, sizes, wantSizes)
		}
		if got := slices.Concat(pages...); !slices.Equal(got, newestFirst(want)) {
			t.Errorf("%s: the pages hold %d ids, not the %d wanted newest first", path, len(got), len(want))
		}
	}
	check(b, "/ui/executions", all)
	check(b, "/ui/executions?principal=agent&state=DENIED", agents)
	m := f.browser(t)
	m.login(malloryToken)
	check(m, "/ui/executions", mallorys)

	if _, body := b.get("/ui/executions?principal=agent"); !strings.Contains(body, "principal=agent") || olderRE.FindStringSubmatch(body) == nil ||
		!strings.Contains(html.UnescapeString(olderRE.FindStringSubmatch(body)[1]), "principal=agent") {
		t.Errorf("the older link drops the filter")
	}
	for _, bad := range []string{"before=%3Cscript%3E", "before=" + strings.Repeat("a", 200)} {
		if resp, _ := b.get("/ui/executions?" + bad); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", bad, resp.StatusCode)
		}
	}
}

// The intents list shows 50 a page too, the live refresh the newest 50 and
// whether there are more.
func TestIntents_Pages(t *testing.T) {
	f := newFixture(t, false, nil, nil)
	f.fill(t, 0, 120)
	ins, err := f.rt.Intents(context.Background(), tgruntime.IntentFilter{Status: tgruntime.IntentPending})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, in := range ins {
		want = append(want, in.ID)
	}
	want = newestFirst(want)
	b := f.browser(t)
	b.login(aliceToken)
	pages := b.pages("/ui/intents", intentRE)
	if len(pages) != 3 || len(pages[0]) != 50 || len(pages[2]) != 20 || !slices.Equal(slices.Concat(pages...), want) {
		t.Fatalf("pages of %d, %d...: not the %d pending intents newest first", len(pages), len(pages[0]), len(want))
	}
	_, body := b.get("/ui/intents")
	if older := olderRE.FindStringSubmatch(body); older == nil || !strings.Contains(older[1], "status=pending") {
		t.Errorf("the older link does not keep the status: %v", older)
	}
	_, page2 := b.get(html.UnescapeString(olderRE.FindStringSubmatch(body)[1]))
	if strings.Contains(page2, "data-live") {
		t.Error("an older page refreshes itself live with the newest intents")
	}
	_, live := b.get("/ui/intents/live")
	var got struct {
		Intents []struct{ ID string }
		More    bool
	}
	if err := json.Unmarshal([]byte(live), &got); err != nil || len(got.Intents) != 50 || !got.More || got.Intents[0].ID != want[0] {
		t.Errorf("live: %d intents, more %v, first %v (%v); want the newest 50 and more", len(got.Intents), got.More, got.Intents[:min(1, len(got.Intents))], err)
	}
	if resp, _ := b.get("/ui/intents?before=nonsense"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a damaged cursor: %d, want 400", resp.StatusCode)
	}
}
