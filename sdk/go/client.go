package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultURL is the daemon's address when neither WithBaseURL nor WARDEN_URL says otherwise.
const DefaultURL = "http://127.0.0.1:8080"

// DefaultTimeout bounds a request that is not an execution (executions wait for their own
// timeout plus ExecutionGrace when that is longer).
const DefaultTimeout = 60 * time.Second

// ExecutionGrace is added to an execution's own timeout when bounding its request, for the
// sandbox's start and teardown.
const ExecutionGrace = 15 * time.Second

// Client talks to one Warden daemon. It is safe for concurrent use.
type Client struct {
	baseURL   string
	apiKey    string
	timeout   time.Duration
	http      *http.Client
	userAgent string
}

// Option configures a Client made by NewClient.
type Option func(*Client) error

// WithBaseURL sets the daemon's address, e.g. http://127.0.0.1:8080 (default: WARDEN_URL,
// else DefaultURL).
func WithBaseURL(u string) Option {
	return func(c *Client) error {
		parsed, err := url.Parse(u)
		if err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" ||
			parsed.RawQuery != "" || parsed.Fragment != "" {
			return fmt.Errorf("warden: invalid daemon url %q: want http(s)://host[:port][/prefix]", u)
		}
		c.baseURL = strings.TrimRight(u, "/")
		return nil
	}
}

// WithAPIKey sets the key sent as "Authorization: Bearer KEY" (default: WARDEN_API_KEY).
func WithAPIKey(key string) Option {
	return func(c *Client) error { c.apiKey = key; return nil }
}

// WithTimeout bounds each request that is not an execution (default DefaultTimeout; 0: no
// bound but the context's). Executions wait at least their own timeout plus ExecutionGrace;
// streams are bounded by their context only.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) error { c.timeout = d; return nil }
}

// WithHTTPClient sets the *http.Client used for every request (default: a client of its own
// with a 10 s dial timeout).
func WithHTTPClient(h *http.Client) Option {
	return func(c *Client) error {
		if h == nil {
			return errors.New("warden: nil *http.Client")
		}
		c.http = h
		return nil
	}
}

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option {
	return func(c *Client) error { c.userAgent = ua; return nil }
}

