package sdk

import (
	"encoding/base64"
	"encoding/json"
)

// Reason says why an execution ended. Exactly one is reported, by precedence: output,
// memory or pids, timeout, signal, exited.
type Reason string

// The reasons an execution ends (the API's Reason enum).
const (
	// ReasonExited: the program exited by itself (any exit code).
	ReasonExited Reason = "exited"
	// ReasonTimeout: the wall-clock timeout ended it; every process was killed.
	ReasonTimeout Reason = "timeout"
	// ReasonMemory: the memory limit was hit.
	ReasonMemory Reason = "memory"
	// ReasonPids: the process limit was hit.
	ReasonPids Reason = "pids"
	// ReasonOutput: stdout or stderr passed the output limit; the run was stopped.
	ReasonOutput Reason = "output"
	// ReasonSignal: a signal ended the program (not one Warden sent for a limit).
	ReasonSignal Reason = "signal"
)

// Reasons lists every Reason, in the API's order.
var Reasons = []Reason{ReasonExited, ReasonTimeout, ReasonMemory, ReasonPids, ReasonOutput, ReasonSignal}

// ExecResult is what one execution produced (the API's ExecResult). A program that failed is
// a normal result: look at Reason and ExitCode, or IsSuccess.
type ExecResult struct {
	// Stdout is the program's standard output, UTF-8.
	Stdout string `json:"stdout"`
	// Stderr is the program's standard error, UTF-8.
	Stderr string `json:"stderr"`
	// ExitCode is the program's exit code; nil when a signal ended it.
	ExitCode *int `json:"exit_code"`
	// Signal is the signal that ended the program, if one did.
	Signal *int `json:"signal"`
	// Reason says why the execution ended.
	Reason Reason `json:"reason"`
	// DurationMs is the run's wall-clock time, milliseconds.
	DurationMs int64 `json:"duration_ms"`
	// StdoutTruncated is true when the sandbox stopped keeping stdout (its output limit).
	StdoutTruncated bool `json:"stdout_truncated"`
	// StderrTruncated is true when the sandbox stopped keeping stderr (its output limit).
	StderrTruncated bool `json:"stderr_truncated"`
	// Artifacts are the files the program left in /workspace/output.
	Artifacts []Artifact `json:"artifacts"`
	// SkippedArtifacts are the files of the output folder that were not returned, and why.
	SkippedArtifacts []SkippedArtifact `json:"skipped_artifacts,omitempty"`
	// ExecutionCount is, in a context, the context's counter after this cell (from 1).
	ExecutionCount *int64 `json:"execution_count,omitempty"`
	// ContextRestarted is, in a context, whether this cell ended the interpreter and a
	// fresh one (with empty state) replaced it.
	ContextRestarted *bool `json:"context_restarted,omitempty"`
	// Text is, in a context, the repr of the cell's trailing expression (like Out[n]).
	Text *string `json:"text,omitempty"`
	// Results are, in a context, the rich outputs in order (figures, display(), then the
	// main result).
	Results []RichResult `json:"results,omitempty"`
	// Error is, in a context, the exception the cell raised.
	Error *CellError `json:"error,omitempty"`
	// EgressDenied are, with an egress gateway, the connections it refused, with why.
	EgressDenied []EgressDenied `json:"egress_denied,omitempty"`
	// EgressAllowed are, with an egress gateway, the connections it let through.
	EgressAllowed []EgressAllowed `json:"egress_allowed,omitempty"`
	// SecretsUsed are, with brokered secrets, the requests a secret was put into.
	SecretsUsed []SecretUse `json:"secrets_used,omitempty"`
}

// EgressDenied is a connection the egress gateway refused, and why.
type EgressDenied struct {
	// Host is the name the program asked for (the TLS SNI or the HTTP Host), or the address.
	Host string `json:"host"`
	// Port is the destination port.
	Port int `json:"port"`
	// Why the gateway refused it.
	Why string `json:"why"`
}

// GatewayRules are a sandbox's egress gateway rules (PATCH /v1/sandboxes/{id}/egress): host
// rules ("name", "*.name", either with ":port").
type GatewayRules struct {
	// Allow lists the rules a connection must match, when any is given.
	Allow []string `json:"allow"`
	// Deny lists the rules that refuse a connection, whatever Allow says.
	Deny []string `json:"deny"`
}

// EgressAllowed is a connection the egress gateway let through, with its byte counts.
type EgressAllowed struct {
	// Host is the name the connection was for.
	Host string `json:"host"`
	// Port is the destination port.
	Port int `json:"port"`
	// BytesSent counts the bytes the program sent.
	BytesSent int64 `json:"bytes_sent"`
	// BytesReceived counts the bytes the program received.
	BytesReceived int64 `json:"bytes_received"`
}

