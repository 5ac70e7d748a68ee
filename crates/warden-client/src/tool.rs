//! A "run code" tool for function-calling LLMs (the source document's CodeInterpreterTool):
//! a name, a description, the JSON schema of its arguments (`code`, `language`, `timeout`),
//! and a call that takes the LLM's arguments and answers with text for its context.
//!
//! Invariants: [`CodeInterpreterTool::call`] always answers with text, at most
//! `max_output_length` characters; what the LLM can fix (bad arguments, a language the tool
//! does not offer, a policy refusal, any other 4xx of the daemon) comes back as an `ERROR:`
//! section, while [`CodeInterpreterTool::try_call`] keeps failures of the daemon or the network
//! as [`Error`]s for the application; the schema accepts exactly what `call` accepts
//! (`additionalProperties: false`, the same language list).

use crate::client::{Client, ExecuteRequest};
use crate::error::Error;
use crate::sandbox::{RunRequest, Sandbox};
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;
use warden_types::ExecResult;
use warden_types::llm::{format_error_for_llm, format_for_llm};

/// The default cap of a tool answer, characters (the source document's `max_output_length`).
pub const DEFAULT_MAX_OUTPUT_LENGTH: usize = 2000;

/// The languages offered unless [`CodeInterpreterTool::languages`] says otherwise: the
/// daemon's built-in runtimes.
pub const DEFAULT_LANGUAGES: [&str; 3] = ["python", "javascript", "bash"];

/// The arguments an LLM passes, as the schema describes them.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeInterpreterArgs {
    /// The complete program.
    pub code: String,
    /// One of the tool's languages; default: the tool's default language.
    #[serde(default)]
    pub language: Option<String>,
    /// Wall-clock limit, seconds.
    #[serde(default)]
    pub timeout: Option<f64>,
}

#[derive(Debug, Clone)]
enum Target {
    /// Each call in a fresh sandbox.
    OneShot {
        client: Client,
        profile: Option<String>,
    },
    /// Every call in one sandbox: files persist between calls.
    Sandbox(Box<Sandbox>),
}

/// A code-execution tool backed by a Warden daemon.
///
/// ```no_run
/// # async fn demo() -> Result<(), warden_client::Error> {
/// use warden_client::{Client, CodeInterpreterTool};
/// let tool = CodeInterpreterTool::one_shot(Client::new("http://127.0.0.1:8080")?);
/// let schema = tool.parameters_schema(); // give this to the LLM with tool.name()
/// let answer = tool
///     .call(r#"{"code": "import math; print(math.sqrt(144))", "language": "python"}"#)
///     .await;
/// assert_eq!(answer, "STDOUT:\n12.0");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct CodeInterpreterTool {
    target: Target,
    languages: Vec<String>,
    default_language: String,
    max_output_length: usize,
}

impl CodeInterpreterTool {
    /// Runs each call in a fresh sandbox with the daemon's default profile.
    pub fn one_shot(client: Client) -> Self {
        Self::new(
            Target::OneShot {
                client,
                profile: None,
            },
            DEFAULT_LANGUAGES[0].to_owned(),
        )
    }

    /// Runs each call in a fresh sandbox with `profile`'s limits and policies.
    pub fn one_shot_with_profile(client: Client, profile: impl Into<String>) -> Self {
        Self::new(
            Target::OneShot {
                client,
                profile: Some(profile.into()),
            },
            DEFAULT_LANGUAGES[0].to_owned(),
        )
    }

    /// Runs every call in `sandbox`: files written by one call are there for the next. The
    /// sandbox's language is the default; destroying the sandbox stays the caller's job.
    pub fn in_sandbox(sandbox: Sandbox) -> Self {
        let language = sandbox.created_info().language.clone();
        Self::new(Target::Sandbox(Box::new(sandbox)), language)
    }

    fn new(target: Target, default_language: String) -> Self {
        let mut languages: Vec<String> = DEFAULT_LANGUAGES.iter().map(|&l| l.to_owned()).collect();
        if !languages.contains(&default_language) {
            languages.insert(0, default_language.clone());
        }
        CodeInterpreterTool {
            target,
            languages,
            default_language,
            max_output_length: DEFAULT_MAX_OUTPUT_LENGTH,
        }
    }

    /// The languages the schema offers (the first is the default when the sandbox's own is
    /// not among them). Empty lists are ignored.
    pub fn languages(mut self, languages: &[&str]) -> Self {
        if languages.is_empty() {
            return self;
        }
        self.languages = languages.iter().map(|l| l.to_ascii_lowercase()).collect();
        if !self.languages.contains(&self.default_language) {
            self.default_language = self.languages[0].clone();
        }
        self
    }

    /// The longest answer, in characters (default [`DEFAULT_MAX_OUTPUT_LENGTH`]).
    pub fn max_output_length(mut self, max: usize) -> Self {
        self.max_output_length = max;
        self
    }

