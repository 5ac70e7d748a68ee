package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// DefaultToolLanguages are the languages a CodeInterpreterTool offers unless told otherwise:
// the daemon's built-in runtimes.
var DefaultToolLanguages = []string{"python", "javascript", "bash"}

// CodeInterpreterArgs are the arguments an LLM passes to the tool, as its schema describes.
type CodeInterpreterArgs struct {
	// Code is the complete program.
	Code string
	// Language is one of the tool's languages; "" for the tool's default.
	Language string
	// Timeout is the wall-clock limit in seconds; 0 for the sandbox's.
	Timeout float64
}

// ErrInvalidToolArguments marks arguments that do not match the tool's schema.
var ErrInvalidToolArguments = errors.New("invalid tool arguments")

// CodeInterpreterTool is a "run code" tool for function-calling LLMs (the source document's
// CodeInterpreterTool): a name, a description, the JSON schema of its arguments (code,
// language, timeout) and a call that takes the LLM's arguments and answers with text for its
// context, in the report format of FormatForLLM (the same text as the Rust and Python tools).
//
// Call always answers with text: what the LLM can fix (bad arguments, a language not offered,
// a policy refusal, any other 4xx of the daemon) is an ERROR: section; TryCall returns the
// failures of the daemon or the network (ErrConnection, 5xx, 429) as errors instead.
type CodeInterpreterTool struct {
	client          *Client
	profile         string
	sandbox         *Sandbox
	languages       []string
	defaultLanguage string
	// MaxOutputLength caps each section of an answer, characters (default
	// DefaultMaxOutputLength; 0: no cut).
	MaxOutputLength int
}

// NewCodeInterpreterTool runs each call in a fresh sandbox of profile ("" for the daemon's
// default profile).
func NewCodeInterpreterTool(client *Client, profile string) *CodeInterpreterTool {
	return newTool(client, profile, nil, DefaultToolLanguages[0])
}

// NewSandboxCodeInterpreterTool runs every call in sandbox: files written by one call are
// there for the next. The sandbox's language is the default; destroying it stays the
// caller's job.
func NewSandboxCodeInterpreterTool(sandbox *Sandbox) *CodeInterpreterTool {
	return newTool(sandbox.client, "", sandbox, sandbox.info.Language)
}

