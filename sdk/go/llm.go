package sdk

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The LLM-facing report of an execution: what an agent's model reads back after it ran code.
// The same text as the Rust crates' warden_types::llm and the Python SDK's format_result, so a
// result reads the same whatever the SDK:
//
//	STDOUT:
//	12.0
//
//	STDERR:
//	warning
//
//	ERROR:
//	the program exited with code 1
//
//	FILES:
//	- plot.png (image/png, 3 bytes)
//
// Sections appear only when they have something to say (STDOUT, STDERR, RESULT, OUTPUTS,
// ERROR, NOTE, FILES, in this order), separated by one blank line; a silent success is
// "(no output)". Each section's body is made fit for a model by Sanitize (escape sequences and
// control characters removed), then cut to maxLen characters (0: no cut) by Truncate, which
// keeps the beginning and the end around a visible marker; artifact bytes never appear.

// DefaultMaxOutputLength is the default cap of a report's section, in characters (the
// daemon's max_output_length default).
const DefaultMaxOutputLength = 2000

// Truncate cuts text to maxLen characters (Unicode code points), keeping its first half and
// last half around "\n[... N characters truncated ...]\n". maxLen 0, or a short enough text:
// the text as is.
func Truncate(text string, maxLen int) string {
	n := utf8.RuneCountInString(text)
	if maxLen <= 0 || n <= maxLen {
		return text
	}
	runes := []rune(text)
	head := maxLen / 2
	tail := maxLen - head
	return fmt.Sprintf("%s\n[... %d characters truncated ...]\n%s",
		string(runes[:head]), n-maxLen, string(runes[n-tail:]))
}

// Sanitize is text as a model should read it, as warden_types::llm::sanitize makes it:
// escape sequences removed whole (CSI "ESC [" ... a final byte; OSC, DCS, SOS, PM and APC
// strings up to BEL, "ESC \\" or a newline, which is kept; other ESC sequences; their 8-bit
// forms U+009B, U+009D, ...; a lone ESC), control characters (U+0000-U+001F, U+007F-U+009F)
// dropped except "\n" and "\t", "\r\n" read as a newline, and a line with other carriage
// returns reduced to what follows the last one that has text after it ("10%\r100%" reads
// "100%"). Bytes that are not UTF-8 become U+FFFD, visibly.
func Sanitize(text string) string {
	runes := []rune(text) // invalid UTF-8: one U+FFFD per bad byte
	var out strings.Builder
	out.Grow(len(text))
	hasCR := false
	for i := 0; i < len(runes); {
		c := runes[i]
		i++
		switch {
		case c == 0x1b:
			i = skipEscape(runes, i)
		case c == 0x9b:
			i = skipCSI(runes, i)
		case c == 0x90 || c == 0x98 || c == 0x9d || c == 0x9e || c == 0x9f:
			i = skipString(runes, i)
		case c == '\n' || c == '\t':
			out.WriteRune(c)
		case c == '\r':
			hasCR = true
			out.WriteRune(c)
		case c < 0x20 || (c >= 0x7f && c <= 0x9f):
		default:
			out.WriteRune(c)
		}
	}
	if !hasCR {
		return out.String()
	}
	lines := strings.Split(out.String(), "\n")
	for n, line := range lines {
		line = strings.TrimSuffix(line, "\r")
		parts := strings.Split(line, "\r")
		line = ""
		for k := len(parts) - 1; k >= 0; k-- {
			if parts[k] != "" {
				line = parts[k]
				break
			}
		}
		lines[n] = line
	}
	return strings.Join(lines, "\n")
}

func inRange(runes []rune, i int, lo, hi rune) bool {
	return i < len(runes) && runes[i] >= lo && runes[i] <= hi
}

// skipEscape returns the index after the rest of an ESC sequence starting at i.
func skipEscape(runes []rune, i int) int {
	if i >= len(runes) {
		return i
	}
	switch c := runes[i]; {
	case c == '[':
		return skipCSI(runes, i+1)
	case c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_':
		return skipString(runes, i+1)
	case c >= 0x20 && c <= 0x2f:
		for inRange(runes, i, 0x20, 0x2f) {
			i++
		}
		if inRange(runes, i, 0x30, 0x7e) {
			i++
		}
		return i
	case c >= 0x30 && c <= 0x7e:
		return i + 1
	}
	return i // a lone ESC: dropped, what follows is text
}

// skipCSI returns the index after a CSI's parameters, intermediates and final byte.
func skipCSI(runes []rune, i int) int {
	for inRange(runes, i, 0x20, 0x3f) {
		i++
	}
	if inRange(runes, i, 0x40, 0x7e) {
		i++
	}
	return i
}

