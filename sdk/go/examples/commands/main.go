// The source document's example as it was meant: shell command lines go to RunCommand, Python
// code to Run. Run it against a daemon with WARDEN_URL=http://127.0.0.1:8080 go run ./examples/commands.
package main

import (
	"log"

	sdk "github.com/warden-sandbox/warden/sdk/go"
)

func main() {
	sandbox, err := sdk.CreateSandbox("debug-generated-code", sdk.Python)
	if err != nil {
		log.Fatalf("failed to create sandbox: %v", err)
	}
	defer sandbox.Destroy()

	output, err := sandbox.RunCommand(`python -c 'print("Hello, World!")'`)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("Output: %s", output.Result)

	output, err = sandbox.RunCommand(`python --version`)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("Output: %s", output.Result)

	output, err = sandbox.Run(`print("Hello, World!")`)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("Output: %s (exit code %d)", output.Result, output.ExitCode)
}
