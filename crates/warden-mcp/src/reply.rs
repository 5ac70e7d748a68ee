//! Tool results: text for the model (the `warden_types::llm` report) and structured content
//! for programs, and the tools' one error enum.
//!
//! Invariants: whatever goes wrong with a call the model made — bad arguments, an unknown
//! sandbox, a policy violation, a failed or killed run, a full queue — is a tool result with
//! `isError: true` whose text says what to change, never a protocol error; every text is cut
//! to `max_output_length` with a visible marker; internal failures are logged on stderr (never
//! stdout: it is the stdio transport) and reported without their details.

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};
use warden_engine::EngineError;
use warden_types::ExecResult;
use warden_types::llm::{format_error_for_llm, format_for_llm};

/// Why a tool call did not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("invalid argument {field}: {message}")]
    InvalidArgument {
        field: &'static str,
        message: String,
    },
    #[error("internal error: {0}")]
    Internal(String),
}

impl ToolError {
    /// A short machine-readable code, the engine's (the REST API's) where one exists.
    pub fn code(&self) -> &'static str {
        match self {
            ToolError::Engine(e) => e.code(),
            ToolError::InvalidArgument { .. } => "invalid_request",
            ToolError::Internal(_) => "internal",
        }
    }

    /// The sentence the model reads: what went wrong and, where it can, what to change.
    pub fn message(&self) -> String {
        match self {
            // The import guard's refusal stopped a run at the refused import.
            ToolError::Engine(EngineError::PolicyViolation(v))
                if v.message.contains("refused at run time") =>
            {
                format!("the run was stopped: {self}")
            }
            ToolError::Engine(EngineError::PolicyViolation(_)) => {
                format!("the code did not run: {self}")
            }
            ToolError::Engine(EngineError::SandboxNotFound(_)) => {
                format!("{self}; list_sandboxes shows the live ones")
            }
            e if e.code() == "internal" => {
                eprintln!("warden mcp: {e}");
                "internal error; see the server's log".to_owned()
            }
            e => e.to_string(),
        }
    }

    /// The tool result that reports it.
    pub fn into_result(self, max_len: usize) -> CallToolResult {
        let message = self.message();
        let mut structured = json!({
            "success": false,
            "message": message,
            "error": self.code(),
        });
        if let ToolError::Engine(EngineError::PolicyViolation(v)) = &self
            && let Ok(v) = serde_json::to_value(v)
        {
            structured["violation"] = v;
        }
        let mut result = CallToolResult::error(vec![ContentBlock::text(format_error_for_llm(
            &message, max_len,
        ))]);
        result.structured_content = Some(structured);
        result
    }
}

/// A successful call: `text` for the model (cut to `max_len`), `structured` for programs.
pub fn done(text: &str, structured: Value, max_len: usize) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(
        warden_types::llm::truncate(text, max_len),
    )]);
    result.structured_content = Some(structured);
    result
}

/// An execution's result: the LLM report as text; `isError` unless the program exited 0.
/// The structured content carries the source document's `success, output, exit_code` (`output`
/// is the report, already cut) and the files by name — never their bytes.
pub fn ran(result: &ExecResult, max_len: usize) -> CallToolResult {
    let output = format_for_llm(result, max_len);
    let files: Vec<Value> = result
        .artifacts
        .iter()
        .map(|a| json!({ "name": a.name, "size": a.size, "mime_type": a.mime_type }))
        .collect();
    let structured = json!({
        "success": result.is_success(),
        "output": output,
        "exit_code": result.shell_status(),
        "reason": result.reason,
        "duration_ms": result.duration_ms,
        "files": files,
    });
    let content = vec![ContentBlock::text(output)];
    let mut reply = if result.is_success() {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    };
    reply.structured_content = Some(structured);
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_engine::BackendError;
    use warden_types::Reason;

    fn text_of(r: &CallToolResult) -> &str {
        &r.content[0].as_text().expect("text").text
    }

    fn exec_result(exit_code: i32) -> ExecResult {
        ExecResult {
            stdout: "hi\n".into(),
            stderr: String::new(),
            exit_code: Some(exit_code),
            signal: None,
            reason: Reason::Exited,
            duration_ms: 5,
            stdout_truncated: false,
            stderr_truncated: false,
            artifacts: vec![warden_types::Artifact {
                name: "a.csv".into(),
                size: 3,
                mime_type: "text/csv".into(),
                sha256: "x".into(),
                bytes: b"1,2".to_vec(),
            }],
            skipped_artifacts: vec![],
            cell: Default::default(),
            egress: Default::default(),
        }
    }

    #[test]
    fn a_failed_run_is_a_tool_error_with_its_report() {
        let ok = ran(&exec_result(0), 2000);
        assert_eq!(ok.is_error, Some(false));
        let failed = ran(&exec_result(3), 2000);
        assert_eq!(failed.is_error, Some(true));
        assert!(text_of(&failed).contains("ERROR:\nthe program exited with code 3"));
        let s = failed.structured_content.unwrap();
        assert_eq!(s["success"], false);
        assert_eq!(s["exit_code"], 3);
        assert_eq!(
            s["files"],
            json!([{"name": "a.csv", "size": 3, "mime_type": "text/csv"}])
        );
        assert!(!s.to_string().contains("MSwy"), "artifact bytes leaked");
    }

    #[test]
    fn an_unknown_sandbox_says_where_to_look() {
        let r = ToolError::from(EngineError::SandboxNotFound("nope".into())).into_result(2000);
        assert_eq!(r.is_error, Some(true));
        assert_eq!(
            text_of(&r),
            "ERROR:\nno sandbox \"nope\"; list_sandboxes shows the live ones"
        );
        assert_eq!(r.structured_content.unwrap()["error"], "sandbox_not_found");
    }

    #[test]
    fn internal_details_stay_in_the_log() {
        let r = ToolError::from(EngineError::Backend(BackendError::Internal(
            "secret path /var/x".into(),
        )))
        .into_result(2000);
        assert_eq!(text_of(&r), "ERROR:\ninternal error; see the server's log");
    }

    #[test]
    fn texts_are_cut() {
        let r = done(&"z".repeat(100), json!({}), 10);
        assert_eq!(
            text_of(&r),
            "zzzzz\n[... 90 characters truncated ...]\nzzzzz"
        );
    }
}