// NewClient makes a client. Without options it talks to WARDEN_URL (else DefaultURL) with
// WARDEN_API_KEY if set.
func NewClient(opts ...Option) (*Client, error) {
	c := &Client{
		baseURL:   DefaultURL,
		apiKey:    os.Getenv("WARDEN_API_KEY"),
		timeout:   DefaultTimeout,
		userAgent: "warden-go-sdk",
		http: &http.Client{Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     90 * time.Second,
		}},
	}
	if env := os.Getenv("WARDEN_URL"); env != "" {
		opts = append([]Option{WithBaseURL(env)}, opts...)
	}
	for _, opt := range opts {
		if err := opt(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

var (
	defaultOnce   sync.Mutex
	defaultClient *Client
)

// DefaultClient is the client of the document-shaped functions (CreateSandbox): made on first
// use from WARDEN_URL and WARDEN_API_KEY.
func DefaultClient() (*Client, error) {
	defaultOnce.Lock()
	defer defaultOnce.Unlock()
	if defaultClient != nil {
		return defaultClient, nil
	}
	c, err := NewClient()
	if err != nil {
		return nil, err
	}
	defaultClient = c
	return c, nil
}

// SetDefaultClient replaces the client of the document-shaped functions.
func SetDefaultClient(c *Client) {
	defaultOnce.Lock()
	defer defaultOnce.Unlock()
	defaultClient = c
}

// BaseURL returns the daemon's address.
func (c *Client) BaseURL() string { return c.baseURL }

// request is one HTTP exchange.
type request struct {
	method      string
	path        string
	body        interface{} // JSON-encoded unless raw
	raw         []byte
	rawSet      bool
	timeout     time.Duration // 0: the client's
	stream      bool          // no timeout; the caller closes the body
	contentType string
}

func (r request) op() string { return r.method + " " + r.path }

// send does the exchange; on a 2xx answer it returns the response with its body open (the
// caller closes it and cancel), else an error.
func (c *Client) send(ctx context.Context, r request) (*http.Response, context.CancelFunc, error) {
	timeout := c.timeout
	if r.timeout > timeout {
		timeout = r.timeout
	}
	var cancel context.CancelFunc
	if timeout > 0 && !r.stream {
		ctx, cancel = context.WithTimeout(ctx, timeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	var body io.Reader
	contentType := r.contentType
	switch {
	case r.rawSet:
		body = bytes.NewReader(r.raw)
		if contentType == "" {
			contentType = "application/octet-stream"
		}
	case r.body != nil:
		b, err := json.Marshal(r.body)
		if err != nil {
			cancel()
			return nil, nil, fmt.Errorf("warden: %s: encoding the request: %w", r.op(), err)
		}
		body = bytes.NewReader(b)
		contentType = "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, r.method, c.baseURL+r.path, body)
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("warden: %s: %w", r.op(), err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if r.stream {
		req.Header.Set("Accept", "application/x-ndjson")
	} else {
		req.Header.Set("Accept", "application/json")
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		e := c.transportError(ctx, r.op(), err, false)
		cancel()
		return nil, nil, e
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, cancel, nil
	}
	defer cancel()
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, nil, c.transportError(ctx, r.op(), err, true)
	}
	return nil, nil, apiError(resp.StatusCode, retryAfter(resp.Header.Get("Retry-After")), data)
}

// transportError classifies a failure below HTTP: the context's own end is returned as is
// (wrapped), a refused or failed dial is ErrConnection, anything else once the request was
// sent is ErrDaemonGone.
func (c *Client) transportError(ctx context.Context, op string, err error, sent bool) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("warden: %s: %w", op, ctxErr)
	}
	var opErr *net.OpError
	dial := errors.As(err, &opErr) && opErr.Op == "dial"
	if errors.Is(err, syscall.ECONNREFUSED) {
		dial = true
	}
	return &TransportError{Op: op, URL: c.baseURL, Gone: sent || !dial, Err: err}
}

func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// doJSON does the exchange and decodes a JSON answer into out (nil: discard).
func (c *Client) doJSON(ctx context.Context, r request, out interface{}) error {
	resp, cancel, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer cancel()
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return c.transportError(ctx, r.op(), err, true)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &DecodeError{Op: r.op(), Detail: fmt.Sprintf("%v (body: %s)", err, snippet(data))}
	}
	return nil
}

// doBytes does the exchange and returns the raw answer.
func (c *Client) doBytes(ctx context.Context, r request) ([]byte, error) {
	resp, cancel, err := c.send(ctx, r)
	if err != nil {
		return nil, err
	}
	defer cancel()
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, c.transportError(ctx, r.op(), err, true)
	}
	return data, nil
}

func execTimeout(seconds float64) time.Duration {
	if seconds <= 0 {
		return 0
	}
	return time.Duration(seconds*float64(time.Second)) + ExecutionGrace
}

// Health checks GET /healthz.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var h Health
	if err := c.doJSON(ctx, request{method: "GET", path: "/healthz"}, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// Ready returns GET /readyz: readiness and the free execution slots.
func (c *Client) Ready(ctx context.Context) (*Health, error) {
	var h Health
	if err := c.doJSON(ctx, request{method: "GET", path: "/readyz"}, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// OpenAPI returns the daemon's API description, GET /openapi.json, decoded.
func (c *Client) OpenAPI(ctx context.Context) (map[string]interface{}, error) {
	var spec map[string]interface{}
	if err := c.doJSON(ctx, request{method: "GET", path: "/openapi.json"}, &spec); err != nil {
		return nil, err
	}
	return spec, nil
}

// Metrics returns GET /metrics, Prometheus text.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	b, err := c.doBytes(ctx, request{method: "GET", path: "/metrics"})
	return string(b), err
}

// Execute runs code once in a fresh sandbox (POST /v1/execute). A program that fails is a
// result, not an error.
func (c *Client) Execute(ctx context.Context, req ExecuteRequest) (*ExecResult, error) {
	req.Stream = false
	var out ExecResult
	err := c.doJSON(ctx, request{method: "POST", path: "/v1/execute", body: req, timeout: execTimeout(req.TimeoutSeconds)}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// ExecuteStream runs code once in a fresh sandbox and returns its events as they happen.
// Close the stream when done with it.
func (c *Client) ExecuteStream(ctx context.Context, req ExecuteRequest) (*Stream, error) {
	req.Stream = true
	return c.openStream(ctx, request{method: "POST", path: "/v1/execute", body: req, stream: true})
}

// CreateSandbox creates a sandbox with a lifetime (POST /v1/sandboxes).
func (c *Client) CreateSandbox(ctx context.Context, opts SandboxOptions) (*Sandbox, error) {
	var info SandboxInfo
	if err := c.doJSON(ctx, request{method: "POST", path: "/v1/sandboxes", body: opts}, &info); err != nil {
		return nil, err
	}
	return &Sandbox{client: c, info: info}, nil
}

// GetSandbox returns a handle on an existing sandbox, by id or name (GET /v1/sandboxes/{id}).
func (c *Client) GetSandbox(ctx context.Context, id string) (*Sandbox, error) {
	info, err := c.SandboxInfo(ctx, id)
	if err != nil {
		return nil, err
	}
	return &Sandbox{client: c, info: *info}, nil
}

// SandboxInfo returns a sandbox's description, by id or name.
func (c *Client) SandboxInfo(ctx context.Context, id string) (*SandboxInfo, error) {
	var info SandboxInfo
	if err := c.doJSON(ctx, request{method: "GET", path: sandboxPath(id)}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// ListSandboxes lists the live sandboxes (GET /v1/sandboxes), those with every given label
// when labels is not empty.
func (c *Client) ListSandboxes(ctx context.Context, labels map[string]string) ([]SandboxInfo, error) {
	path := "/v1/sandboxes"
	if len(labels) > 0 {
		q := url.Values{}
		for k, v := range labels {
			q.Add("label", k+"="+v)
		}
		path += "?" + q.Encode()
	}
	var out sandboxList
	if err := c.doJSON(ctx, request{method: "GET", path: path}, &out); err != nil {
		return nil, err
	}
	return out.Sandboxes, nil
}

// PauseSandbox pauses a sandbox (POST /v1/sandboxes/{id}/pause): its processes stop where
// they are and its files and contexts' variables are kept; its next use resumes it. While an
// execution runs in it the answer is a *APIError with code sandbox_busy (409). With
// PauseOptions{Evict: true} its Python contexts are saved and their interpreters ended to free
// their memory; Paused.Evicted names what could not be saved.
func (c *Client) PauseSandbox(ctx context.Context, id string, opts ...PauseOptions) (*Paused, error) {
	var body PauseOptions
	for _, o := range opts {
		body.Evict = body.Evict || o.Evict
	}
	var paused Paused
	if err := c.doJSON(ctx, request{method: "POST", path: sandboxPath(id) + "/pause", body: body}, &paused); err != nil {
		return nil, err
	}
	return &paused, nil
}

// SetEgress replaces the egress gateway rules of a sandbox whose profile has one (PATCH
// /v1/sandboxes/{id}/egress) and returns the rules now in force. Executions started afterwards
// get them; a running context gets them at its next cell (on the jail backend by a restart of
// its interpreter, which that cell's result reports as ContextRestarted). A sandbox without a
// gateway is refused (400 invalid_request naming egress).
func (c *Client) SetEgress(ctx context.Context, id string, rules GatewayRules) (*GatewayRules, error) {
	if rules.Allow == nil {
		rules.Allow = []string{}
	}
	if rules.Deny == nil {
		rules.Deny = []string{}
	}
	var now GatewayRules
	if err := c.doJSON(ctx, request{method: "PATCH", path: sandboxPath(id) + "/egress", body: rules}, &now); err != nil {
		return nil, err
	}
	return &now, nil
}

// ResumeSandbox resumes a paused sandbox (POST /v1/sandboxes/{id}/resume) and loads the state
// of the contexts an evicting pause saved (Resumed.Restored).
func (c *Client) ResumeSandbox(ctx context.Context, id string) (*Resumed, error) {
	var resumed Resumed
	if err := c.doJSON(ctx, request{method: "POST", path: sandboxPath(id) + "/resume"}, &resumed); err != nil {
		return nil, err
	}
	return &resumed, nil
}

// DestroySandbox destroys a sandbox, by id or name (DELETE /v1/sandboxes/{id}); a running
// execution in it is killed.
func (c *Client) DestroySandbox(ctx context.Context, id string) error {
	var out destroyed
	return c.doJSON(ctx, request{method: "DELETE", path: sandboxPath(id)}, &out)
}

// Exec runs code in a sandbox (POST /v1/sandboxes/{id}/exec); with req.Context set, as a
// cell of that context.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest) (*ExecResult, error) {
	req.Stream = false
	var out ExecResult
	err := c.doJSON(ctx, request{method: "POST", path: sandboxPath(id) + "/exec", body: req, timeout: execTimeout(req.TimeoutSeconds)}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// ExecStream runs code in a sandbox and returns its events as they happen.
func (c *Client) ExecStream(ctx context.Context, id string, req ExecRequest) (*Stream, error) {
	req.Stream = true
	return c.openStream(ctx, request{method: "POST", path: sandboxPath(id) + "/exec", body: req, stream: true})
}

// WriteFile uploads data to path in the sandbox's workspace (PUT …/files/{path}).
func (c *Client) WriteFile(ctx context.Context, id, path string, data []byte) (*WrittenFile, error) {
	p, err := filePath(path)
	if err != nil {
		return nil, err
	}
	var out WrittenFile
	if err := c.doJSON(ctx, request{method: "PUT", path: sandboxPath(id) + "/files/" + p, raw: data, rawSet: true}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReadFile downloads a file of the sandbox's workspace (GET …/files/{path}).
func (c *Client) ReadFile(ctx context.Context, id, path string) ([]byte, error) {
	p, err := filePath(path)
	if err != nil {
		return nil, err
	}
	return c.doBytes(ctx, request{method: "GET", path: sandboxPath(id) + "/files/" + p})
}

// ListFiles lists the sandbox's workspace (GET …/files).
func (c *Client) ListFiles(ctx context.Context, id string) ([]FileEntry, error) {
	var out fileList
	if err := c.doJSON(ctx, request{method: "GET", path: sandboxPath(id) + "/files"}, &out); err != nil {
		return nil, err
	}
	return out.Files, nil
}

// CreateContext starts a persistent interpreter in the sandbox (POST …/contexts); language
// "" is the sandbox's, else python or javascript.
func (c *Client) CreateContext(ctx context.Context, id, language string) (*ContextInfo, error) {
	var out ContextInfo
	err := c.doJSON(ctx, request{method: "POST", path: sandboxPath(id) + "/contexts", body: createContextBody{Language: language}}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// ListContexts lists the sandbox's contexts (GET …/contexts).
func (c *Client) ListContexts(ctx context.Context, id string) ([]ContextInfo, error) {
	var out contextList
	if err := c.doJSON(ctx, request{method: "GET", path: sandboxPath(id) + "/contexts"}, &out); err != nil {
		return nil, err
	}
	return out.Contexts, nil
}

// GetContext describes one context (GET …/contexts/{ctx}).
func (c *Client) GetContext(ctx context.Context, id, contextID string) (*ContextInfo, error) {
	var out ContextInfo
	if err := c.doJSON(ctx, request{method: "GET", path: contextPath(id, contextID)}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RestartContext replaces a context's interpreter by a fresh one (POST …/restart): its state
// is lost and its execution count starts again.
func (c *Client) RestartContext(ctx context.Context, id, contextID string) (*ContextInfo, error) {
	var out ContextInfo
	if err := c.doJSON(ctx, request{method: "POST", path: contextPath(id, contextID) + "/restart"}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteContext ends a context (DELETE …/contexts/{ctx}).
func (c *Client) DeleteContext(ctx context.Context, id, contextID string) error {
	var out destroyed
	return c.doJSON(ctx, request{method: "DELETE", path: contextPath(id, contextID)}, &out)
}

func sandboxPath(id string) string { return "/v1/sandboxes/" + url.PathEscape(id) }

func contextPath(id, contextID string) string {
	return sandboxPath(id) + "/contexts/" + url.PathEscape(contextID)
}

// filePath checks a workspace path (relative, or under /workspace/; no "..", no empty or "."
// segment, no NUL) and escapes its segments.
func filePath(path string) (string, error) {
	p := strings.TrimPrefix(path, "/workspace/")
	bad := p == "" || strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0)
	segments := strings.Split(p, "/")
	for _, s := range segments {
		if s == "" || s == "." || s == ".." {
			bad = true
		}
	}
	if bad {
		return "", fmt.Errorf("%w: %q (relative to the workspace, no '..', no empty segment)", ErrInvalidPath, path)
	}
	for i, s := range segments {
		segments[i] = url.PathEscape(s)
	}
	return strings.Join(segments, "/"), nil
}
