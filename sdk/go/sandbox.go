package sdk

import (
	"context"
)

// Sandbox is a handle on a sandbox with a lifetime: its executions share a workspace
// (/workspace) until it is destroyed or its TTL ends. It is safe for concurrent use; the
// daemon runs a sandbox's executions one at a time, in order.
type Sandbox struct {
	client *Client
	info   SandboxInfo
}

// ID returns the sandbox's id ({name}-{unix seconds} or sb-…).
func (s *Sandbox) ID() string { return s.info.ID }

// Info returns the description the sandbox had when the handle was made (see Refresh).
func (s *Sandbox) Info() SandboxInfo { return s.info }

// Client returns the client the handle talks through.
func (s *Sandbox) Client() *Client { return s.client }

// Refresh fetches the sandbox's description again (executions, last use, expiry).
func (s *Sandbox) Refresh(ctx context.Context) (*SandboxInfo, error) {
	info, err := s.client.SandboxInfo(ctx, s.info.ID)
	if err != nil {
		return nil, err
	}
	s.info = *info
	return info, nil
}

// Pause pauses the sandbox (see Client.PauseSandbox).
func (s *Sandbox) Pause(ctx context.Context, opts ...PauseOptions) (*Paused, error) {
	paused, err := s.client.PauseSandbox(ctx, s.info.ID, opts...)
	if err != nil {
		return nil, err
	}
	s.info = paused.SandboxInfo
	return paused, nil
}

// SetEgress replaces the sandbox's egress gateway rules (see Client.SetEgress).
func (s *Sandbox) SetEgress(ctx context.Context, rules GatewayRules) (*GatewayRules, error) {
	return s.client.SetEgress(ctx, s.info.ID, rules)
}

// Resume resumes the sandbox (see Client.ResumeSandbox).
func (s *Sandbox) Resume(ctx context.Context) (*Resumed, error) {
	resumed, err := s.client.ResumeSandbox(ctx, s.info.ID)
	if err != nil {
		return nil, err
	}
	s.info = resumed.SandboxInfo
	return resumed, nil
}

// Exec runs code in the sandbox; with req.Context set, as a cell of that context.
func (s *Sandbox) Exec(ctx context.Context, req ExecRequest) (*ExecResult, error) {
	return s.client.Exec(ctx, s.info.ID, req)
}

// ExecStream runs code in the sandbox and returns its events as they happen.
func (s *Sandbox) ExecStream(ctx context.Context, req ExecRequest) (*Stream, error) {
	return s.client.ExecStream(ctx, s.info.ID, req)
}

// Upload writes data to path in the workspace.
func (s *Sandbox) Upload(ctx context.Context, path string, data []byte) (*WrittenFile, error) {
	return s.client.WriteFile(ctx, s.info.ID, path, data)
}

// Download reads a file of the workspace.
func (s *Sandbox) Download(ctx context.Context, path string) ([]byte, error) {
	return s.client.ReadFile(ctx, s.info.ID, path)
}

// Files lists the workspace.
func (s *Sandbox) Files(ctx context.Context) ([]FileEntry, error) {
	return s.client.ListFiles(ctx, s.info.ID)
}

// CreateContext starts a persistent interpreter (language "": the sandbox's); run cells in
// it with Exec and ExecRequest.Context set to its ID.
func (s *Sandbox) CreateContext(ctx context.Context, language string) (*ContextInfo, error) {
	return s.client.CreateContext(ctx, s.info.ID, language)
}

// Contexts lists the sandbox's contexts.
func (s *Sandbox) Contexts(ctx context.Context) ([]ContextInfo, error) {
	return s.client.ListContexts(ctx, s.info.ID)
}

// RestartContext replaces a context's interpreter by a fresh one.
func (s *Sandbox) RestartContext(ctx context.Context, contextID string) (*ContextInfo, error) {
	return s.client.RestartContext(ctx, s.info.ID, contextID)
}

// DeleteContext ends a context.
func (s *Sandbox) DeleteContext(ctx context.Context, contextID string) error {
	return s.client.DeleteContext(ctx, s.info.ID, contextID)
}

// Kill destroys the sandbox (Destroy with a context).
func (s *Sandbox) Kill(ctx context.Context) error {
	return s.client.DestroySandbox(ctx, s.info.ID)
}

// Language is a language Warden runs (its built-in runtimes; a daemon may be configured for
// more: any name it knows works as Language("name")).
type Language string

// The languages of Warden's built-in runtimes.
const (
	// Python runs code with python (the default profile's language).
	Python Language = "python"
	// JavaScript runs code with node.
	JavaScript Language = "javascript"
	// Bash runs code with bash.
	Bash Language = "bash"
)

// Languages lists the built-in languages.
var Languages = []Language{Python, JavaScript, Bash}

// Output is the result of Run and RunCommand in the source document's shape.
type Output struct {
	// Result is the combined output as the document prints it: stdout, then stderr.
	Result string
	// Stdout is the program's standard output.
	Stdout string
	// Stderr is the program's standard error.
	Stderr string
	// ExitCode is the exit status as a shell reports it (ExecResult.ShellStatus).
	ExitCode int
	// Reason says why the run ended (exited, timeout, memory, …).
	Reason Reason
	// DurationMs is the run's wall-clock time, milliseconds.
	DurationMs int64
	// Artifacts are the files the program left in /workspace/output.
	Artifacts []Artifact
	// Exec is the whole result.
	Exec *ExecResult
}

// Success reports whether the program exited by itself with code 0.
func (o *Output) Success() bool { return o.Exec != nil && o.Exec.IsSuccess() }

// OutputOf turns a result into the document's Output.
func OutputOf(r *ExecResult) *Output {
	return &Output{
		Result:     r.Stdout + r.Stderr,
		Stdout:     r.Stdout,
		Stderr:     r.Stderr,
		ExitCode:   r.ShellStatus(),
		Reason:     r.Reason,
		DurationMs: r.DurationMs,
		Artifacts:  r.Artifacts,
		Exec:       r,
	}
}

// CreateSandbox creates a sandbox named name for code in lang, through DefaultClient (the
// source document's sdk.CreateSandbox). Its id is {name}-{unix seconds}; names are unique
// among live sandboxes (ErrConflict otherwise).
func CreateSandbox(name string, lang Language) (*Sandbox, error) {
	c, err := DefaultClient()
	if err != nil {
		return nil, err
	}
	return c.CreateSandbox(context.Background(), SandboxOptions{Name: name, Language: lang})
}

// Run runs code in the sandbox's language — Python code in a Python sandbox, never through a
// shell — and returns its Output. A program that fails is an Output with a non-zero
// ExitCode, not an error. For a shell command (the document's `python -c '…'`), use
// RunCommand.
func (s *Sandbox) Run(code string) (*Output, error) {
	r, err := s.Exec(context.Background(), ExecRequest{Code: code})
	if err != nil {
		return nil, err
	}
	return OutputOf(r), nil
}

// RunCommand runs a shell command line with bash in the sandbox (same workspace, same
// limits), e.g. `python -c 'print("Hello, World!")'` or `python --version`.
func (s *Sandbox) RunCommand(command string) (*Output, error) {
	r, err := s.Exec(context.Background(), ExecRequest{Code: command, Language: string(Bash)})
	if err != nil {
		return nil, err
	}
	return OutputOf(r), nil
}

// Destroy destroys the sandbox (the document's `defer sandbox.Destroy()`); see Kill for the
// same with a context.
func (s *Sandbox) Destroy() error {
	return s.Kill(context.Background())
}