func newTool(client *Client, profile string, sandbox *Sandbox, defaultLanguage string) *CodeInterpreterTool {
	languages := append([]string(nil), DefaultToolLanguages...)
	if !contains(languages, defaultLanguage) {
		languages = append([]string{defaultLanguage}, languages...)
	}
	return &CodeInterpreterTool{
		client: client, profile: profile, sandbox: sandbox,
		languages: languages, defaultLanguage: defaultLanguage,
		MaxOutputLength: DefaultMaxOutputLength,
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// SetLanguages sets the languages the schema offers (lowercased); the first becomes the
// default when the current default is not among them. An empty list is ignored.
func (t *CodeInterpreterTool) SetLanguages(languages ...string) *CodeInterpreterTool {
	if len(languages) == 0 {
		return t
	}
	t.languages = nil
	for _, l := range languages {
		t.languages = append(t.languages, strings.ToLower(l))
	}
	if !contains(t.languages, t.defaultLanguage) {
		t.defaultLanguage = t.languages[0]
	}
	return t
}

// Languages returns the languages the schema offers.
func (t *CodeInterpreterTool) Languages() []string { return append([]string(nil), t.languages...) }

// Name is the function name to register with the LLM.
func (t *CodeInterpreterTool) Name() string { return "code_interpreter" }

// Description says what the tool does, for the LLM.
func (t *CodeInterpreterTool) Description() string {
	persistence := "Each call runs in a fresh sandbox: nothing persists between calls."
	if t.sandbox != nil {
		persistence = "All calls share one sandbox: files written under /workspace persist between calls (variables do not)."
	}
	return fmt.Sprintf("Run %s code in an isolated sandbox (no network, read-only system, time and memory "+
		"limits) and see what it printed. %s Print the values you need: the answer has STDOUT, STDERR, "+
		"ERROR (why the run failed) and FILES (files written to /workspace/output) sections, cut to %d characters.",
		strings.Join(t.languages, ", "), persistence, t.MaxOutputLength)
}

// ParametersSchema is the JSON schema of the arguments (an object schema, as OpenAI's
// parameters and Anthropic's input_schema expect).
func (t *CodeInterpreterTool) ParametersSchema() map[string]interface{} {
	return map[string]interface{}{
		"type": "object",
		"properties": map[string]interface{}{
			"code": map[string]interface{}{
				"type":        "string",
				"description": "The complete program to run.",
			},
			"language": map[string]interface{}{
				"type":        "string",
				"enum":        t.Languages(),
				"description": fmt.Sprintf("The language of the code (default: %s).", t.defaultLanguage),
			},
			"timeout": map[string]interface{}{
				"type":             "number",
				"exclusiveMinimum": 0,
				"description":      "Wall-clock limit in seconds (default: the sandbox's).",
			},
		},
		"required":             []string{"code"},
		"additionalProperties": false,
	}
}

// OpenAITool is the tool as OpenAI's chat completions API takes it in tools.
func (t *CodeInterpreterTool) OpenAITool() map[string]interface{} {
	return map[string]interface{}{
		"type": "function",
		"function": map[string]interface{}{
			"name":        t.Name(),
			"description": t.Description(),
			"parameters":  t.ParametersSchema(),
		},
	}
}

// AnthropicTool is the tool as Anthropic's messages API takes it in tools.
func (t *CodeInterpreterTool) AnthropicTool() map[string]interface{} {
	return map[string]interface{}{
		"name":         t.Name(),
		"description":  t.Description(),
		"input_schema": t.ParametersSchema(),
	}
}

// Parse checks the LLM's arguments (a JSON object as text) against the schema; a mismatch is
// ErrInvalidToolArguments.
func (t *CodeInterpreterTool) Parse(argsJSON string) (*CodeInterpreterArgs, error) {
	var wire struct {
		Code     *string  `json:"code"`
		Language *string  `json:"language"`
		Timeout  *float64 `json:"timeout"`
	}
	dec := json.NewDecoder(strings.NewReader(argsJSON))
	dec.DisallowUnknownFields()
	bad := func(format string, a ...interface{}) error {
		return fmt.Errorf("%w: %s", ErrInvalidToolArguments, fmt.Sprintf(format, a...))
	}
	if err := dec.Decode(&wire); err != nil {
		return nil, bad("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("trailing data after the arguments' object")
	}
	if !bytes.HasPrefix(bytes.TrimSpace([]byte(argsJSON)), []byte("{")) {
		return nil, bad("expected a JSON object")
	}
	if wire.Code == nil {
		return nil, bad("missing field `code`")
	}
	args := &CodeInterpreterArgs{Code: *wire.Code}
	if wire.Language != nil {
		if !contains(t.languages, strings.ToLower(*wire.Language)) {
			return nil, bad("language %q is not offered; use one of: %s", *wire.Language, strings.Join(t.languages, ", "))
		}
		args.Language = *wire.Language
	}
	if wire.Timeout != nil {
		if math.IsInf(*wire.Timeout, 0) || math.IsNaN(*wire.Timeout) || *wire.Timeout <= 0 {
			return nil, bad("timeout: expected a positive number of seconds")
		}
		args.Timeout = *wire.Timeout
	}
	return args, nil
}

// Run runs checked arguments and returns the whole result.
func (t *CodeInterpreterTool) Run(ctx context.Context, args *CodeInterpreterArgs) (*ExecResult, error) {
	language := strings.ToLower(args.Language)
	if language == "" {
		language = t.defaultLanguage
	}
	if t.sandbox != nil {
		return t.sandbox.Exec(ctx, ExecRequest{Code: args.Code, Language: language, TimeoutSeconds: args.Timeout})
	}
	return t.client.Execute(ctx, ExecuteRequest{Code: args.Code, Language: language, Profile: t.profile, TimeoutSeconds: args.Timeout})
}

// TryCall runs the LLM's arguments and answers with the report; refusals the LLM can fix are
// an ERROR: report, other failures are returned as errors.
func (t *CodeInterpreterTool) TryCall(ctx context.Context, argsJSON string) (string, error) {
	args, err := t.Parse(argsJSON)
	var result *ExecResult
	if err == nil {
		result, err = t.Run(ctx, args)
	}
	if err == nil {
		return FormatForLLM(result, t.MaxOutputLength), nil
	}
	var apiErr *APIError
	switch {
	case errors.Is(err, ErrInvalidToolArguments) || errors.Is(err, ErrInvalidPath):
		return FormatErrorForLLM(err.Error(), t.MaxOutputLength), nil
	case errors.As(err, &apiErr) && apiErr.IsCallerError():
		return FormatErrorForLLM(refusal(apiErr), t.MaxOutputLength), nil
	}
	return "", err
}

// Call runs the LLM's arguments and answers with text for the LLM, whatever happened.
func (t *CodeInterpreterTool) Call(ctx context.Context, argsJSON string) string {
	text, err := t.TryCall(ctx, argsJSON)
	if err != nil {
		return FormatErrorForLLM("the code could not be run: "+err.Error(), t.MaxOutputLength)
	}
	return text
}

// refusal is what the LLM is told when its call was refused before running: the daemon's
// message, with the violation's place when the message does not already say it.
func refusal(e *APIError) string {
	place := ""
	if v := e.Violation; v != nil && v.Line > 0 && !strings.Contains(e.Message, fmt.Sprintf("line %d", v.Line)) {
		if v.Column > 0 {
			place = fmt.Sprintf(" (line %d, column %d)", v.Line, v.Column)
		} else {
			place = fmt.Sprintf(" (line %d)", v.Line)
		}
	}
	if e.Code == "" {
		return e.Error()
	}
	// A refusal by the import guard stopped the run at the refused import.
	ran := "the code was not run"
	if strings.Contains(e.Message, "refused at run time") {
		ran = "the run was stopped there"
	}
	return fmt.Sprintf("%s: %s%s; %s", e.Code, e.Message, place, ran)
}