// SecretUse is a brokered secret the gateway put into a request (never its value).
type SecretUse struct {
	// Name is the secret's name in the settings.
	Name string `json:"name"`
	// Host is the host the request went to.
	Host string `json:"host"`
}

// IsSuccess reports whether the program exited by itself with code 0.
func (r *ExecResult) IsSuccess() bool {
	return r.Reason == ReasonExited && r.ExitCode != nil && *r.ExitCode == 0
}

// ShellStatus is the exit status as a shell reports it: the exit code, 128+signal when a
// signal ended the program, 124 for a timeout.
func (r *ExecResult) ShellStatus() int {
	switch {
	case r.Reason == ReasonTimeout:
		return 124
	case r.ExitCode != nil:
		return *r.ExitCode
	case r.Signal != nil:
		return 128 + *r.Signal
	default:
		return 1
	}
}

// Artifact is a file the program left in the workspace's output folder.
type Artifact struct {
	// Name is the path relative to the output folder, /-separated.
	Name string `json:"name"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
	// MimeType is the file's MIME type, guessed from its name.
	MimeType string `json:"mime_type"`
	// Sha256 is the lowercase hex SHA-256 of Bytes.
	Sha256 string `json:"sha256"`
	// Bytes is the content (base64 on the wire, decoded by encoding/json).
	Bytes []byte `json:"bytes"`
}

// SkippedArtifact is a file of the output folder that was not returned, and why.
type SkippedArtifact struct {
	// Name is the file's name as found.
	Name string `json:"name"`
	// Why says why it was left out.
	Why string `json:"why"`
}

// RichResult is one rich output of a cell: the same value in one or more MIME types.
type RichResult struct {
	// MimeTypes are the MIME types present in Data, sorted.
	MimeTypes []string `json:"mime_types"`
	// Data maps a MIME type to its data: text as is, binary data (image/png) base64.
	Data map[string]string `json:"data"`
	// IsMainResult is true for the trailing expression's value.
	IsMainResult bool `json:"is_main_result"`
}

// Decoded returns the data of one MIME type, base64-decoded for binary types (image/png,
// image/jpeg) and as is otherwise; ok is false when the type is absent.
func (r RichResult) Decoded(mime string) (data []byte, ok bool) {
	text, ok := r.Data[mime]
	if !ok {
		return nil, false
	}
	if mime == "image/png" || mime == "image/jpeg" {
		b, err := base64.StdEncoding.DecodeString(text)
		if err == nil {
			return b, true
		}
	}
	return []byte(text), true
}

// CellError is the exception a cell raised.
type CellError struct {
	// Name is the exception's class name, e.g. ZeroDivisionError.
	Name string `json:"name"`
	// Value is str() of the exception.
	Value string `json:"value"`
	// Traceback is the formatted traceback, from the user's code on.
	Traceback string `json:"traceback"`
}

// Limits are the hard limits every execution in a sandbox runs under.
type Limits struct {
	// TimeoutMs is the wall-clock time from the program's start to its kill.
	TimeoutMs int64 `json:"timeout_ms"`
	// MemoryMb is the memory of the whole sandbox, MiB.
	MemoryMb int64 `json:"memory_mb"`
	// MaxPids is the number of processes and threads alive at once.
	MaxPids int64 `json:"max_pids"`
	// Cpus is the CPU share as a number of cores.
	Cpus float64 `json:"cpus"`
	// MaxOutputBytes is the bytes of stdout and of stderr kept, each.
	MaxOutputBytes int64 `json:"max_output_bytes"`
	// MaxFileSizeBytes is the largest file the program may write.
	MaxFileSizeBytes int64 `json:"max_file_size_bytes"`
	// WorkspaceMb is the size of the workspace tmpfs, MiB.
	WorkspaceMb int64 `json:"workspace_mb"`
	// MaxArtifacts is the number of artifacts returned at most.
	MaxArtifacts int64 `json:"max_artifacts"`
	// MaxArtifactBytes is the total bytes of artifacts returned at most.
	MaxArtifactBytes int64 `json:"max_artifact_bytes"`
}

// Unsaved is a variable a pause could not save (or a resume could not load again), and why.
type Unsaved struct {
	// Name is the variable's name ("*" for the whole state).
	Name string `json:"name"`
	// Why it was not saved or loaded.
	Why string `json:"why"`
}

// EvictedContext is a context an evicting pause ended, and what was saved of it.
type EvictedContext struct {
	// Context is the context's id.
	Context string `json:"context"`
	// Saved are the names kept: pickled values, modules by name, cell-defined functions and
	// classes by their source.
	Saved []string `json:"saved"`
	// Unsaved are gone after the resume.
	Unsaved []Unsaved `json:"unsaved"`
	// Bytes is the size of the saved state.
	Bytes int64 `json:"bytes"`
}

// KeptContext is a context an evicting pause kept in memory (frozen), and why.
type KeptContext struct {
	// Context is the context's id.
	Context string `json:"context"`
	// Why it was not evicted.
	Why string `json:"why"`
}

// RestoredContext is an evicted context that a resume loaded again.
type RestoredContext struct {
	// Context is the context's id.
	Context string `json:"context"`
	// Restored are the names loaded.
	Restored []string `json:"restored"`
	// Unsaved are what was saved but could not be loaded.
	Unsaved []Unsaved `json:"unsaved"`
}

// Paused is a paused sandbox and, for a pause with Evict, what became of its contexts.
type Paused struct {
	SandboxInfo
	// Evicted are the contexts ended by the pause, with what was saved of each.
	Evicted []EvictedContext `json:"evicted"`
	// KeptInMemory are the contexts an evicting pause could not evict.
	KeptInMemory []KeptContext `json:"kept_in_memory"`
}

// Resumed is a resumed sandbox and the evicted contexts it loaded again.
type Resumed struct {
	SandboxInfo
	// Restored are the evicted contexts loaded again.
	Restored []RestoredContext `json:"restored"`
}

// PauseOptions are a pause's options.
type PauseOptions struct {
	// Evict also saves the sandbox's Python contexts and ends their interpreters, to free
	// their memory; the resume (or a context's next cell) loads them again.
	Evict bool `json:"evict"`
}

// SandboxInfo describes a sandbox with a lifetime. Times are RFC 3339 UTC.
type SandboxInfo struct {
	// ID is {name}-{unix seconds} when a name was given, else sb-….
	ID string `json:"id"`
	// Name is the sandbox's name; nil if none.
	Name *string `json:"name"`
	// Profile is the profile the sandbox runs under.
	Profile string `json:"profile"`
	// Language is the sandbox's default language.
	Language string `json:"language"`
	// Labels are the caller's labels.
	Labels map[string]string `json:"labels"`
	// CreatedAt is when the sandbox was made.
	CreatedAt string `json:"created_at"`
	// LastUsedAt is when it was last used.
	LastUsedAt string `json:"last_used_at"`
	// ExpiresAt is the earlier of its idle and lifetime deadlines.
	ExpiresAt string `json:"expires_at"`
	// IdleTTLSeconds is the idle time after which it is destroyed.
	IdleTTLSeconds int64 `json:"idle_ttl_seconds"`
	// MaxLifetimeSeconds is the time after which it is destroyed, used or not.
	MaxLifetimeSeconds int64 `json:"max_lifetime_seconds"`
	// Limits are the limits every execution in it runs under.
	Limits Limits `json:"limits"`
	// Executions counts the executions started in it.
	Executions int64 `json:"executions"`
	// Backend is jail, docker or kubernetes.
	Backend string `json:"backend"`
	// State is SandboxRunning, or SandboxPaused (its processes frozen; its next use resumes
	// it).
	State SandboxState `json:"state"`
}

// SandboxState says whether a sandbox's processes may run.
type SandboxState string

// The states of a sandbox.
const (
	SandboxRunning SandboxState = "running"
	SandboxPaused  SandboxState = "paused"
)

// ContextInfo describes a context: a persistent interpreter inside a sandbox.
type ContextInfo struct {
	// ID is ctx-… or default.
	ID string `json:"id"`
	// SandboxID is the sandbox the context lives in.
	SandboxID string `json:"sandbox_id"`
	// Language is python or javascript.
	Language string `json:"language"`
	// CreatedAt is when the interpreter started.
	CreatedAt string `json:"created_at"`
	// LastUsedAt is when a cell last ran in it.
	LastUsedAt string `json:"last_used_at"`
	// Executions counts the cells run in it.
	Executions int64 `json:"executions"`
	// Restarts counts the times its interpreter was replaced by a fresh one.
	Restarts int64 `json:"restarts"`
	// Evicted: a pause ended its interpreter after saving its state, which the resume or its
	// next cell loads again.
	Evicted bool `json:"evicted,omitempty"`
}

// FileEntry is an entry of a workspace listing.
type FileEntry struct {
	// Path is relative to the workspace, /-separated.
	Path string `json:"path"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
	// IsDir is true for a directory.
	IsDir bool `json:"is_dir"`
}

