package sdk

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

func TestUnknownSandboxIsNotFound(t *testing.T) {
	c := testClient(t)
	ctx := ctxT(t)
	_, err := c.GetSandbox(ctx, "no-such-sandbox")
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 404 || apiErr.Code != "sandbox_not_found" || !errors.Is(err, ErrNotFound) {
		t.Fatalf("%#v", err)
	}
	if errors.Is(err, ErrTooManyRequests) || errors.Is(err, ErrPolicyViolation) || !apiErr.IsCallerError() {
		t.Fatalf("wrong kinds: %v", err)
	}
	for _, err := range []error{
		c.DestroySandbox(ctx, "no-such-sandbox"),
		func() error { _, err := c.Exec(ctx, "no-such-sandbox", ExecRequest{Code: "1"}); return err }(),
		func() error { _, err := c.ListFiles(ctx, "no-such-sandbox"); return err }(),
		func() error { _, err := c.ExecStream(ctx, "no-such-sandbox", ExecRequest{Code: "1"}); return err }(),
	} {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("want ErrNotFound, got %v", err)
		}
	}
	// The document's shape, on a sandbox destroyed under it.
	sb := newSandbox(t, c, SandboxOptions{Language: Python})
	if err := sb.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Run("print(1)"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("run after destroy: %v", err)
	}
	if err := sb.Destroy(); !errors.Is(err, ErrNotFound) {
		t.Fatalf("destroy twice: %v", err)
	}
}

func TestPolicyViolation(t *testing.T) {
	c := testClient(t)
	_, err := c.Execute(ctxT(t), ExecuteRequest{Code: "import os\nprint(os.getcwd())"})
	var apiErr *APIError
	if !errors.As(err, &apiErr) || !errors.Is(err, ErrPolicyViolation) || errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("%#v", err)
	}
	v := apiErr.Violation
	if apiErr.Status != 422 || apiErr.Code != "policy_violation" || v == nil || v.Policy != "forbidden_imports" ||
		v.Kind != "forbidden_import" || v.Module != "os" || v.Line != 1 || v.Column != 8 || v.Details["module"] != "os" {
		t.Fatalf("%+v %+v", apiErr, v)
	}
	// The tool tells the LLM, once, where.
	tool := NewCodeInterpreterTool(c, "")
	text := tool.Call(ctxT(t), `{"code": "import os"}`)
	if !strings.HasPrefix(text, "ERROR:\npolicy_violation: policy forbidden_imports refused the request: import of \"os\"") ||
		!strings.HasSuffix(text, "(line 1, column 8); the code was not run") || strings.Count(text, "line 1") != 1 {
		t.Fatalf("%q", text)
	}
	// A name built at run time passes the check before the run; the interpreter refuses it,
	// as the same policy violation, and the tool says the run was stopped.
	code := "print(1)\nimp = getattr(__builtins__, '__imp' + 'ort__')\nimp('o' + 's')"
	_, err = c.Execute(ctxT(t), ExecuteRequest{Code: code})
	if !errors.As(err, &apiErr) || !errors.Is(err, ErrPolicyViolation) || apiErr.Violation == nil ||
		apiErr.Violation.Module != "os" || apiErr.Violation.Line != 3 || apiErr.Violation.Column != 0 {
		t.Fatalf("%#v", err)
	}
	text = tool.Call(ctxT(t), fmt.Sprintf(`{"code": %q}`, code))
	if !strings.HasSuffix(text, "(line 3); the run was stopped there") || !strings.Contains(text, "refused at run time") {
		t.Fatalf("%q", text)
	}
}

func TestInvalidRequestsAndConflicts(t *testing.T) {
	c := testClient(t)
	ctx := ctxT(t)
	_, err := c.Execute(ctx, ExecuteRequest{Code: "1", Language: "cobol"})
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Code != "unknown_language" || !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("%v", err)
	}
	_, err = c.Execute(ctx, ExecuteRequest{Code: "1", TimeoutSeconds: -1})
	if !errors.As(err, &apiErr) || apiErr.Code != "invalid_request" || !strings.Contains(apiErr.Message, "timeout_seconds") {
		t.Fatalf("%v", err)
	}
	name := "go-taken-" + time.Now().Format("150405")
	newSandbox(t, c, SandboxOptions{Name: name})
	if _, err := c.CreateSandbox(ctx, SandboxOptions{Name: name}); !errors.Is(err, ErrConflict) {
		t.Fatalf("name taken: %v", err)
	}
}

