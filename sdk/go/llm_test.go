package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The LLM report must be the Rust crates' text: the expected outputs are warden-types' insta
// snapshots (crates/warden-types/src/snapshots), over the same inputs as its tests.

func intp(i int) *int { return &i }

func baseResult() *ExecResult {
	return &ExecResult{ExitCode: intp(0), Reason: ReasonExited, DurationMs: 12, Artifacts: []Artifact{}}
}

func rustSnapshot(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join("..", "..", "crates", "warden-types", "src", "snapshots", "warden_types__llm__tests__"+name+".snap")
	data, err := os.ReadFile(path)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the Rust snapshot %s is needed: %v", path, err)
		}
		recordSkip(t, fmt.Sprintf("the Rust snapshot %s is not here (outside the repository?): %v", path, err))
		t.Skipf("skipped: the Rust snapshot %s is not here (outside the repository?): %v", path, err)
	}
	parts := strings.SplitN(string(data), "---\n", 3)
	if len(parts) != 3 {
		t.Fatalf("%s: not an insta snapshot", path)
	}
	return strings.TrimSuffix(parts[2], "\n")
}

func TestReportMatchesTheRustSnapshots(t *testing.T) {
	t.Run("every_section_in_order", func(t *testing.T) {
		r := baseResult()
		r.Stdout, r.Stderr, r.ExitCode = "12.0\n", "warning\n", intp(1)
		r.Artifacts = []Artifact{{Name: "plot.png", MimeType: "image/png", Size: int64(len("\x89PNG-not-shown")), Bytes: []byte("\x89PNG-not-shown")}}
		r.SkippedArtifacts = []SkippedArtifact{{Name: "link", Why: "not a regular file"}}
		got := FormatForLLM(r, 2000)
		if strings.Contains(got, "PNG-not-shown") {
			t.Fatal("artifact bytes leaked")
		}
		if want := rustSnapshot(t, "every_section_in_order"); got != want {
			t.Fatalf("got:\n%s\nwant:\n%s", got, want)
		}
	})
	t.Run("long_output_is_cut_with_a_marker", func(t *testing.T) {
		r := baseResult()
		var b strings.Builder
		for i := 1; i <= 400; i++ {
			fmt.Fprintf(&b, "line %d\n", i)
		}
		r.Stdout, r.Stderr = b.String(), strings.Repeat("E", 5000)
		if got, want := FormatForLLM(r, 60), rustSnapshot(t, "long_output_is_cut_with_a_marker"); got != want {
			t.Fatalf("got:\n%s\nwant:\n%s", got, want)
		}
	})
	t.Run("an_output_flood_names_the_limit", func(t *testing.T) {
		r := baseResult()
		r.Stdout, r.StdoutTruncated, r.Reason, r.ExitCode, r.Signal = strings.Repeat("y\n", 3), true, ReasonOutput, nil, intp(9)
		if got, want := FormatForLLM(r, 2000), rustSnapshot(t, "an_output_flood_names_the_limit"); got != want {
			t.Fatalf("got:\n%s\nwant:\n%s", got, want)
		}
	})
	t.Run("escapes_and_controls_never_reach_the_model", func(t *testing.T) {
		r := baseResult()
		r.Stdout = "\x1b[32mok\x1b[0m 3 tests\r\n\x1b]0;pwned\x07downloading 10%\rdownloading 100%\n\tdone\x07\n"
		r.Stderr = "\x1b[1;31mwarning\x1b[0m: \x1b[4mdeprecated\x1b[24m \ufffd\x00\n"
		r.ExitCode = intp(1)
		r.Artifacts = []Artifact{{Name: "out\x1b[8m.csv", MimeType: "text/csv", Size: 3}}
		if got, want := FormatForLLM(r, 2000), rustSnapshot(t, "escapes_and_controls_never_reach_the_model"); got != want {
			t.Fatalf("got:\n%q\nwant:\n%q", got, want)
		}
	})
	t.Run("each_limit_has_its_sentence", func(t *testing.T) {
		var lines []string
		for _, c := range []struct {
			reason       Reason
			code, signal *int
		}{{ReasonTimeout, nil, intp(9)}, {ReasonMemory, nil, intp(9)}, {ReasonPids, intp(1), nil}, {ReasonSignal, nil, intp(11)}, {ReasonExited, intp(3), nil}} {
			r := baseResult()
			r.Reason, r.ExitCode, r.Signal = c.reason, c.code, c.signal
			lines = append(lines, fmt.Sprintf("%s: %s", c.reason, FormatForLLM(r, 2000)))
		}
		if got, want := strings.Join(lines, "\n"), rustSnapshot(t, "each_limit_has_its_sentence"); got != want {
			t.Fatalf("got:\n%s\nwant:\n%s", got, want)
		}
	})
}