    /// The function name to register with the LLM.
    pub fn name(&self) -> &'static str {
        "code_interpreter"
    }

    /// What the tool does, for the LLM.
    pub fn description(&self) -> String {
        let persistence = match self.target {
            Target::OneShot { .. } => {
                "Each call runs in a fresh sandbox: nothing persists between calls."
            }
            Target::Sandbox(_) => {
                "All calls share one sandbox: files written under /workspace persist between \
                 calls (variables do not)."
            }
        };
        format!(
            "Run {} code in an isolated sandbox (no network, read-only system, time and memory \
             limits) and see what it printed. {persistence} Print the values you need: the \
             answer has STDOUT, STDERR, ERROR (why the run failed) and FILES (files written \
             to /workspace/output) sections, cut to {} characters.",
            self.languages.join(", "),
            self.max_output_length
        )
    }

    /// The JSON schema of the arguments (an `object` schema, as OpenAI's `parameters` and
    /// Anthropic's `input_schema` expect).
    pub fn parameters_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "code": {
                    "type": "string",
                    "description": "The complete program to run.",
                },
                "language": {
                    "type": "string",
                    "enum": self.languages,
                    "description": format!(
                        "The language of the code (default: {}).", self.default_language
                    ),
                },
                "timeout": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "description": "Wall-clock limit in seconds (default: the sandbox's).",
                },
            },
            "required": ["code"],
            "additionalProperties": false,
        })
    }

    /// The tool as OpenAI's chat completions API takes it in `tools`.
    pub fn openai_tool(&self) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": self.name(),
                "description": self.description(),
                "parameters": self.parameters_schema(),
            },
        })
    }

    /// The tool as Anthropic's messages API takes it in `tools`.
    pub fn anthropic_tool(&self) -> Value {
        json!({
            "name": self.name(),
            "description": self.description(),
            "input_schema": self.parameters_schema(),
        })
    }

    /// Runs the LLM's arguments (a JSON object as text) and answers with text for the LLM,
    /// whatever happened.
    pub async fn call(&self, args_json: &str) -> String {
        match self.try_call(args_json).await {
            Ok(text) => text,
            Err(e) => self.error_text(&format!("the code could not be run: {e}")),
        }
    }

    /// Like [`call`](Self::call), but failures that are not the LLM's to fix (the daemon
    /// unreachable, a timeout, a 5xx, a 429) are returned as errors.
    pub async fn try_call(&self, args_json: &str) -> Result<String, Error> {
        let outcome = match self.parse(args_json) {
            Ok(args) => self.run(args).await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(result) => Ok(format_for_llm(&result, self.max_output_length)),
            Err(e) if e.is_caller_error() => Ok(self.error_text(&refusal(&e))),
            Err(e) => Err(e),
        }
    }

    /// Checks the LLM's arguments against the schema.
    pub fn parse(&self, args_json: &str) -> Result<CodeInterpreterArgs, Error> {
        let args: CodeInterpreterArgs = serde_json::from_str(args_json)
            .map_err(|e| Error::InvalidToolArguments(e.to_string()))?;
        if let Some(language) = &args.language
            && !self.languages.contains(&language.to_ascii_lowercase())
        {
            return Err(Error::InvalidToolArguments(format!(
                "language {language:?} is not offered; use one of: {}",
                self.languages.join(", ")
            )));
        }
        if let Some(t) = args.timeout
            && !(t.is_finite() && t > 0.0)
        {
            return Err(Error::InvalidToolArguments(
                "timeout: expected a positive number of seconds".into(),
            ));
        }
        Ok(args)
    }

    /// Runs checked arguments and returns the whole result.
    pub async fn run(&self, args: CodeInterpreterArgs) -> Result<ExecResult, Error> {
        let language = args
            .language
            .map(|l| l.to_ascii_lowercase())
            .unwrap_or_else(|| self.default_language.clone());
        let timeout = args.timeout.map(Duration::from_secs_f64);
        match &self.target {
            Target::OneShot { client, profile } => {
                let mut request = ExecuteRequest::new(args.code).language(language);
                if let Some(profile) = profile {
                    request = request.profile(profile.clone());
                }
                if let Some(t) = timeout {
                    request = request.timeout(t);
                }
                client.execute(request).await
            }
            Target::Sandbox(sandbox) => {
                let mut request = RunRequest::new(args.code).language(language);
                if let Some(t) = timeout {
                    request = request.timeout(t);
                }
                sandbox.run_with(request).await
            }
        }
    }

    fn error_text(&self, message: &str) -> String {
        format_error_for_llm(message, self.max_output_length)
    }
}