// WrittenFile is the daemon's answer to an upload.
type WrittenFile struct {
	// Path is the file's path relative to the workspace.
	Path string `json:"path"`
	// Size is the number of bytes written.
	Size int64 `json:"size"`
}

// Health is the answer of /healthz and /readyz.
type Health struct {
	// Status is "ok" when the daemon serves.
	Status string `json:"status"`
	// FreeSlots is, from /readyz, the execution slots free now.
	FreeSlots *int64 `json:"free_slots,omitempty"`
	// Reason is, from /readyz answering 503 (Status "not_ready"), why the default profile
	// cannot run now.
	Reason string `json:"reason,omitempty"`
	// Code is, from /readyz answering 503, the error code a request would get.
	Code string `json:"code,omitempty"`
}

// ExecuteRequest is a one-shot execution (POST /v1/execute): code run once in a fresh
// sandbox. Zero fields take the daemon's defaults.
type ExecuteRequest struct {
	// Code is the program; required.
	Code string `json:"code"`
	// Language of the code (python, javascript, bash, or an alias); default: the profile's.
	Language string `json:"language,omitempty"`
	// Profile names the limits and policies; default: the daemon's default profile.
	Profile string `json:"profile,omitempty"`
	// TimeoutSeconds is the wall-clock limit, within the profile's quota; 0: the profile's.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
	// MemoryMb is the memory limit, MiB; 0: the profile's.
	MemoryMb int64 `json:"memory_mb,omitempty"`
	// Stdin is text given to the program on stdin.
	Stdin *string `json:"stdin,omitempty"`
	// Stream is set by ExecuteStream; leave it false.
	Stream bool `json:"stream,omitempty"`
}

