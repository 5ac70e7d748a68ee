package sdk

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The source document's example, run as the program it is (examples/document: verbatim
// apart from the import path), and its mapping (examples/commands), against a real daemon.

// runExample runs `go run ./dir` against the shared daemon; the sandbox the examples name
// is destroyed afterwards (log.Fatal skips the example's deferred Destroy).
func runExample(t *testing.T, dir string) (string, error) {
	t.Helper()
	d := sharedDaemon(t)
	c := testClient(t)
	t.Cleanup(func() { _ = c.DestroySandbox(context.Background(), "debug-generated-code") })
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(goBin, "run", "./"+dir)
	cmd.Env = append(os.Environ(), "WARDEN_URL="+d.url, "GOPROXY=off")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestTheDocumentsExampleVerbatim(t *testing.T) {
	// The example file must be the document's text with only the import path changed.
	src, err := os.ReadFile(filepath.Join("examples", "document", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	body := string(src)[strings.Index(string(src), "package main"):]
	doc := strings.Replace(body, `"github.com/warden-sandbox/warden/sdk/go"`, `"github.com/system32-ai/sandboxed/pkg/sdk"`, 1)
	if doc != documentExample {
		t.Fatalf("examples/document/main.go is no longer the document's example:\n%s", doc)
	}
	out, err := runExample(t, filepath.Join("examples", "document"))
	// Code given to Run is Python, never a shell line: the default profile's
	// forbidden_imports policy parses `python -c '…'` as Python and refuses it (a syntax
	// error), so Run returns a policy_violation *APIError and the example stops at its first
	// log.Fatal. RunCommand is the mapping (TestTheDocumentsExampleMapped).
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || strings.Contains(out, "Output: ") ||
		!strings.Contains(out, "policy_violation (http 422): policy forbidden_imports refused the request: syntax error") {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("the document's example printed:\n%s", out)
}

func TestTheDocumentsExampleMapped(t *testing.T) {
	out, err := runExample(t, filepath.Join("examples", "commands"))
	if err != nil || !strings.Contains(out, "Output: Hello, World!\n") || !strings.Contains(out, "Output: Python 3.") ||
		!strings.Contains(out, "Output: Hello, World!\n (exit code 0)") {
		t.Fatalf("%v\n%s", err, out)
	}
}

func TestTheDocumentsShapeInProcess(t *testing.T) {
	c := testClient(t)
	SetDefaultClient(c)
	defer SetDefaultClient(nil)
	sandbox, err := CreateSandbox("go-doc-shape", JavaScript)
	if err != nil {
		t.Fatal(err)
	}
	defer sandbox.Destroy()
	out, err := sandbox.Run(`console.log("hi"); console.error("there"); process.exit(4)`)
	if err != nil {
		t.Fatal(err)
	}
	if out.Result != "hi\nthere\n" || out.Stdout != "hi\n" || out.Stderr != "there\n" || out.ExitCode != 4 ||
		out.Reason != ReasonExited || out.Success() || out.DurationMs <= 0 && out.Exec == nil {
		t.Fatalf("%+v", out)
	}
	out, err = sandbox.RunCommand("mkdir -p output && echo x > output/a.txt && echo done")
	if err != nil || out.Result != "done\n" || len(out.Artifacts) != 1 || out.Artifacts[0].Name != "a.txt" {
		t.Fatalf("%+v %v", out, err)
	}
}

// documentExample is the source document's "Using Native SDK" example (seed 003), as written.
const documentExample = `package main

import (
    "log"
    "github.com/system32-ai/sandboxed/pkg/sdk"
)

func main() {

    sandbox, err := sdk.CreateSandbox("debug-generated-code", sdk.Python)
    if err != nil {
    log.Fatalf("failed to create sandbox: %v", err)
    }

    defer sandbox.Destroy()

    code := ` + "`" + `python -c 'print("Hello, World!")'` + "`" + `

    output, err := sandbox.Run(code)
    if err != nil {
    log.Fatal(err)
    }

    log.Printf("Output: %s", output.Result)

    code = ` + "`" + `python --version` + "`" + `
    output, err = sandbox.Run(code)
    if err != nil {
    log.Fatal(err)
    }

    log.Printf("Output: %s", output.Result)
}
`