/// What the LLM is told when its call was refused: the daemon's message, with the violation's
/// place when the message does not already say it, and whether the code ran (a refusal by the
/// import guard stops a run at the refused import: "refused at run time" in its message).
/// What the daemon's message of a refusal by the import guard says (see
/// `warden_engine::import_guard::Refusal::violation`).
const RUN_TIME_REFUSAL: &str = "refused at run time";

fn refusal(e: &Error) -> String {
    match e {
        Error::Api {
            code,
            message,
            violation,
            ..
        } => {
            let place = match violation.as_deref().and_then(|v| Some((v.line?, v.column))) {
                Some((line, _)) if message.contains(&format!("line {line}")) => String::new(),
                Some((line, Some(column))) => format!(" (line {line}, column {column})"),
                Some((line, None)) => format!(" (line {line})"),
                None => String::new(),
            };
            let ran = if message.contains(RUN_TIME_REFUSAL) {
                "the run was stopped there"
            } else {
                "the code was not run"
            };
            format!("{code}: {message}{place}; {ran}")
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool() -> CodeInterpreterTool {
        CodeInterpreterTool::one_shot(Client::new("http://127.0.0.1:9").unwrap())
    }

    #[test]
    fn the_schema_matches_what_parse_accepts() {
        let t = tool();
        let schema = t.parameters_schema();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!(["code"]));
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(
            schema["properties"]["language"]["enum"],
            json!(["python", "javascript", "bash"])
        );
        let props: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
        assert_eq!(props, ["code", "language", "timeout"]);

        let args = t
            .parse(r#"{"code": "print(1)", "language": "Python", "timeout": 2.5}"#)
            .unwrap();
        assert_eq!(args.language.as_deref(), Some("Python"));
        assert_eq!(args.timeout, Some(2.5));
        for bad in [
            r#"{"language": "python"}"#,
            r#"{"code": "x", "extra": 1}"#,
            r#"{"code": "x", "language": "cobol"}"#,
            r#"{"code": "x", "timeout": -1}"#,
            r#"{"code": 5}"#,
            "not json",
        ] {
            assert!(
                matches!(t.parse(bad), Err(Error::InvalidToolArguments(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn function_calling_shapes() {
        let t = tool().languages(&["python"]).max_output_length(500);
        let openai = t.openai_tool();
        assert_eq!(openai["type"], "function");
        assert_eq!(openai["function"]["name"], "code_interpreter");
        assert_eq!(openai["function"]["parameters"], t.parameters_schema());
        let anthropic = t.anthropic_tool();
        assert_eq!(anthropic["input_schema"], t.parameters_schema());
        let description = anthropic["description"].as_str().unwrap();
        assert!(description.contains("Run python code") && description.contains("500 characters"));
        assert_eq!(
            t.parameters_schema()["properties"]["language"]["enum"],
            json!(["python"])
        );
    }

    #[tokio::test]
    async fn bad_arguments_are_told_to_the_llm_without_a_request() {
        // Port 9 (discard) is not listened on here: a request would fail as Connect.
        let text = tool().call(r#"{"code": "x", "language": "cobol"}"#).await;
        assert!(
            text.starts_with("ERROR:\ninvalid tool arguments: language \"cobol\" is not offered"),
            "{text}"
        );
        // Cut to the limit with the shared report's visible marker.
        let text = tool().max_output_length(10).call("{}").await;
        assert!(
            text.starts_with("ERROR:\n") && text.contains("truncated"),
            "{text}"
        );
    }

    #[test]
    fn policy_refusals_name_the_place_once() {
        let body = |message: &str| {
            format!(
                r#"{{"error":{{"code":"policy_violation","message":"{message}","violation":{{"policy":"forbidden_imports","module":"os","message":"m","line":2,"column":8}}}}}}"#
            )
        };
        let e = crate::error::from_error_body("execute", 422, None, body("no os").as_bytes());
        assert_eq!(
            refusal(&e),
            "policy_violation: no os (line 2, column 8); the code was not run"
        );
        let e = crate::error::from_error_body(
            "execute",
            422,
            None,
            body("no os (line 2, column 8)").as_bytes(),
        );
        assert_eq!(
            refusal(&e),
            "policy_violation: no os (line 2, column 8); the code was not run"
        );
    }

    #[test]
    fn a_refusal_at_run_time_says_the_run_was_stopped() {
        let body = br#"{"error":{"code":"policy_violation","message":"policy forbidden_imports refused the request: import of \"os\" refused at run time: not allowed by the profile's allowed_modules (line 3)","violation":{"policy":"forbidden_imports","kind":"forbidden_import","module":"os","message":"m","line":3,"column":null}}}"#;
        let e = crate::error::from_error_body("execute", 422, None, body);
        let text = refusal(&e);
        assert!(
            text.ends_with("(line 3); the run was stopped there"),
            "{text}"
        );
        assert_eq!(text.matches("line 3").count(), 1, "{text}");
    }
}
