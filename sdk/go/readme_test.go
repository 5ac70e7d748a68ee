package sdk

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// The README's tour, errors and tool snippets compile against the SDK as it is (go vet on a
// generated file inside the module).
func TestTheReadmeTourCompiles(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) != 5 {
		t.Fatalf("the README has %d Go blocks; this test expects the example, the mapping, the tour, errors and the tool", len(blocks))
	}
	body := "input := \"x\"\n" + blocks[2][1] + "\n" +
		strings.Replace(blocks[3][1], "_, err := client.Execute", "_, err = client.Execute", 1) + "\n" + blocks[4][1]
	src := `package tour

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	sdk "github.com/warden-sandbox/warden/sdk/go"
)

func Tour() {
` + body + `
	_, _, _, _, _, _, _, _ = list, same, files, data, js, answer, r, err
}
`
	dir, err := os.MkdirTemp(".", "readme-check-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "tour.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "vet", "./"+filepath.Base(dir))
	cmd.Env = append(os.Environ(), "GOPROXY=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's snippets do not compile: %v\n%s", err, out)
	}
}