// SandboxOptions is how a sandbox is created (POST /v1/sandboxes). Zero fields take the
// daemon's defaults.
type SandboxOptions struct {
	// Profile names the limits and policies; default: the daemon's default profile.
	Profile string `json:"profile,omitempty"`
	// Language is the sandbox's default language; default: the profile's.
	Language Language `json:"language,omitempty"`
	// Name is 1-48 characters of a-z, 0-9 and '-', unique among live sandboxes.
	Name string `json:"name,omitempty"`
	// Labels are kept with the sandbox and filter ListSandboxes.
	Labels map[string]string `json:"labels,omitempty"`
	// IdleTTLSeconds lowers the profile's idle time to live.
	IdleTTLSeconds int64 `json:"idle_ttl_seconds,omitempty"`
	// MaxLifetimeSeconds lowers the profile's maximum lifetime.
	MaxLifetimeSeconds int64 `json:"max_lifetime_seconds,omitempty"`
	// MemoryMb is the sandbox's memory limit, MiB.
	MemoryMb int64 `json:"memory_mb,omitempty"`
	// FromSnapshot names one of the API key's snapshots: the sandbox starts with its files
	// (and is durable).
	FromSnapshot string `json:"from_snapshot,omitempty"`
}

// ExecRequest is an execution in a sandbox (POST /v1/sandboxes/{id}/exec). Zero fields take
// the sandbox's defaults.
type ExecRequest struct {
	// Code is the program (or, with Context, the cell); required.
	Code string `json:"code"`
	// Language of the code; default: the sandbox's (or the context's).
	Language string `json:"language,omitempty"`
	// Context runs the code as a cell of this context ("default": the sandbox's default
	// Python context); empty: a fresh process.
	Context string `json:"context,omitempty"`
	// TimeoutSeconds is the wall-clock limit; 0: the profile's.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
	// Stdin is text given to the program on stdin (not in a context).
	Stdin *string `json:"stdin,omitempty"`
	// Args are the program's arguments (not in a context).
	Args []string `json:"args,omitempty"`
	// Env holds environment variables of this run only, set after the sandbox's (not in
	// a context).
	Env map[string]string `json:"env,omitempty"`
	// Cwd is this run's working directory: inside /workspace, /tmp or the sandbox's home
	// (not in a context); empty: the sandbox's.
	Cwd string `json:"cwd,omitempty"`
	// Stream is set by ExecStream; leave it false.
	Stream bool `json:"stream,omitempty"`
}

// wire types of answers that the SDK unwraps.

type sandboxList struct {
	Sandboxes []SandboxInfo `json:"sandboxes"`
	Count     int64         `json:"count"`
}

type contextList struct {
	Contexts []ContextInfo `json:"contexts"`
	Count    int64         `json:"count"`
}

type fileList struct {
	Files []FileEntry `json:"files"`
}

type destroyed struct {
	ID        string `json:"id"`
	Destroyed bool   `json:"destroyed"`
}

type createContextBody struct {
	Language string `json:"language,omitempty"`
}

type errorBody struct {
	Error *errorDetail `json:"error"`
}

type errorDetail struct {
	Code      string          `json:"code"`
	Message   string          `json:"message"`
	Violation json.RawMessage `json:"violation,omitempty"`
}
