package sdk

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestHealthReadyOpenAPIMetrics(t *testing.T) {
	c := testClient(t)
	ctx := ctxT(t)
	h, err := c.Health(ctx)
	if err != nil || h.Status != "ok" {
		t.Fatalf("health: %+v %v", h, err)
	}
	r, err := c.Ready(ctx)
	if err != nil || r.FreeSlots == nil || *r.FreeSlots != 4 {
		t.Fatalf("ready: %+v %v", r, err)
	}
	spec, err := c.OpenAPI(ctx)
	if err != nil || !strings.HasPrefix(spec["openapi"].(string), "3.") {
		t.Fatalf("openapi: %v", err)
	}
	m, err := c.Metrics(ctx)
	if err != nil || !strings.Contains(m, "warden_") {
		t.Fatalf("metrics: %v %.200s", err, m)
	}
}

func TestExecuteOneShot(t *testing.T) {
	c := testClient(t)
	ctx := ctxT(t)
	r, err := c.Execute(ctx, ExecuteRequest{Code: "import math; print(math.sqrt(144))", Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Stdout != "12.0\n" || !r.IsSuccess() || r.Reason != ReasonExited || r.ShellStatus() != 0 {
		t.Fatalf("%+v", r)
	}
	stdin := "from stdin"
	r, err = c.Execute(ctx, ExecuteRequest{Code: "cat; echo; echo err >&2; exit 3", Language: "bash", Stdin: &stdin, TimeoutSeconds: 5, MemoryMb: 64, Profile: "standard"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Stdout != "from stdin\n" || r.Stderr != "err\n" || r.IsSuccess() || *r.ExitCode != 3 {
		t.Fatalf("%+v", r)
	}
	if got := FormatForLLM(r, 2000); got != "STDOUT:\nfrom stdin\n\nSTDERR:\nerr\n\nERROR:\nthe program exited with code 3" {
		t.Fatalf("report: %q", got)
	}
	r, err = c.Execute(ctx, ExecuteRequest{Code: "sleep 5", Language: "bash", TimeoutSeconds: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if r.Reason != ReasonTimeout || r.ShellStatus() != 124 {
		t.Fatalf("timeout: %+v", r)
	}
}

func TestArtifactsComeBackDecoded(t *testing.T) {
	c := testClient(t)
	r, err := c.Execute(ctxT(t), ExecuteRequest{Language: "bash",
		Code: "mkdir -p output && printf 'a,b\\n1,2\\n' > output/table.csv && echo done"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Artifacts) != 1 {
		t.Fatalf("%+v", r)
	}
	a := r.Artifacts[0]
	if a.Name != "table.csv" || string(a.Bytes) != "a,b\n1,2\n" || a.Size != 8 || !strings.HasPrefix(a.MimeType, "text/csv") || len(a.Sha256) != 64 {
		t.Fatalf("%+v", a)
	}
	if got := FormatForLLM(r, 2000); !strings.HasSuffix(got, "FILES:\n- table.csv ("+a.MimeType+", 8 bytes)") {
		t.Fatalf("%q", got)
	}
}

func TestExecuteStream(t *testing.T) {
	c := testClient(t)
	s, err := c.ExecuteStream(ctxT(t), ExecuteRequest{Language: "bash", Code: "echo one; sleep 0.3; echo two >&2; echo three"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out, errs string
	var end *ExecResult
	for s.Next() {
		ev := s.Event()
		switch ev.Type {
		case EventStdout:
			out += ev.Text
			if ev.Timestamp == 0 {
				t.Errorf("no timestamp: %+v", ev)
			}
		case EventStderr:
			errs += ev.Text
		case EventEnd:
			end = ev.Result
		}
	}
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
	if out != "one\nthree\n" || errs != "two\n" || end == nil || end.Stdout != out || !end.IsSuccess() {
		t.Fatalf("out %q errs %q end %+v", out, errs, end)
	}
	if s.Next() {
		t.Fatal("events after the end")
	}
}

func TestSandboxLifecycleFilesAndStreams(t *testing.T) {
	c := testClient(t)
	ctx := ctxT(t)
	label := "go-sdk-" + time.Now().Format("150405.000000")
	label = strings.ReplaceAll(label, ".", "")
	sb := newSandbox(t, c, SandboxOptions{Profile: "standard", Language: Python, Name: label,
		Labels: map[string]string{"suite": label}, IdleTTLSeconds: 120, MaxLifetimeSeconds: 300, MemoryMb: 128})
	info := sb.Info()
	if !strings.HasPrefix(sb.ID(), label+"-") || info.Name == nil || *info.Name != label || info.Language != "python" ||
		info.IdleTTLSeconds != 120 || info.MaxLifetimeSeconds != 300 || info.Limits.MemoryMb != 128 || info.Labels["suite"] != label {
		t.Fatalf("%+v", info)
	}
	// Get by id and by name; list with and without a label filter.
	for _, key := range []string{sb.ID(), label} {
		got, err := c.GetSandbox(ctx, key)
		if err != nil || got.ID() != sb.ID() {
			t.Fatalf("get %s: %v", key, err)
		}
	}
	list, err := c.ListSandboxes(ctx, map[string]string{"suite": label})
	if err != nil || len(list) != 1 || list[0].ID != sb.ID() {
		t.Fatalf("list: %+v %v", list, err)
	}
	if all, err := c.ListSandboxes(ctx, nil); err != nil || len(all) < 1 {
		t.Fatalf("list all: %+v %v", all, err)
	}
	if none, err := c.ListSandboxes(ctx, map[string]string{"suite": "nothing-" + label}); err != nil || len(none) != 0 {
		t.Fatalf("list none: %+v %v", none, err)
	}
	// Files: upload, list, download, and a program that reads them.
	w, err := sb.Upload(ctx, "data/in.txt", []byte("hello file"))
	if err != nil || w.Size != 10 {
		t.Fatalf("upload: %+v %v", w, err)
	}
	if _, err := sb.Upload(ctx, "/workspace/bin.dat", []byte{0, 1, 2, 255}); err != nil {
		t.Fatal(err)
	}
	files, err := sb.Files(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]FileEntry{}
	for _, f := range files {
		seen[f.Path] = f
	}
	if seen["data/in.txt"].Size != 10 || !seen["data"].IsDir || seen["bin.dat"].Size != 4 {
		t.Fatalf("files: %+v", files)
	}
	if b, err := sb.Download(ctx, "bin.dat"); err != nil || !bytes.Equal(b, []byte{0, 1, 2, 255}) {
		t.Fatalf("download: %v %v", b, err)
	}
	r, err := sb.Exec(ctx, ExecRequest{Code: "print(open('data/in.txt').read().upper())"})
	if err != nil || r.Stdout != "HELLO FILE\n" {
		t.Fatalf("exec: %+v %v", r, err)
	}
	stdin := "x"
	r, err = sb.Exec(ctx, ExecRequest{Code: `echo "$1 $2 $(cat)" > made.txt`, Language: "bash", Args: []string{"a", "b c"}, Stdin: &stdin, TimeoutSeconds: 5})
	if err != nil || !r.IsSuccess() {
		t.Fatalf("exec bash: %+v %v", r, err)
	}
	if b, err := sb.Download(ctx, "made.txt"); err != nil || string(b) != "a b c x\n" {
		t.Fatalf("made.txt: %q %v", b, err)
	}
	if _, err := sb.Download(ctx, "../etc/passwd"); !errors.Is(err, ErrInvalidPath) {
		t.Fatalf("bad path: %v", err)
	}
	if _, err := sb.Download(ctx, "missing.txt"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing file: %v", err)
	}
	// A stream in the sandbox.
	s, err := sb.ExecStream(ctx, ExecRequest{Code: "for i in range(3): print(i, flush=True)"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Result()
	if err != nil || res.Stdout != "0\n1\n2\n" {
		t.Fatalf("stream result: %+v %v", res, err)
	}
	s, err = sb.ExecStream(ctx, ExecRequest{Code: "echo a; echo b", Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	var chunks []string
	for ev := range s.Events() {
		if ev.Type == EventStdout {
			chunks = append(chunks, ev.Text)
		}
	}
	if s.Err() != nil || strings.Join(chunks, "") != "a\nb\n" {
		t.Fatalf("channel: %q %v", chunks, s.Err())
	}
	if info, err := sb.Refresh(ctx); err != nil || info.Executions < 4 || info.State != SandboxRunning {
		t.Fatalf("refresh: %+v %v", info, err)
	}
	// Pause and resume; a run resumes a paused sandbox too.
	if info, err := sb.Pause(ctx); err != nil || info.State != SandboxPaused {
		t.Fatalf("pause: %+v %v", info, err)
	}
	if info, err := sb.Resume(ctx); err != nil || info.State != SandboxRunning {
		t.Fatalf("resume: %+v %v", info, err)
	}
	if _, err := sb.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := sb.Exec(ctx, ExecRequest{Code: "print(7)"}); err != nil || r.Stdout != "7\n" {
		t.Fatalf("exec after pause: %+v %v", r, err)
	}
	// An evicting pause saves a context's variables and names what it cannot save.
	if r, err := sb.Exec(ctx, ExecRequest{Code: "kept = 6\nnumbers = (i for i in range(2))", Context: "default"}); err != nil || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("cell: %+v %v", r, err)
	}
	paused, err := sb.Pause(ctx, PauseOptions{Evict: true})
	if err != nil || len(paused.Evicted) != 1 || len(paused.Evicted[0].Unsaved) != 1 || paused.Evicted[0].Unsaved[0].Name != "numbers" {
		t.Fatalf("evicting pause: %+v %v", paused, err)
	}
	if resumed, err := sb.Resume(ctx); err != nil || len(resumed.Restored) != 1 || resumed.State != SandboxRunning {
		t.Fatalf("resume: %+v %v", resumed, err)
	}
	if r, err := sb.Exec(ctx, ExecRequest{Code: "print(kept * 7)", Context: "default"}); err != nil || r.Stdout != "42\n" {
		t.Fatalf("after the restore: %+v %v", r, err)
	}
	if info, err := sb.Refresh(ctx); err != nil || info.State != SandboxRunning {
		t.Fatalf("after the run: %+v %v", info, err)
	}
	// Destroy: gone afterwards.
	if err := sb.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SandboxInfo(ctx, sb.ID()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after destroy: %v", err)
	}
}

func TestContexts(t *testing.T) {
	c := testClient(t)
	ctx := ctxT(t)
	sb := newSandbox(t, c, SandboxOptions{Language: Python})
	// The default context, made by its first cell.
	r, err := sb.Exec(ctx, ExecRequest{Code: "x = 20", Context: "default"})
	if err != nil || r.ExecutionCount == nil || *r.ExecutionCount != 1 {
		t.Fatalf("%+v %v", r, err)
	}
	r, err = sb.Exec(ctx, ExecRequest{Code: "x + 22", Context: "default"})
	if err != nil || r.Text == nil || *r.Text != "42" || len(r.Results) != 1 || !r.Results[0].IsMainResult {
		t.Fatalf("%+v %v", r, err)
	}
	if d, ok := r.Results[0].Decoded("text/plain"); !ok || string(d) != "42" {
		t.Fatalf("decoded: %q", d)
	}
	if got := FormatForLLM(r, 2000); got != "RESULT:\n42\n\nOUTPUTS:\n- output 1 (the cell's value): text/plain" {
		t.Fatalf("%q", got)
	}
	r, err = sb.Exec(ctx, ExecRequest{Code: "1/0", Context: "default"})
	if err != nil || r.Error == nil || r.Error.Name != "ZeroDivisionError" || r.ShellStatus() != 1 {
		t.Fatalf("%+v %v", r, err)
	}
	// An explicit JavaScript context, listed, restarted, deleted.
	info, err := sb.CreateContext(ctx, "javascript")
	if err != nil || info.Language != "javascript" || info.SandboxID != sb.ID() {
		t.Fatalf("create context: %+v %v", info, err)
	}
	r, err = sb.Exec(ctx, ExecRequest{Code: "var y = 6 * 7; y", Context: info.ID})
	if err != nil || r.Text == nil || *r.Text != "42" {
		t.Fatalf("js cell: %+v %v", r, err)
	}
	list, err := sb.Contexts(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("contexts: %+v %v", list, err)
	}
	got, err := c.GetContext(ctx, sb.ID(), info.ID)
	if err != nil || got.Executions != 1 {
		t.Fatalf("get context: %+v %v", got, err)
	}
	restarted, err := sb.RestartContext(ctx, info.ID)
	if err != nil || restarted.Restarts != 1 {
		t.Fatalf("restart: %+v %v", restarted, err)
	}
	r, err = sb.Exec(ctx, ExecRequest{Code: "typeof y", Context: info.ID})
	if err != nil || r.Text == nil || *r.Text != "'undefined'" {
		t.Fatalf("after restart: %+v %v", r, err)
	}
	// A streamed cell.
	s, err := sb.ExecStream(ctx, ExecRequest{Code: "print('streamed'); x", Context: "default"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Result()
	if err != nil || res.Stdout != "streamed\n" || res.Text == nil || *res.Text != "20" {
		t.Fatalf("streamed cell: %+v %v", res, err)
	}
	if err := sb.DeleteContext(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetContext(ctx, sb.ID(), info.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted context: %v", err)
	}
}
