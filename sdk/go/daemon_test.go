package sdk

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests run against real `warden serve` daemons: the binary is WARDEN_BIN, else
// $CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/debug/warden, else the shared cache's build,
// else `warden` on PATH. A test that needs a daemon and cannot have one fails when CI is set
// and is skipped (with the reason) otherwise — never passes silently.

var listening = regexp.MustCompile(`listening on (http://\S+)`)

// daemon is one `warden serve` started by the tests.
type daemon struct {
	cmd  *exec.Cmd
	url  string
	mu   sync.Mutex
	logs strings.Builder
	// Its own data directory (durable sandboxes), removed when it stops.
	dataDir string
}

var (
	daemonsMu sync.Mutex
	daemons   []*daemon
	shared    *daemon
	sharedErr error
)

func TestMain(m *testing.M) {
	code := m.Run()
	daemonsMu.Lock()
	for _, d := range daemons {
		d.stop()
	}
	daemonsMu.Unlock()
	os.Exit(code)
}

// wardenBinary finds the daemon's binary, or says why there is none.
func wardenBinary() (string, error) {
	if bin := os.Getenv("WARDEN_BIN"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("WARDEN_BIN=%s: %v", bin, err)
		}
		return bin, nil
	}
	debug := filepath.Join("x86_64-unknown-linux-gnu", "debug", "warden")
	var candidates []string
	if dir := os.Getenv("CARGO_TARGET_DIR"); dir != "" {
		candidates = append(candidates, filepath.Join(dir, debug))
	}
	candidates = append(candidates, filepath.Join("/var/cache/warden/target", debug))
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return c, nil
		}
	}
	if p, err := exec.LookPath("warden"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("no warden binary: set WARDEN_BIN or build it (cargo build -p warden)")
}

// unavailable fails the test under CI and skips it otherwise, recorded in the skip log that
// scripts/test.sh lists (WARDEN_SKIP_LOG, as the Rust tests' tests/support/prerequisite.rs).
func unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("cannot run (CI is set, so this fails): %s", why)
	}
	recordSkip(t, why)
	t.Skipf("skipped: %s (set WARDEN_BIN and run as root)", why)
}

// recordSkip appends `SKIPPED: go::<test>: <why>` to $WARDEN_SKIP_LOG, when it is set.
func recordSkip(t testing.TB, why string) {
	t.Helper()
	log := os.Getenv("WARDEN_SKIP_LOG")
	if log == "" {
		return
	}
	f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatalf("record the skip in %s: %v", log, err)
	}
	defer f.Close()
	fmt.Fprintf(f, "SKIPPED: go::%s: %s\n", t.Name(), why)
}

// startDaemon starts `warden serve` on a free loopback port with extra flags.
func startDaemon(t testing.TB, extra ...string) *daemon {
	t.Helper()
	d, err := launch(extra...)
	if err != nil {
		unavailable(t, err.Error())
	}
	return d
}

func launch(extra ...string) (*daemon, error) {
	bin, err := wardenBinary()
	if err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("warden serve builds real sandboxes and needs root")
	}
	dataDir, err := os.MkdirTemp("", "warden-go-data-")
	if err != nil {
		return nil, err
	}
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data-dir", dataDir}, extra...)
	d := &daemon{cmd: exec.Command(bin, args...), dataDir: dataDir}
	d.cmd.Env = append(os.Environ(), "RUST_LOG=warn")
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	d.cmd.Stdout = io.Discard
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %v", bin, err)
	}
	daemonsMu.Lock()
	daemons = append(daemons, d)
	daemonsMu.Unlock()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			d.mu.Lock()
			d.logs.WriteString(line + "\n")
			d.mu.Unlock()
			if m := listening.FindStringSubmatch(line); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		close(found)
	}()
	select {
	case u, ok := <-found:
		if !ok {
			d.stop()
			return nil, fmt.Errorf("warden serve exited before listening: %s", d.log())
		}
		d.url = u
	case <-time.After(60 * time.Second):
		d.stop()
		return nil, fmt.Errorf("warden serve did not listen within 60 s: %s", d.log())
	}
	return d, nil
}

func (d *daemon) log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.logs.String()
}

func (d *daemon) stop() {
	if d.cmd.Process != nil && d.cmd.ProcessState == nil {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = d.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = d.cmd.Process.Kill()
			<-done
		}
	}
	if d.dataDir != "" {
		_ = os.RemoveAll(d.dataDir)
	}
}

// kill ends the daemon at once (SIGKILL), as a crash would.
func (d *daemon) kill() {
	_ = d.cmd.Process.Kill()
	_ = d.cmd.Wait()
}

// sharedDaemon is the daemon most tests share (four execution slots).
func sharedDaemon(t testing.TB) *daemon {
	t.Helper()
	daemonsMu.Lock()
	if shared == nil && sharedErr == nil {
		daemonsMu.Unlock()
		d, err := launch("--max-concurrent", "4")
		daemonsMu.Lock()
		shared, sharedErr = d, err
	}
	d, err := shared, sharedErr
	daemonsMu.Unlock()
	if err != nil {
		unavailable(t, err.Error())
	}
	return d
}

// testClient is a client of the shared daemon.
func testClient(t testing.TB) *Client {
	t.Helper()
	d := sharedDaemon(t)
	c, err := NewClient(WithBaseURL(d.url), WithTimeout(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("warden serve log (end):\n%s", tail(d.log(), 3000))
		}
	})
	return c
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newSandbox creates a sandbox destroyed at the test's end.
func newSandbox(t testing.TB, c *Client, opts SandboxOptions) *Sandbox {
	t.Helper()
	sb, err := c.CreateSandbox(ctxT(t), opts)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	t.Cleanup(func() { _ = c.DestroySandbox(context.Background(), sb.ID()) })
	return sb
}
