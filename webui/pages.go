package webui

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/explain"
	"github.com/toolgate/toolgate/lifecycle"
	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
	"github.com/toolgate/toolgate/txn"
)

// page is what every template gets.
type page struct {
	Title     string
	Nav       string // the current section: intents, executions, audit
	Principal string
	Approver  bool
	CSRF      string
	Error     string
	Notice    string
	Data      any
}

var pageNames = []string{"login", "error", "intents", "intent", "executions", "execution", "audit"}

func (u *UI) parse() error {
	funcs := template.FuncMap{
		"ts":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000 UTC") },
		"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
		"ago": func(t time.Time) string { return ago(u.opts.Now().Sub(t)) },
		"dur": duration,
	}
	u.pages = map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return fmt.Errorf("webui: template %s: %w", name, err)
		}
		u.pages[name] = t
	}
	return nil
}

// render writes the page name with data; x is the session (nil: none).
func (u *UI) render(w http.ResponseWriter, r *http.Request, x *session, status int, name string, data any) {
	p := page{Nav: name, Data: data}
	if x != nil {
		p.Principal, p.Approver, p.CSRF = x.who.Principal, x.who.Approver, x.csrf
	}
	if m, ok := data.(map[string]any); ok {
		p.Error, _ = m["Error"].(string)
		p.Notice, _ = m["Notice"].(string)
		p.Title, _ = m["Title"].(string)
	}
	var b bytes.Buffer
	if err := u.pages[name].ExecuteTemplate(&b, "layout", p); err != nil {
		u.log.Error("ui: rendering a page", "page", name, "error", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

// fail answers an error page.
func (u *UI) fail(w http.ResponseWriter, r *http.Request, x *session, status int, msg string) {
	u.render(w, r, x, status, "error", map[string]any{"Title": http.StatusText(status), "Error": msg, "Status": status})
}

// storeFailed answers a store that could not be read.
func (u *UI) storeFailed(w http.ResponseWriter, r *http.Request, x *session, err error) {
	u.log.Error("ui: reading the store", "path", r.URL.Path, "error", err)
	u.fail(w, r, x, http.StatusServiceUnavailable, "The store could not be read; the server's log says why.")
}

// sees reports whether the session may see what principal did: an
// approver sees everything, anyone else their own (as the HTTP API).
func (x *session) sees(principal string) bool { return x.who.Approver || x.who.Principal == principal }

// --- intents

// intentRow is an intent in a list.
type intentRow struct {
	ID, Tool, Version, Proposer, Status, Preview, Link string
	ProposedAt                                         time.Time
	Age                                                string
}

// maxPreview bounds a one-line preview, in characters.
const maxPreview = 160

// preview is one line saying what an intent would do: a process tool's
// argv, else its compact input with the fields that decide first.
func (u *UI) preview(in *tgruntime.Intent) string { return previewOf(u.rt.Registry(), in) }

func previewOf(reg *tools.Registry, in *tgruntime.Intent) string {
	var s string
	if p := processOf(reg, in); p != nil {
		s = explain.QuoteArgs(append([]string{p.Command}, p.Args...))
	} else {
		s = decidingFirst(reg, in)
	}
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > maxPreview {
		s = string([]rune(s)[:maxPreview-1]) + "…"
	}
	return s
}

// decidingFields are input fields that say where a call acts, shown first
// in a preview when the tool's declaration does not name them (as input
// capabilities do).
var decidingFields = []string{"path", "command", "cwd", "url"}

// decidingFirst is the intent's input on one line, as display writes it,
// with the fields that decide what the call touches first: those its
// tool's input capabilities take a scope from (a file tool's path), then
// path, command, cwd and url, then the others in canonical order. A long
// content field can so never push the path out of a cut preview.
func decidingFirst(reg *tools.Registry, in *tgruntime.Intent) string {
	d := json.NewDecoder(bytes.NewReader(in.Input))
	d.UseNumber()
	var m map[string]any
	if d.Decode(&m) != nil || len(m) == 0 {
		return display(in.Input, "")
	}
	var first []string
	if reg != nil {
		if e, err := reg.Lookup(in.Tool, in.Version); err == nil {
			for _, ic := range e.Declaration().InputCapabilities {
				first = append(first, ic.ScopeFrom)
			}
		}
	}
	first = append(first, decidingFields...)
	var keys []string
	for _, k := range first {
		if _, ok := m[k]; ok && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(mustJSON(k))
		b.WriteByte(':')
		b.WriteString(display(mustJSON(m[k]), ""))
	}
	b.WriteByte('}')
	return b.String()
}

func mustJSON(v any) json.RawMessage {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if e.Encode(v) != nil {
		return nil
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// process is what the intent's process tool would run, nil for another
// tool.
func (u *UI) process(in *tgruntime.Intent) *tools.ProcessPreview {
	return processOf(u.rt.Registry(), in)
}

func processOf(reg *tools.Registry, in *tgruntime.Intent) *tools.ProcessPreview {
	if reg == nil {
		return nil
	}
	e, err := reg.Lookup(in.Tool, in.Version)
	if err != nil {
		return nil
	}
	if p, ok := e.Tool().(tools.Previewer); ok {
		pv, err := p.Preview(in.Input)
		if err == nil {
			return pv
		}
	}
	return nil
}

var intentStatuses = []string{tgruntime.IntentPending, tgruntime.IntentApproved, tgruntime.IntentRejected, tgruntime.IntentExecuted, "all"}

// pageSize is how many rows a list page shows, newest first; an "older"
// link carries a cursor to the next page.
const pageSize = 50

// listChunk is how many records a list page reads at a time.
const listChunk = 256

// maxCursor bounds a page link's cursor.
const maxCursor = 128

// intentCursor is where a page of intents starts: below the intent
// proposed at Nanos with the id ID (the runtime lists intents by proposal
// time, then id). "" is the first page.
func intentCursor(in *tgruntime.Intent) string {
	return strconv.FormatInt(in.ProposedAt.UnixNano(), 10) + "." + in.ID
}

func parseIntentCursor(s string) (nanos int64, id string, ok bool) {
	t, id, found := strings.Cut(s, ".")
	n, err := strconv.ParseInt(t, 10, 64)
	return n, id, found && err == nil && len(s) <= maxCursor
}

// visibleIntents are a page of the intents of status the session may see,
// newest first, from the cursor before on ("" for the newest); next is the
// cursor of the page after it ("" when it is the last).
func (u *UI) visibleIntents(r *http.Request, x *session, status, before string) (rows []intentRow, next string, err error) {
	ctx, cancel := u.ctx(r)
	defer cancel()
	f := tgruntime.IntentFilter{Status: status}
	if status == "all" {
		f.Status = ""
	}
	// The runtime reads every intent of the status (it has no cursor nor
	// limit): the page is bounded, the read is not.
	all, err := u.read.Intents(ctx, f)
	if err != nil {
		return nil, "", err
	}
	end := len(all)
	if nanos, id, ok := parseIntentCursor(before); ok {
		end, _ = slices.BinarySearchFunc(all, id, func(in *tgruntime.Intent, id string) int {
			if d := cmp.Compare(in.ProposedAt.UnixNano(), nanos); d != 0 {
				return d
			}
			return strings.Compare(in.ID, id)
		})
	}
	rows = []intentRow{}
	now := u.opts.Now()
	last := -1 // the index of the last row's intent
	for i := end - 1; i >= 0; i-- {
		in := all[i]
		switch {
		case !x.sees(in.Proposer):
			continue
		case len(rows) == pageSize:
			return rows, intentCursor(all[last]), nil
		}
		rows = append(rows, intentRow{ID: in.ID, Tool: in.Tool, Version: in.Version, Proposer: in.Proposer, Status: in.Status,
			Preview: u.preview(in), Link: prefix + "intents/" + in.ID, ProposedAt: in.ProposedAt, Age: ago(now.Sub(in.ProposedAt))})
		last = i
	}
	return rows, "", nil
}

func (u *UI) intentsPage(w http.ResponseWriter, r *http.Request, x *session) {
	q := r.URL.Query()
	status, before := q.Get("status"), q.Get("before")
	if status == "" {
		status = tgruntime.IntentPending
	}
	if !slices.Contains(intentStatuses, status) {
		u.fail(w, r, x, http.StatusBadRequest, "Unknown status: choose pending, approved, rejected, executed or all.")
		return
	}
	if _, _, ok := parseIntentCursor(before); before != "" && !ok {
		u.fail(w, r, x, http.StatusBadRequest, "This page link is damaged: go back to the list's first page.")
		return
	}
	rows, next, err := u.visibleIntents(r, x, status, before)
	if err != nil {
		u.storeFailed(w, r, x, err)
		return
	}
	title := "Pending intents"
	if status != tgruntime.IntentPending {
		title = "Intents: " + status
	}
	data := map[string]any{"Title": title, "Rows": rows, "Status": status, "Statuses": intentStatuses,
		"Live": status == tgruntime.IntentPending && before == "", "PageSize": pageSize}
	if next != "" {
		data["Older"] = prefix + "intents?" + url.Values{"status": {status}, "before": {next}}.Encode()
	}
	if before != "" {
		data["Newest"] = prefix + "intents?" + url.Values{"status": {status}}.Encode()
	}
	u.render(w, r, x, http.StatusOK, "intents", data)
}

// intentsLive is the newest page of pending intents as JSON, for the
// page's refresh; more says there are older ones.
func (u *UI) intentsLive(w http.ResponseWriter, r *http.Request, x *session) {
	rows, next, err := u.visibleIntents(r, x, tgruntime.IntentPending, "")
	if err != nil {
		u.log.Error("ui: reading the store", "path", r.URL.Path, "error", err)
		http.Error(w, `{"error":"store unavailable"}`, http.StatusServiceUnavailable)
		return
	}
	b, _ := json.Marshal(map[string]any{"intents": rows, "more": next != ""})
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// historyEntry is one step of an intent's history.
type historyEntry struct {
	At        time.Time
	What      string
	Execution string // an execution id to link to
}

func intentHistory(in *tgruntime.Intent) []historyEntry {
	h := []historyEntry{{At: in.ProposedAt, What: "proposed by " + in.Proposer}}
	if d := in.Decision; d != nil {
		h = append(h, historyEntry{At: d.At, What: d.String()})
	}
	if e := in.Execution; e != nil {
		h = append(h, historyEntry{At: e.At, What: "executed by " + e.Principal + ", execution " + e.ExecutionID, Execution: e.ExecutionID})
	}
	for _, f := range in.Refusals {
		h = append(h, historyEntry{At: f.At, What: "execution refused to " + f.Principal + ": " + f.Code})
	}
	slices.SortStableFunc(h, func(a, b historyEntry) int { return a.At.Compare(b.At) })
	return h
}

// intentOf reads the intent of the request's path that the session may
// see; else it answers (404 for another's: ids are not an oracle).
func (u *UI) intentOf(w http.ResponseWriter, r *http.Request, x *session) *tgruntime.Intent {
	ctx, cancel := u.ctx(r)
	defer cancel()
	in, err := u.read.Intent(ctx, r.PathValue("id"))
	var ie *tgruntime.IntentError
	switch {
	case errors.As(err, &ie) || (err == nil && !x.sees(in.Proposer)):
		u.fail(w, r, x, http.StatusNotFound, "No such intent.")
		return nil
	case err != nil:
		u.storeFailed(w, r, x, err)
		return nil
	}
	return in
}

func (u *UI) intentPage(w http.ResponseWriter, r *http.Request, x *session) {
	in := u.intentOf(w, r, x)
	if in == nil {
		return
	}
	u.showIntent(w, r, x, in, http.StatusOK, r.URL.Query().Get("done"), "")
}

func (u *UI) showIntent(w http.ResponseWriter, r *http.Request, x *session, in *tgruntime.Intent, status int, done, errMsg string) {
	data := map[string]any{"Title": "Intent " + in.Tool + "@" + in.Version, "Intent": in, "History": intentHistory(in),
		"Input": pretty(in.Input), "Process": u.process(in), "Error": errMsg}
	switch done {
	case "approved":
		data["Notice"] = "Approved. It runs when its proposer executes it (POST /v1/intents/{id}/execute with its hash)."
	case "rejected":
		data["Notice"] = "Rejected."
	}
	if e, err := u.rt.Registry().Lookup(in.Tool, in.Version); err == nil {
		decl := e.Declaration()
		data["Description"] = decl.Description
		// As Execute will decide it: for the proposer, with this input
		// (capabilities its fields require included).
		d := explain.Call(u.rt.Policy(), in.Proposer, decl, in.Input, nil, "", u.opts.Now(), tgruntime.Message)
		data["Policy"] = &d
	} else {
		data["Unregistered"] = err.Error()
	}
	u.render(w, r, x, status, "intent", data)
}

// decide approves or rejects the intent of the path.
func (u *UI) decide(approve bool) func(http.ResponseWriter, *http.Request, *session) {
	return func(w http.ResponseWriter, r *http.Request, x *session) {
		if !x.who.Approver {
			u.fail(w, r, x, http.StatusForbidden, "Only approvers decide intents; "+x.who.Principal+" is not one.")
			return
		}
		in := u.intentOf(w, r, x)
		if in == nil {
			return
		}
		if h := r.PostForm.Get("hash"); h != in.Hash {
			// The form showed another intent than the one stored: never
			// decide what the person did not see.
			u.showIntent(w, r, x, in, http.StatusConflict, "", "The intent is not the one this form showed; nothing was decided. Look at it again.")
			return
		}
		ctx, cancel := u.ctx(r)
		defer cancel()
		var err error
		verb := "approved"
		if approve {
			_, err = u.rt.Approve(ctx, in.ID, x.who.Principal)
		} else {
			verb = "rejected"
			reason := strings.TrimSpace(r.PostForm.Get("reason"))
			if reason == "" {
				u.showIntent(w, r, x, in, http.StatusBadRequest, "", "A rejection needs a reason.")
				return
			}
			_, err = u.rt.Reject(ctx, in.ID, x.who.Principal, reason)
		}
		var ie *tgruntime.IntentError
		switch {
		case errors.As(err, &ie):
			if now, rerr := u.read.Intent(ctx, in.ID); rerr == nil {
				in = now
			}
			u.showIntent(w, r, x, in, http.StatusConflict, "", "Not "+verb+": "+strings.TrimPrefix(ie.Error(), "runtime: "))
			return
		case err != nil:
			u.storeFailed(w, r, x, err)
			return
		}
		u.log.Info("ui decision", "intent", in.ID, "decision", verb, "by", x.who.Principal)
		http.Redirect(w, r, prefix+"intents/"+in.ID+"?done="+verb, http.StatusSeeOther)
	}
}

// --- executions

type executionFilter struct {
	State, Tool, Principal, Since, Until string
}

// query is the filter as a list link's query, with the page cursor before
// ("" for the first page).
func (f executionFilter) query(before string) string {
	v := url.Values{}
	for k, x := range map[string]string{"state": f.State, "tool": f.Tool, "principal": f.Principal, "since": f.Since, "until": f.Until, "before": before} {
		if x != "" {
			v.Set(k, x)
		}
	}
	return v.Encode()
}

// validExecutionCursor reports whether s may be an execution id, as a
// page link carries it.
func validExecutionCursor(s string) bool {
	return len(s) <= maxCursor && strings.Trim(s, "0123456789abcdef-") == ""
}

func (u *UI) executionsPage(w http.ResponseWriter, r *http.Request, x *session) {
	q := r.URL.Query()
	f := executionFilter{State: q.Get("state"), Tool: strings.TrimSpace(q.Get("tool")), Principal: strings.TrimSpace(q.Get("principal")),
		Since: strings.TrimSpace(q.Get("since")), Until: strings.TrimSpace(q.Get("until"))}
	before := q.Get("before")
	states := []string{}
	for _, s := range lifecycle.States() {
		states = append(states, string(s))
	}
	data := map[string]any{"Title": "Executions", "Filter": f, "States": states, "PageSize": pageSize}
	if f.State != "" && !slices.Contains(states, f.State) {
		data["Error"] = "Unknown state " + f.State + "."
		u.render(w, r, x, http.StatusBadRequest, "executions", data)
		return
	}
	if !validExecutionCursor(before) {
		data["Error"] = "This page link is damaged: go back to the list's first page."
		u.render(w, r, x, http.StatusBadRequest, "executions", data)
		return
	}
	now := u.opts.Now()
	since, err1 := parseWhen(f.Since, now)
	until, err2 := parseWhen(f.Until, now)
	if err := errors.Join(err1, err2); err != nil {
		data["Error"] = err.Error()
		u.render(w, r, x, http.StatusBadRequest, "executions", data)
		return
	}
	ctx, cancel := u.ctx(r)
	defer cancel()
	// Newest first from the cursor, a chunk at a time, until the page is
	// full: the read stops where the page ends (the principal and time
	// filters are applied here, so a narrow one reads further).
	rows := []*txn.Record{}
	for cursor, full := before, false; !full; {
		recs, err := u.read.Executions(ctx, txn.Filter{State: f.State, ToolID: f.Tool, Newest: true, Cursor: cursor, Limit: listChunk})
		if err != nil {
			u.storeFailed(w, r, x, err)
			return
		}
		for _, rec := range recs {
			if !x.sees(rec.Principal) ||
				f.Principal != "" && rec.Principal != f.Principal ||
				!since.IsZero() && rec.StartedAt.Before(since) ||
				!until.IsZero() && !rec.StartedAt.Before(until) {
				continue
			}
			if len(rows) == pageSize {
				data["Older"] = prefix + "executions?" + f.query(rows[pageSize-1].ExecutionID)
				full = true
				break
			}
			rows = append(rows, rec)
		}
		if len(recs) < listChunk {
			break
		}
		cursor = recs[len(recs)-1].ExecutionID
	}
	if before != "" {
		data["Newest"] = prefix + "executions?" + f.query("")
	}
	data["Rows"] = rows
	u.render(w, r, x, http.StatusOK, "executions", data)
}

// parseWhen reads a filter's time: "" (none), a duration before now such
// as "1h" or "30m", or a UTC time "2006-01-02T15:04" (what a
// datetime-local field sends) or RFC 3339.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time: give a duration before now (such as 1h) or a UTC time such as 2026-05-01T14:00", s)
}

// step is one transition of an execution's timeline.
type step struct {
	lifecycle.Transition
	SinceStart, SincePrev time.Duration
}

func (u *UI) executionPage(w http.ResponseWriter, r *http.Request, x *session) {
	ctx, cancel := u.ctx(r)
	defer cancel()
	rec, ds, err := u.read.ReadExecution(ctx, r.PathValue("id"))
	switch {
	case errors.Is(err, txn.ErrNotFound) || (err == nil && !x.sees(rec.Principal)):
		u.fail(w, r, x, http.StatusNotFound, "No such execution.")
		return
	case errors.Is(err, txn.ErrCorrupt):
		u.fail(w, r, x, http.StatusConflict, "The record stored under this id does not match the audit log: it is damaged or was changed outside toolgate. Run 'toolgate audit verify'.")
		return
	case err != nil:
		u.storeFailed(w, r, x, err)
		return
	}
	var steps []step
	prev := rec.StartedAt
	for _, t := range rec.Transitions {
		steps = append(steps, step{Transition: lifecycle.Transition{From: lifecycle.State(t.From), To: lifecycle.State(t.To), Event: lifecycle.Event(t.Event), At: t.At, Reason: t.Reason},
			SinceStart: t.At.Sub(rec.StartedAt), SincePrev: t.At.Sub(prev)})
		prev = t.At
	}
	data := map[string]any{"Title": "Execution " + rec.ExecutionID, "Rec": rec, "Steps": steps, "Discrepancies": ds}
	if !rec.EndedAt.IsZero() {
		data["Took"] = rec.EndedAt.Sub(rec.StartedAt)
	}
	if rec.Error != nil {
		e := *rec.Error
		e.Stack = "" // never a stack on a page
		data["Err"] = &e
	}
	if len(rec.Output) > 0 {
		data["Output"] = pretty(rec.Output)
	}
	if rec.TraceID != "" && u.opts.JaegerURL != "" {
		data["TraceLink"] = u.opts.JaegerURL + "/trace/" + rec.TraceID
	}
	if parked, err := u.rt.ParkedWrites(ctx, rec.ExecutionID); err == nil {
		data["Parked"] = parked
	}
	u.render(w, r, x, http.StatusOK, "execution", data)
}

// --- helpers

// pretty is a JSON value in canonical form (keys sorted), indented, with
// the characters the store keeps escaped (\u003c for <) shown as
// themselves: what the tool receives. A value that is not JSON is shown as
// stored.
func pretty(raw json.RawMessage) string { return display(raw, "  ") }

// display is raw re-encoded as pretty does, on one line when indent is "".
func display(raw json.RawMessage, indent string) string {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return string(raw)
	}
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	e.SetIndent("", indent)
	if err := e.Encode(v); err != nil {
		return string(raw)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// ago says how long ago, roughly.
func ago(d time.Duration) string {
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm ago", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// duration is d for a timeline: to the microsecond below a second.
func duration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}
