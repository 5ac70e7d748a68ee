// The source document's "Using Native SDK" example, verbatim apart from its import path.
// Run it against a daemon with WARDEN_URL=http://127.0.0.1:8080 go run ./examples/document.
//
// Warden runs the code given to Run in the sandbox's language (here Python), never through a
// shell: with the default profile, whose forbidden_imports policy parses the code as Python,
// the first Run is refused (policy_violation: a syntax error) and the example stops at its
// log.Fatal. examples/commands is the mapping: RunCommand for shell command lines, Run for
// Python code. (This file keeps the document's indentation, so gofmt would change it.)
package main

import (
    "log"
    "github.com/warden-sandbox/warden/sdk/go"
)

func main() {

    sandbox, err := sdk.CreateSandbox("debug-generated-code", sdk.Python)
    if err != nil {
    log.Fatalf("failed to create sandbox: %v", err)
    }

    defer sandbox.Destroy()

    code := `python -c 'print("Hello, World!")'`

    output, err := sandbox.Run(code)
    if err != nil {
    log.Fatal(err)
    }

    log.Printf("Output: %s", output.Result)

    code = `python --version`
    output, err = sandbox.Run(code)
    if err != nil {
    log.Fatal(err)
    }

    log.Printf("Output: %s", output.Result)
}