func TestQueueFullIsTooManyRequestsWithRetryAfter(t *testing.T) {
	d := startDaemon(t, "--max-concurrent", "1", "--max-queued", "0")
	defer d.stop()
	c, _ := NewClient(WithBaseURL(d.url))
	ctx := ctxT(t)
	s, err := c.ExecuteStream(ctx, ExecuteRequest{Code: "echo started; sleep 10", Language: "bash", TimeoutSeconds: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Next() || s.Event().Text != "started\n" {
		t.Fatalf("the first execution did not start: %v", s.Err())
	}
	_, err = c.Execute(ctx, ExecuteRequest{Code: "echo second", Language: "bash"})
	var apiErr *APIError
	if !errors.As(err, &apiErr) || !errors.Is(err, ErrTooManyRequests) || apiErr.Status != 429 || apiErr.Code != "too_many_requests" {
		t.Fatalf("%#v", err)
	}
	if apiErr.RetryAfter <= 0 || apiErr.IsCallerError() {
		t.Fatalf("retry after: %+v", apiErr)
	}
	// The tool does not blame the LLM for a full daemon.
	if _, err := NewCodeInterpreterTool(c, "").TryCall(ctx, `{"code": "echo hi", "language": "bash"}`); !errors.Is(err, ErrTooManyRequests) {
		t.Fatalf("tool: %v", err)
	}
}

func TestDaemonGone(t *testing.T) {
	// Nothing listens: ErrConnection, not ErrDaemonGone.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	c, _ := NewClient(WithBaseURL(closed))
	_, err = c.Execute(context.Background(), ExecuteRequest{Code: "print(1)"})
	var te *TransportError
	if !errors.Is(err, ErrConnection) || errors.Is(err, ErrDaemonGone) || !errors.As(err, &te) || !strings.Contains(err.Error(), closed) {
		t.Fatalf("%#v", err)
	}
	// The tool answers the LLM anyway, and TryCall gives the error to the application.
	if text := NewCodeInterpreterTool(c, "").Call(context.Background(), `{"code": "1"}`); !strings.HasPrefix(text, "ERROR:\nthe code could not be run: warden:") {
		t.Fatalf("%q", text)
	}

	// Killed with a request in flight: ErrDaemonGone (also ErrConnection); then nothing listens.
	d := startDaemon(t, "--max-concurrent", "2")
	c, _ = NewClient(WithBaseURL(d.url))
	ctx := ctxT(t)
	s, err := c.ExecuteStream(ctx, ExecuteRequest{Code: "echo started; sleep 10", Language: "bash", TimeoutSeconds: 20})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Next() {
		t.Fatalf("no first event: %v", s.Err())
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Execute(ctx, ExecuteRequest{Code: "echo started; sleep 10", Language: "bash", TimeoutSeconds: 20})
		done <- err
	}()
	// Wait until the second execution holds the other slot, then kill the daemon.
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := c.Ready(ctx)
		if err == nil && r.FreeSlots != nil && *r.FreeSlots == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second execution never started: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	d.kill()
	for s.Next() {
	}
	if !errors.Is(s.Err(), ErrDaemonGone) || !errors.Is(s.Err(), ErrConnection) {
		t.Fatalf("stream: %#v", s.Err())
	}
	if err := <-done; !errors.Is(err, ErrDaemonGone) {
		t.Fatalf("execute: %#v", err)
	}
	// Afterwards, on a new connection (a kept-alive one from the polls above may not have
	// seen its reset yet, and a request on it would fail as "gone"): nothing listens.
	c.http.CloseIdleConnections()
	_, err = c.Execute(ctx, ExecuteRequest{Code: "print(1)"})
	if !errors.Is(err, ErrConnection) || errors.Is(err, ErrDaemonGone) {
		t.Fatalf("afterwards: %#v", err)
	}
}

func TestErrorBodiesThatAreNotTheAPIsShape(t *testing.T) {
	e := apiError(502, 0, []byte("<html>"+strings.Repeat("x", 1000)+"</html>"))
	if e.Code != "" || e.Status != 502 || !strings.HasSuffix(e.Message, "…") || e.IsCallerError() {
		t.Fatalf("%+v", e)
	}
	e = apiError(503, 2*time.Second, []byte(`{"error":{"code":"sandbox_lost","message":"m"}}`))
	if !errors.Is(e, ErrUnavailable) || e.RetryAfter != 2*time.Second {
		t.Fatalf("%+v", e)
	}
	if retryAfter("1") != time.Second || retryAfter("") != 0 || retryAfter("junk") != 0 {
		t.Fatal("retry-after parsing")
	}
	if !errors.Is(&ExecutionError{Code: "sandbox_not_found"}, ErrNotFound) {
		t.Fatal("execution error kinds")
	}
}
