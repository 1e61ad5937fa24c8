package webui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	tgruntime "github.com/toolgate/toolgate/runtime"
	"github.com/toolgate/toolgate/tools"
)

// Notification is the JSON body a webhook receives for each new pending
// intent. Text is a one-line message that a chat tool's incoming webhook
// shows as is.
type Notification struct {
	ID       string `json:"id"`
	Tool     string `json:"tool"`
	Version  string `json:"version"`
	Proposer string `json:"proposer"`
	Preview  string `json:"preview"`
	Link     string `json:"link"`
	Text     string `json:"text"`
}

// NotifierOptions tune delivery; zero fields mean their defaults.
type NotifierOptions struct {
	Attempts  int           // tries per notification; default 5
	BaseDelay time.Duration // before the first retry, doubling (with jitter) each time; default 1s
	MaxDelay  time.Duration // the longest wait between tries; default 1m
	Timeout   time.Duration // one attempt's limit; default 10s
	Queue     int           // notifications waiting at most; default 1024 (past it, new ones are dropped and logged)
	Workers   int           // deliveries at once; default 4
	Logger    *slog.Logger  // every attempt's outcome; nil means slog.Default()
	Client    *http.Client  // nil means a client with Timeout
}

// Notifier posts a Notification to a webhook for each intent it is given,
// in the background: Notify never blocks, never fails, and so never delays
// or fails a proposal. A delivery that fails (a network error, a status
// other than 2xx) is retried with exponential backoff; every attempt is
// logged.
type Notifier struct {
	url     string
	headers http.Header
	base    string // the UI's address, for links
	opts    NotifierOptions
	preview func(*tgruntime.Intent) string

	queue  chan *tgruntime.Intent
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewNotifier returns a notifier that posts to hook and links to the UI at
// baseURL (such as https://toolgate.example.com). reg, if not nil, is the
// runtime's registry: a process tool's preview is then the command it
// would run, as on the UI's pages. Close stops it.
func NewNotifier(hook *Webhook, baseURL string, reg *tools.Registry, opts *NotifierOptions) (*Notifier, error) {
	if hook == nil {
		return nil, fmt.Errorf("webui: no webhook URL")
	}
	if err := hook.check(); err != nil {
		return nil, err
	}
	n := &Notifier{url: hook.URL, headers: hook.Header.Clone(), base: strings.TrimSuffix(baseURL, "/")}
	if opts != nil {
		n.opts = *opts
	}
	o := &n.opts
	if o.Attempts <= 0 {
		o.Attempts = 5
	}
	if o.BaseDelay <= 0 {
		o.BaseDelay = time.Second
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = time.Minute
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Queue <= 0 {
		o.Queue = 1024
	}
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: o.Timeout}
	}
	n.preview = func(in *tgruntime.Intent) string { return previewOf(reg, in) }
	n.queue = make(chan *tgruntime.Intent, o.Queue)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	for range o.Workers {
		n.wg.Add(1)
		go n.work()
	}
	return n, nil
}

// Notify queues the notification of a new pending intent and returns at
// once; it is the runtime's Options.OnPropose. The notification is worded
// (its preview resolved) by the worker that delivers it, off the
// proposal's path.
func (n *Notifier) Notify(in *tgruntime.Intent) {
	if in == nil || in.Status != tgruntime.IntentPending {
		return
	}
	select {
	case n.queue <- in:
	default:
		n.opts.Logger.Error("webhook: queue full, notification dropped", "intent", in.ID, "queued", cap(n.queue))
	}
}

// notification is the body announcing in.
func (n *Notifier) notification(in *tgruntime.Intent) Notification {
	m := Notification{ID: in.ID, Tool: in.Tool, Version: in.Version, Proposer: in.Proposer, Preview: n.preview(in),
		Link: n.base + prefix + "intents/" + in.ID}
	m.Text = fmt.Sprintf("%s proposes %s@%s: %s — approve or reject: %s", m.Proposer, m.Tool, m.Version, m.Preview, m.Link)
	return m
}

// Close stops delivering: attempts in flight end, notifications still
// queued are dropped (and logged). It waits for the workers at most until
// ctx ends.
func (n *Notifier) Close(ctx context.Context) error {
	n.cancel()
	done := make(chan struct{})
	go func() { n.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	for {
		select {
		case in := <-n.queue:
			n.opts.Logger.Warn("webhook: stopped before delivering", "intent", in.ID)
		default:
			return nil
		}
	}
}

func (n *Notifier) work() {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case in := <-n.queue:
			n.deliver(n.notification(in))
		}
	}
}

// deliver posts m until the webhook accepts it, or the attempts run out.
func (n *Notifier) deliver(m Notification) {
	body, _ := json.Marshal(m)
	log := n.opts.Logger
	delay := n.opts.BaseDelay
	for attempt := 1; ; attempt++ {
		start := time.Now()
		status, err := n.post(body)
		took := time.Since(start).Round(time.Millisecond)
		if err == nil {
			log.Info("webhook: delivered", "intent", m.ID, "attempt", attempt, "status", status, "duration", took)
			return
		}
		if attempt == n.opts.Attempts {
			log.Error("webhook: not delivered, giving up", "intent", m.ID, "attempt", attempt, "status", status, "error", err, "duration", took)
			return
		}
		wait := delay/2 + rand.N(delay/2+1) // jitter: from half the delay to the delay
		log.Warn("webhook: attempt failed, retrying", "intent", m.ID, "attempt", attempt, "status", status, "error", err, "duration", took, "retryIn", wait.Round(time.Millisecond))
		select {
		case <-n.ctx.Done():
			log.Warn("webhook: stopped before delivering", "intent", m.ID, "attempt", attempt)
			return
		case <-time.After(wait):
		}
		delay = min(2*delay, n.opts.MaxDelay)
	}
}

// post makes one attempt: an error unless the webhook answers 2xx.
func (n *Notifier) post(body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(n.ctx, n.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	for k, v := range n.headers {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "toolgate-notify")
	resp, err := n.opts.Client.Do(req)
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // not the URL, which can be a secret (a chat tool's webhook)
	}
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("the webhook answered %s", resp.Status)
	}
	return resp.StatusCode, nil
}
