package sdk

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors, matched with errors.Is against an *APIError (by the daemon's status and
// code), an *ExecutionError (by its code) or a *TransportError.
var (
	// ErrNotFound: an unknown sandbox, context, file or route (404; sandbox_not_found,
	// context_not_found, not_found).
	ErrNotFound = errors.New("warden: not found")
	// ErrTooManyRequests: the daemon's slots and queue, a key's own limits, or the
	// sandbox or context caps are full (429); APIError.RetryAfter says when to try again.
	ErrTooManyRequests = errors.New("warden: too many requests")
	// ErrPolicyViolation: a policy refused the code before it ran (policy_violation);
	// APIError.Violation says which policy, what and where.
	ErrPolicyViolation = errors.New("warden: policy violation")
	// ErrInvalidRequest: the request was malformed or named something unknown (400, 405,
	// 413, 415, 422 other than a policy violation).
	ErrInvalidRequest = errors.New("warden: invalid request")
	// ErrUnauthorized: a missing or wrong API key (401).
	ErrUnauthorized = errors.New("warden: unauthorized")
	// ErrConflict: a sandbox name already taken among live sandboxes (409, name_taken), or a
	// pause while an execution runs (409, sandbox_busy).
	ErrConflict = errors.New("warden: conflict")
	// ErrUnavailable: the backend is unavailable, the daemon shutting down, or the sandbox
	// lost under the run (503); the request may be tried again.
	ErrUnavailable = errors.New("warden: unavailable")
	// ErrConnection: the daemon could not be reached, or the connection broke.
	ErrConnection = errors.New("warden: cannot reach the daemon")
	// ErrDaemonGone: the connection broke while a request was in flight (the daemon
	// stopped or was killed); also matches ErrConnection.
	ErrDaemonGone = errors.New("warden: the daemon went away during the request")
	// ErrInvalidPath: a file path that cannot name a file in the workspace, refused
	// before any request.
	ErrInvalidPath = errors.New("warden: invalid workspace path")
)

// APIError is an answer of the daemon with an error status: {"error": {"code", "message",
// "violation"?}}.
type APIError struct {
	// Status is the HTTP status.
	Status int
	// Code is the daemon's stable error code (sandbox_not_found, policy_violation,
	// too_many_requests, …); empty when the body was not the API's error shape.
	Code string
	// Message is the daemon's message, or the start of a body that was not the API's shape.
	Message string
	// Violation is, for policy_violation, the policy's refusal.
	Violation *Violation
	// RetryAfter is, for 429 and 503, how long the daemon asks to wait (Retry-After).
	RetryAfter time.Duration
}

// Error returns "code (http status): message".
func (e *APIError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("warden: unexpected http %d answer: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("%s (http %d): %s", e.Code, e.Status, e.Message)
}

// Is matches the package's sentinel errors (see ErrNotFound and the others).
func (e *APIError) Is(target error) bool {
	return matchSentinel(target, e.Status, e.Code, e.Violation != nil)
}

// IsCallerError reports whether the request (or its code) was at fault rather than the daemon
// or the network: a 4xx other than 408 and 429. An agent can show these to its LLM.
func (e *APIError) IsCallerError() bool {
	return e.Status >= 400 && e.Status < 500 && e.Status != 408 && e.Status != 429
}

func matchSentinel(target error, status int, code string, violation bool) bool {
	switch target {
	case ErrNotFound:
		return status == 404 || strings.HasSuffix(code, "not_found")
	case ErrTooManyRequests:
		return status == 429 || code == "too_many_requests"
	case ErrPolicyViolation:
		return code == "policy_violation" || violation
	case ErrInvalidRequest:
		return (status == 400 || status == 405 || status == 413 || status == 415 || status == 422) &&
			code != "policy_violation" && !violation
	case ErrUnauthorized:
		return status == 401
	case ErrConflict:
		return status == 409
	case ErrUnavailable:
		return status == 503 || code == "sandbox_lost" || code == "backend_unavailable" || code == "shutting_down"
	}
	return false
}

// Violation is a policy's refusal, as the daemon reports it in a policy_violation error.
type Violation struct {
	// Policy is the policy that refused, as named in the profile's enabled_policies.
	Policy string `json:"policy"`
	// Kind is what kind of refusal (forbidden_import, dynamic_import, …).
	Kind string `json:"kind,omitempty"`
	// Message says what was refused.
	Message string `json:"message"`
	// Module is the refused module, for a forbidden_imports refusal.
	Module string `json:"module,omitempty"`
	// Line is the 1-based line in the code, 0 when the refusal has no place.
	Line int `json:"line,omitempty"`
	// Column is the 1-based column, in characters, 0 when unknown.
	Column int `json:"column,omitempty"`
	// Details holds every field of the violation, the kind's own ones included.
	Details map[string]interface{} `json:"-"`
}

// ExecutionError is a streamed execution that failed after its stream began: the daemon's
// error event (Code is the API's error code).
type ExecutionError struct {
	// Code is the API's error code.
	Code string
	// Message is the daemon's message.
	Message string
}

// Error returns "execution failed: code: message".
func (e *ExecutionError) Error() string {
	return fmt.Sprintf("warden: execution failed: %s: %s", e.Code, e.Message)
}

// Is matches the sentinel errors by the code.
func (e *ExecutionError) Is(target error) bool {
	return matchSentinel(target, 0, e.Code, false)
}

// TransportError is a failure below HTTP: the daemon could not be reached (ErrConnection),
// or the connection broke with a request in flight (ErrDaemonGone).
type TransportError struct {
	// Op is the operation, e.g. "POST /v1/execute".
	Op string
	// URL is the daemon's base URL.
	URL string
	// Gone is true when the request had been sent and the connection then broke.
	Gone bool
	// Err is the underlying error of net/http.
	Err error
}

// Error says what failed and where.
func (e *TransportError) Error() string {
	if e.Gone {
		return fmt.Sprintf("warden: %s: the daemon at %s went away: %v", e.Op, e.URL, e.Err)
	}
	return fmt.Sprintf("warden: %s: cannot connect to the daemon at %s: %v", e.Op, e.URL, e.Err)
}

// Unwrap returns the underlying error.
func (e *TransportError) Unwrap() error { return e.Err }

// Is matches ErrConnection, and ErrDaemonGone when Gone.
func (e *TransportError) Is(target error) bool {
	return target == ErrConnection || (e.Gone && target == ErrDaemonGone)
}

// DecodeError is a successful answer whose body is not what the API promises.
type DecodeError struct {
	// Op is the operation.
	Op string
	// Detail says what did not decode.
	Detail string
}

// Error says what did not decode.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("warden: %s: cannot decode the daemon's answer: %s", e.Op, e.Detail)
}

// apiError turns an error status and its body into an *APIError.
func apiError(status int, retryAfter time.Duration, body []byte) *APIError {
	var env errorBody
	if err := json.Unmarshal(body, &env); err != nil || env.Error == nil || env.Error.Code == "" {
		return &APIError{Status: status, Message: snippet(body), RetryAfter: retryAfter}
	}
	e := &APIError{Status: status, Code: env.Error.Code, Message: env.Error.Message, RetryAfter: retryAfter}
	if len(env.Error.Violation) > 0 && string(env.Error.Violation) != "null" {
		var v Violation
		if json.Unmarshal(env.Error.Violation, &v) == nil {
			_ = json.Unmarshal(env.Error.Violation, &v.Details)
			e.Violation = &v
		}
	}
	return e
}

func snippet(body []byte) string {
	text := strings.TrimSpace(strings.ToValidUTF8(string(body), "\uFFFD"))
	r := []rune(text)
	if len(r) > 200 {
		return string(r[:200]) + "…"
	}
	return text
}
