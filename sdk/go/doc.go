// Package sdk is Warden's Go SDK: a client of `warden serve`'s REST API (docs/api.md in the
// repository), standard library only.
//
// Its import path is github.com/warden-sandbox/warden/sdk/go and its package name is sdk, so
// the source document's example works by changing its import line only:
//
//	sandbox, err := sdk.CreateSandbox("debug-generated-code", sdk.Python)
//	if err != nil {
//		log.Fatalf("failed to create sandbox: %v", err)
//	}
//	defer sandbox.Destroy()
//	output, err := sandbox.Run(`print("Hello, World!")`)
//	if err != nil {
//		log.Fatal(err)
//	}
//	log.Printf("Output: %s", output.Result)
//
// Two layers share one set of types:
//
//   - The document's shape: CreateSandbox(name, language), (*Sandbox).Run (code in the
//     sandbox's language, never through a shell), (*Sandbox).RunCommand (a shell command),
//     (*Sandbox).Destroy, and Output with Result (stdout then stderr), Stdout, Stderr,
//     ExitCode, Reason, DurationMs and Artifacts. These use DefaultClient (WARDEN_URL,
//     WARDEN_API_KEY) and context.Background.
//   - The whole API as idiomatic Go: a Client made by NewClient with options, a
//     context.Context on every call, one-shot Execute, sandboxes (create with profile,
//     labels and TTLs; list; get; destroy), executions with contexts (persistent
//     interpreters) and rich results, streaming with a Stream iterator, files (upload,
//     download, list), typed errors and the CodeInterpreterTool for function-calling LLMs.
//
// Errors: an answer of the daemon with an error status is always an *APIError with the
// daemon's status, code, message and, for a policy refusal, the Violation; errors.Is tells
// the kinds apart (ErrNotFound, ErrTooManyRequests — with APIError.RetryAfter —,
// ErrPolicyViolation, ErrInvalidRequest, ErrUnauthorized, ErrConflict, ErrUnavailable). A
// daemon that cannot be reached is ErrConnection; one whose connection broke while a request
// was in flight is ErrDaemonGone (which is also ErrConnection). A program that fails (a
// non-zero exit, a limit) is a normal result, never an error.
//
// The wire types are checked against the daemon's /openapi.json by the package's tests, so
// this SDK, the Rust SDK and the Python SDK cannot drift apart; the LLM-facing report
// (FormatForLLM) is the same text as theirs.
package sdk