func TestReportLikeTheRustUnitTests(t *testing.T) {
	if got := FormatForLLM(baseResult(), 2000); got != "(no output)" {
		t.Fatal(got)
	}
	r := baseResult()
	r.Stdout = "12.0\n"
	if got := FormatForLLM(r, 2000); got != "STDOUT:\n12.0" {
		t.Fatal(got)
	}
	// A cell: its value, its rich outputs named, never their bytes.
	r = baseResult()
	three, no, yes := "3", false, true
	r.Text, r.ContextRestarted = &three, &no
	r.Results = []RichResult{{MimeTypes: []string{"image/png", "text/plain"}, Data: map[string]string{"image/png": "iVBORw0KGgo="}}}
	if got := FormatForLLM(r, 100); got != "RESULT:\n3\n\nOUTPUTS:\n- output 1: image/png, text/plain" {
		t.Fatalf("%q", got)
	}
	r.Text, r.Results, r.ContextRestarted = nil, nil, &yes
	r.Error = &CellError{Name: "ZeroDivisionError", Value: "division by zero", Traceback: "  line 1, in <cell>"}
	got := FormatForLLM(r, 100)
	if !strings.HasPrefix(got, "ERROR:\n  line 1, in <cell>\nZeroDivisionError: division by zero") || !strings.Contains(got, "restarted") {
		t.Fatalf("%q", got)
	}
	// Many files are cut too.
	r = baseResult()
	for i := 0; i < 50; i++ {
		r.Artifacts = append(r.Artifacts, Artifact{Name: fmt.Sprintf("f%d.csv", i), MimeType: "text/csv", Size: 3})
	}
	got = FormatForLLM(r, 100)
	if !strings.HasPrefix(got, "FILES:\n- f0.csv (text/csv, 3 bytes)") || !strings.Contains(got, "characters truncated ...]") || !strings.HasSuffix(got, "- f49.csv (text/csv, 3 bytes)") {
		t.Fatalf("%q", got)
	}
	if got := FormatErrorForLLM("the code did not run: forbidden import of `os` at line 1\n", 2000); got != "ERROR:\nthe code did not run: forbidden import of `os` at line 1" {
		t.Fatalf("%q", got)
	}
	if got := FormatErrorForLLM(strings.Repeat("x", 50), 10); got != "ERROR:\nxxxxx\n[... 40 characters truncated ...]\nxxxxx" {
		t.Fatalf("%q", got)
	}
}