// skipString returns the index after an OSC, DCS, SOS, PM or APC string: after its BEL,
// U+009C or "ESC \\", or at the newline that ends it.
func skipString(runes []rune, i int) int {
	for i < len(runes) {
		switch runes[i] {
		case '\n':
			return i
		case 0x07, 0x9c:
			return i + 1
		case 0x1b:
			if i+1 < len(runes) && runes[i+1] == '\\' {
				return i + 2
			}
			return skipEscape(runes, i+1)
		}
		i++
	}
	return i
}

func trimEnd(s string) string { return strings.TrimRightFunc(s, unicode.IsSpace) }

// whyNotSuccess is why a run did not succeed, in a sentence; "" for a success.
func whyNotSuccess(r *ExecResult) string {
	if r.IsSuccess() {
		return ""
	}
	switch r.Reason {
	case ReasonTimeout:
		return "the time limit ended the run (timeout); every process was killed"
	case ReasonMemory:
		return "the memory limit was hit (memory); the program was killed"
	case ReasonPids:
		return "the process limit was hit (pids): too many processes or threads"
	case ReasonOutput:
		return "the output passed its size limit (output); the run was stopped"
	case ReasonSignal:
		if r.Signal != nil {
			return fmt.Sprintf("the program was killed by signal %d", *r.Signal)
		}
		return "the program was killed by a signal"
	default:
		if r.ExitCode != nil {
			return fmt.Sprintf("the program exited with code %d", *r.ExitCode)
		}
		return "the program ended without an exit code"
	}
}

func outputSection(title, text string, stopped bool, stream string, maxLen int) (string, bool) {
	text = trimEnd(Sanitize(text))
	if text == "" {
		return "", false
	}
	body := Truncate(text, maxLen)
	if stopped {
		body += fmt.Sprintf("\n[... the sandbox stopped keeping %s here: output limit ...]", stream)
	}
	return title + ":\n" + body, true
}

// FormatForLLM is the report of one execution, each section cut to maxLen characters.
func FormatForLLM(r *ExecResult, maxLen int) string {
	var sections []string
	if s, ok := outputSection("STDOUT", r.Stdout, r.StdoutTruncated, "stdout", maxLen); ok {
		sections = append(sections, s)
	}
	if s, ok := outputSection("STDERR", r.Stderr, r.StderrTruncated, "stderr", maxLen); ok {
		sections = append(sections, s)
	}
	if r.Text != nil {
		sections = append(sections, "RESULT:\n"+Truncate(Sanitize(*r.Text), maxLen))
	}
	var outputs strings.Builder
	for i, res := range r.Results {
		main := ""
		if res.IsMainResult {
			main = " (the cell's value)"
		}
		fmt.Fprintf(&outputs, "- output %d%s: %s\n", i+1, main, strings.Join(res.MimeTypes, ", "))
	}
	if outputs.Len() > 0 {
		sections = append(sections, "OUTPUTS:\n"+Truncate(trimEnd(Sanitize(outputs.String())), maxLen))
	}
	if e := r.Error; e != nil {
		text := e.Name + ": " + e.Value
		if e.Traceback != "" {
			text = trimEnd(e.Traceback) + "\n" + text
		}
		sections = append(sections, "ERROR:\n"+Truncate(Sanitize(text), maxLen))
	} else if why := whyNotSuccess(r); why != "" {
		sections = append(sections, "ERROR:\n"+Truncate(why, maxLen))
	}
	if r.ContextRestarted != nil && *r.ContextRestarted {
		sections = append(sections, "NOTE:\nthe interpreter was restarted: variables defined before this cell are gone")
	}
	var egress strings.Builder
	for _, d := range r.EgressDenied {
		fmt.Fprintf(&egress, "- %s:%d refused: %s\n", d.Host, d.Port, d.Why)
	}
	if egress.Len() > 0 {
		sections = append(sections, "EGRESS:\n"+Truncate(trimEnd(Sanitize(egress.String())), maxLen))
	}
	var files strings.Builder
	for _, a := range r.Artifacts {
		fmt.Fprintf(&files, "- %s (%s, %d bytes)\n", a.Name, a.MimeType, a.Size)
	}
	for _, s := range r.SkippedArtifacts {
		fmt.Fprintf(&files, "- %s: not returned (%s)\n", s.Name, s.Why)
	}
	if files.Len() > 0 {
		sections = append(sections, "FILES:\n"+Truncate(trimEnd(Sanitize(files.String())), maxLen))
	}
	if len(sections) == 0 {
		return "(no output)"
	}
	return strings.Join(sections, "\n\n")
}

// FormatErrorForLLM is the report of a request refused before anything ran (a policy
// violation, an unknown sandbox or language, a bad argument): message as an ERROR: section,
// sanitized and cut to maxLen characters.
func FormatErrorForLLM(message string, maxLen int) string {
	return "ERROR:\n" + Truncate(trimEnd(Sanitize(message)), maxLen)
}