// The cases of warden-types' sanitize tests.
func TestSanitize(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"\x1b[31mred\x1b[0m plain", "red plain"},
		{"\x1b[1;38;5;208mbold\x1b[m", "bold"},
		{"\x1b[2J\x1b[Hcleared", "cleared"},
		{"\x1b[?25lhidden cursor\x1b[?25h", "hidden cursor"},
		{"\x1b]0;window title\x07text", "text"},
		{"\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\", "link"},
		{"\x1bP1$r0m\x1b\\dcs", "dcs"},
		{"\x1b_apc\x07\x1b^pm\x07\x1bXsos\x07after", "after"},
		{"\x1b7saved\x1b8", "saved"},
		{"\x1b(Bcharset", "charset"},
		{"\x1b=keypad\x1b>", "keypad"},
		{"\u009b31m8-bit csi", "8-bit csi"},
		{"\u009d0;title\u009c8-bit osc", "8-bit osc"},
		{"lone escape at the end\x1b", "lone escape at the end"},
		{"\x1b\x1b[31mtwo", "two"},
		{"\x1b]0;no end\nvisible", "\nvisible"},
		{"\x1b[31\néa", "\néa"},
		{"a\tb\nc", "a\tb\nc"},
		{"bell\x07 nul\x00 bs\x08 del\x7f c1\u0085.", "bell nul bs del c1."},
		{"\x01\x02\x0b\x0c\x1c\x1f", ""},
		{"bad \xff\xfe bytes", "bad \ufffd\ufffd bytes"},
		{"ünïcödé ✓ 😀", "ünïcödé ✓ 😀"},
		{"windows\r\nlines\r\n", "windows\nlines\n"},
		{"10%\r50%\r100%\ndone", "100%\ndone"},
		{"progress 100%\r\n", "progress 100%\n"},
		{"kept\r", "kept"},
		{"\r\r", ""},
	} {
		if got := Sanitize(c.in); got != c.want {
			t.Errorf("Sanitize(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := FormatErrorForLLM("\x1b[31mrefused\x1b[0m\n", 2000); got != "ERROR:\nrefused" {
		t.Fatalf("%q", got)
	}
}

func TestTruncate(t *testing.T) {
	var text string
	for i := 0; i < 100; i++ {
		text += string(rune('a' + i%26))
	}
	cut := Truncate(text, 20)
	if !strings.HasPrefix(cut, text[:10]) || !strings.HasSuffix(cut, text[90:]) || !strings.Contains(cut, "\n[... 80 characters truncated ...]\n") {
		t.Fatal(cut)
	}
	if Truncate("short", 20) != "short" || Truncate("exactly20characters!", 20) != "exactly20characters!" || Truncate(text, 0) != text {
		t.Fatal("no cut expected")
	}
	if got := Truncate(strings.Repeat("é", 30), 10); got != "ééééé\n[... 20 characters truncated ...]\nééééé" {
		t.Fatal(got)
	}
	if got := Truncate("abcdefgh", 3); got != "a\n[... 5 characters truncated ...]\ngh" {
		t.Fatal(got)
	}
}

func TestToolSchemaMatchesWhatParseAccepts(t *testing.T) {
	c, _ := NewClient(WithBaseURL("http://127.0.0.1:9"))
	tool := NewCodeInterpreterTool(c, "")
	schema := tool.ParametersSchema()
	if schema["type"] != "object" || schema["additionalProperties"] != false || !reflect.DeepEqual(schema["required"], []string{"code"}) {
		t.Fatalf("%v", schema)
	}
	props := schema["properties"].(map[string]interface{})
	if !reflect.DeepEqual(keys(props), []string{"code", "language", "timeout"}) ||
		!reflect.DeepEqual(props["language"].(map[string]interface{})["enum"], []string{"python", "javascript", "bash"}) {
		t.Fatalf("%v", props)
	}
	args, err := tool.Parse(`{"code": "print(1)", "language": "Python", "timeout": 2.5}`)
	if err != nil || args.Language != "Python" || args.Timeout != 2.5 {
		t.Fatalf("%+v %v", args, err)
	}
	for _, bad := range []string{`{"language": "python"}`, `{"code": "x", "extra": 1}`, `{"code": "x", "language": "cobol"}`,
		`{"code": "x", "timeout": -1}`, `{"code": 5}`, "not json", `{"code": "x"} {}`, `[]`} {
		if _, err := tool.Parse(bad); !errors.Is(err, ErrInvalidToolArguments) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	// Bad arguments are told to the LLM without a request (port 9 is not listened on).
	text := tool.Call(context.Background(), `{"code": "x", "language": "cobol"}`)
	if !strings.HasPrefix(text, "ERROR:\ninvalid tool arguments: language \"cobol\" is not offered") {
		t.Fatalf("%q", text)
	}
	tool.MaxOutputLength = 10
	if text := tool.Call(context.Background(), "{}"); !strings.HasPrefix(text, "ERROR:\n") || !strings.Contains(text, "truncated") {
		t.Fatalf("%q", text)
	}
	// Function-calling shapes.
	tool = NewCodeInterpreterTool(c, "").SetLanguages("python")
	tool.MaxOutputLength = 500
	openai, _ := json.Marshal(tool.OpenAITool())
	anthropic := tool.AnthropicTool()
	if !strings.Contains(string(openai), `"name":"code_interpreter"`) || !reflect.DeepEqual(anthropic["input_schema"], tool.ParametersSchema()) {
		t.Fatalf("%s", openai)
	}
	if d := tool.Description(); !strings.Contains(d, "Run python code") || !strings.Contains(d, "500 characters") {
		t.Fatal(d)
	}
}

func TestToolAgainstTheDaemon(t *testing.T) {
	c := testClient(t)
	ctx := ctxT(t)
	tool := NewCodeInterpreterTool(c, "")
	// The source document's usage example.
	if got := tool.Call(ctx, `{"code": "import math; print(math.sqrt(144))", "language": "python"}`); got != "STDOUT:\n12.0" {
		t.Fatalf("%q", got)
	}
	if got := tool.Call(ctx, `{"code": "echo oops >&2; exit 2", "language": "bash", "timeout": 5}`); got != "STDERR:\noops\n\nERROR:\nthe program exited with code 2" {
		t.Fatalf("%q", got)
	}
	// In a sandbox: files persist between calls.
	sb := newSandbox(t, c, SandboxOptions{Language: Python})
	tool = NewSandboxCodeInterpreterTool(sb)
	if !strings.Contains(tool.Description(), "All calls share one sandbox") {
		t.Fatal(tool.Description())
	}
	if got := tool.Call(ctx, `{"code": "open('n.txt','w').write('7')"}`); got != "(no output)" {
		t.Fatalf("%q", got)
	}
	if got := tool.Call(ctx, `{"code": "print(open('n.txt').read())"}`); got != "STDOUT:\n7" {
		t.Fatalf("%q", got)
	}
}
