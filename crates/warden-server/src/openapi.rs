//! `GET /openapi.json` and `GET /docs`: the API described from the code itself. Request and
//! response schemas are generated (schemars) from the very types the handlers decode and
//! encode, and the operations come from [`OPERATIONS`], which a test compares with the
//! router's routes, so the description cannot drift from what is served.
//!
//! Invariant: the docs page is self-contained HTML (no script or style from elsewhere), so it
//! works offline.

use crate::compat;
use crate::piston::{PistonError, PistonRequest, PistonResponse, PistonRuntime};
use crate::playground::ProfileList;
use crate::sandboxes::{CreateBody, CreateContextBody, ExecBody};
use crate::{AppState, ExecuteBody};
use axum::Json;
use axum::extract::State;
use axum::response::Html;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Value, json};
use std::sync::OnceLock;
use warden_engine::{ContextInfo, SandboxInfo, SnapshotInfo};
use warden_types::{ExecEvent, ExecResult, FileEntry};

/// What a request or response body is.
#[derive(Debug, Clone, Copy)]
pub enum Body {
    None,
    /// A JSON body of the named schema.
    Json(fn(&mut SchemaGenerator) -> Value),
    /// A request's JSON body that may be left out (no body is `{}`).
    OptionalJson(fn(&mut SchemaGenerator) -> Value),
    /// Raw bytes (as a request body, possibly none: an empty file).
    Bytes,
    /// NDJSON events (with `"stream": true`) or the JSON schema.
    JsonOrEvents(fn(&mut SchemaGenerator) -> Value),
    /// Prometheus metrics in the OpenMetrics text format.
    Text,
    /// HTML.
    Html,
    /// A script or a style sheet (the playground's assets).
    Asset,
}

#[derive(Debug)]
pub struct Operation {
    pub method: &'static str,
    /// axum's path syntax: `{id}`, `{*path}`.
    pub path: &'static str,
    pub summary: &'static str,
    pub request: Body,
    pub status: u16,
    pub response: Body,
}

fn schema<T: JsonSchema>(g: &mut SchemaGenerator) -> Value {
    serde_json::to_value(g.subschema_for::<T>()).unwrap_or(Value::Null)
}

/// `{"error": {"code", "message", "violation"?}}`.
#[derive(Debug, serde::Serialize, JsonSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, serde::Serialize, JsonSchema)]
pub struct ErrorDetail {
    /// A stable, machine-readable code, e.g. `unknown_profile`, `policy_violation`.
    pub code: String,
    pub message: String,
    /// For `policy_violation`: the policy, the module and the line.
    pub violation: Option<serde_json::Map<String, Value>>,
}

/// `{"sandboxes": [...], "count": n}`.
#[derive(Debug, serde::Serialize, JsonSchema)]
pub struct SandboxList {
    pub sandboxes: Vec<SandboxInfo>,
    pub count: usize,
}

#[derive(Debug, serde::Serialize, JsonSchema)]
pub struct Destroyed {
    pub id: String,
    pub destroyed: bool,
}

/// A fork's answer: the copies made, and what their contexts have of the parent's state.
#[derive(Debug, serde::Serialize, JsonSchema)]
pub struct ForkList {
    pub sandboxes: Vec<SandboxInfo>,
    pub count: usize,
    /// Each context of the copies, with what was saved of its state and what was not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contexts: Vec<warden_types::EvictedContext>,
}

#[derive(Debug, serde::Serialize, JsonSchema)]
pub struct SnapshotList {
    pub snapshots: Vec<SnapshotInfo>,
    pub count: usize,
    pub used_bytes: u64,
    pub quota_bytes: u64,
}

#[derive(Debug, serde::Serialize, JsonSchema)]
pub struct SnapshotDeleted {
    pub name: String,
    pub deleted: bool,
}

#[derive(Debug, serde::Serialize, JsonSchema)]
pub struct ContextList {
    pub contexts: Vec<ContextInfo>,
    pub count: usize,
}

#[derive(Debug, serde::Serialize, JsonSchema)]
pub struct FileList {
    pub files: Vec<FileEntry>,
}

#[derive(Debug, serde::Serialize, JsonSchema)]
pub struct Uploaded {
    pub path: String,
    pub size: u64,
}

#[derive(Debug, serde::Serialize, JsonSchema)]
pub struct Health {
    /// `ok` (`/healthz`); `ready` or, answered with 503, `not_ready` (`/readyz`).
    pub status: String,
    /// `/readyz` only: execution slots free now.
    pub free_slots: Option<usize>,
    /// `/readyz` when not ready: why the default profile cannot run now (the backend's
    /// refusal, its engine unreachable).
    pub reason: Option<String>,
    /// `/readyz` when not ready: the error code the same refusal of a request would have.
    pub code: Option<String>,
}

/// The sandboxed server's create answer.
#[derive(Debug, serde::Serialize, JsonSchema)]
pub struct CompatCreated {
    pub success: bool,
    pub message: String,
    pub sandbox_id: String,
    pub sandbox: SandboxInfo,
}

/// The sandboxed server's execute answer.
#[derive(Debug, serde::Serialize, JsonSchema)]
pub struct CompatExecuted {
    pub success: bool,
    /// stdout then stderr.
    pub output: String,
    /// The same as `output` (the original SDK reads `Result`).
    pub result: String,
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
    pub reason: warden_types::Reason,
    pub duration_ms: u64,
}

#[derive(Debug, serde::Serialize, JsonSchema)]
pub struct CompatDone {
    pub success: bool,
    pub message: String,
}

/// Every route the router serves.
pub const OPERATIONS: &[Operation] = &[
    Operation {
        method: "get",
        path: "/healthz",
        summary: "Liveness",
        request: Body::None,
        status: 200,
        response: Body::Json(schema::<Health>),
    },
    Operation {
        method: "get",
        path: "/readyz",
        summary: "Readiness: the default profile can run now (else 503 with the reason), with the free execution slots",
        request: Body::None,
        status: 200,
        response: Body::Json(schema::<Health>),
    },
    Operation {
        method: "get",
        path: "/metrics",
        summary: "Prometheus metrics",
        request: Body::None,
        status: 200,
        response: Body::Text,
    },
    Operation {
        method: "get",
        path: "/openapi.json",
        summary: "This description",
        request: Body::None,
        status: 200,
        response: Body::Json(|_| json!({"type": "object"})),
    },
    Operation {
        method: "get",
        path: "/docs",
        summary: "This description as a page (works offline)",
        request: Body::None,
        status: 200,
        response: Body::Html,
    },
    Operation {
        method: "get",
        path: "/",
        summary: "The playground: a notebook in the browser over this API (works offline)",
        request: Body::None,
        status: 200,
        response: Body::Html,
    },
    Operation {
        method: "get",
        path: "/playground/{file}",
        summary: "An asset of the playground page (scripts, styles; embedded)",
        request: Body::None,
        status: 200,
        response: Body::Asset,
    },
    Operation {
        method: "get",
        path: "/v1/profiles",
        summary: "The profiles and languages a request may name",
        request: Body::None,
        status: 200,
        response: Body::Json(schema::<ProfileList>),
    },
    Operation {
        method: "get",
        path: "/v1/audit",
        summary: "The caller's audit events (`?since=SEQ&limit=N`; an admin key reads every owner's)",
        request: Body::None,
        status: 200,
        response: Body::Json(schema::<crate::audit::AuditPage>),
    },
    Operation {
        method: "post",
        path: "/v1/execute",
        summary: "Run code once in a fresh sandbox",
        request: Body::Json(schema::<ExecuteBody>),
        status: 200,
        response: Body::JsonOrEvents(schema::<ExecResult>),
    },
    Operation {
        method: "post",
        path: "/v1/sandboxes",
        summary: "Create a sandbox with a lifetime",
        request: Body::Json(schema::<CreateBody>),
        status: 201,
        response: Body::Json(schema::<SandboxInfo>),
    },
    Operation {
        method: "get",
        path: "/v1/sandboxes",
        summary: "List sandboxes (`?label=key=value` filters)",
        request: Body::None,
        status: 200,
        response: Body::Json(schema::<SandboxList>),
    },
    Operation {
        method: "get",
        path: "/v1/sandboxes/{id}",
        summary: "A sandbox, by id or name",
        request: Body::None,
        status: 200,
        response: Body::Json(schema::<SandboxInfo>),
    },
    Operation {
        method: "delete",
        path: "/v1/sandboxes/{id}",
        summary: "Destroy a sandbox (a running execution is killed)",
        request: Body::None,
        status: 200,
        response: Body::Json(schema::<Destroyed>),
    },
    Operation {
        method: "post",
        path: "/v1/sandboxes/{id}/pause",
        summary: "Pause a sandbox: its processes frozen, files and contexts kept; its next use resumes it (409 while an execution runs, or when one of its processes cannot be stopped now: retry). With `evict`, its Python contexts are saved and their interpreters ended (422 when a limit, the timeout among them, stops a save)",
        request: Body::OptionalJson(schema::<crate::sandboxes::PauseBody>),
        status: 200,
        response: Body::Json(schema::<warden_types::Paused>),
    },
    Operation {
        method: "post",
        path: "/v1/sandboxes/{id}/resume",
        summary: "Resume a paused sandbox, and load the state of the contexts its pause evicted",
        request: Body::None,
        status: 200,
        response: Body::Json(schema::<warden_types::Resumed>),
    },
    Operation {
        method: "post",
        path: "/v1/sandboxes/{id}/snapshot",
        summary: "Record a durable sandbox's workspace, and what can be saved of its contexts' state, under a name (the API key's; counted against its snapshot quota: 507 past it; 409 when one of its processes cannot be stopped now: retry)",
        request: Body::Json(schema::<crate::sandboxes::SnapshotBody>),
        status: 201,
        response: Body::Json(schema::<SnapshotInfo>),
    },
    Operation {
        method: "post",
        path: "/v1/sandboxes/{id}/fork",
        summary: "Make `count` independent copies of a durable sandbox as it is now (its files, and its contexts with what could be saved of their state; 409 when one of its processes cannot be stopped now: retry)",
        request: Body::Json(schema::<crate::sandboxes::ForkBody>),
        status: 201,
        response: Body::Json(schema::<ForkList>),
    },
    Operation {
        method: "get",
        path: "/v1/snapshots",
        summary: "The API key's snapshots, with the disk they take and the key's quota",
        request: Body::None,
        status: 200,
        response: Body::Json(schema::<SnapshotList>),
    },
    Operation {
        method: "delete",
        path: "/v1/snapshots/{name}",
        summary: "Delete a snapshot",
        request: Body::None,
        status: 200,
        response: Body::Json(schema::<SnapshotDeleted>),
    },
    Operation {
        method: "patch",
        path: "/v1/sandboxes/{id}/egress",
        summary: "Replace the egress gateway's rules of a sandbox whose profile has a gateway (executions started afterwards get them)",
        request: Body::Json(schema::<warden_types::egress::GatewayRules>),
        status: 200,
        response: Body::Json(schema::<warden_types::egress::GatewayRules>),
    },
    Operation {
        method: "post",
        path: "/v1/sandboxes/{id}/exec",
        summary: "Run code in a sandbox (its workspace persists between executions)",
        request: Body::Json(schema::<ExecBody>),
        status: 200,
        response: Body::JsonOrEvents(schema::<ExecResult>),
    },
    Operation {
        method: "get",
        path: "/v1/sandboxes/{id}/files",
        summary: "List the workspace",
        request: Body::None,
        status: 200,
        response: Body::Json(schema::<FileList>),
    },
    Operation {
        method: "get",
        path: "/v1/sandboxes/{id}/files/{*path}",
        summary: "Download a file of the workspace",
        request: Body::None,
        status: 200,
        response: Body::Bytes,
    },
    Operation {
        method: "put",
        path: "/v1/sandboxes/{id}/files/{*path}",
        summary: "Upload a file into the workspace",
        request: Body::Bytes,
        status: 201,
        response: Body::Json(schema::<Uploaded>),
    },
    Operation {
        method: "post",
        path: "/v1/sandboxes/{id}/contexts",
        summary: "Start a persistent interpreter (a notebook context) in a sandbox; the body is optional",
        request: Body::OptionalJson(schema::<CreateContextBody>),
        status: 201,
        response: Body::Json(schema::<ContextInfo>),
    },
    Operation {
        method: "get",
        path: "/v1/sandboxes/{id}/contexts",
        summary: "List a sandbox's contexts",
        request: Body::None,
        status: 200,
        response: Body::Json(schema::<ContextList>),
    },
    Operation {
        method: "get",
        path: "/v1/sandboxes/{id}/contexts/{context}",
        summary: "A context",
        request: Body::None,
        status: 200,
        response: Body::Json(schema::<ContextInfo>),
    },
    Operation {
        method: "delete",
        path: "/v1/sandboxes/{id}/contexts/{context}",
        summary: "End a context",
        request: Body::None,
        status: 200,
        response: Body::Json(schema::<Destroyed>),
    },
    Operation {
        method: "post",
        path: "/v1/sandboxes/{id}/contexts/{context}/restart",
        summary: "Restart a context (its state is lost)",
        request: Body::None,
        status: 200,
        response: Body::Json(schema::<ContextInfo>),
    },
    Operation {
        method: "post",
        path: "/api/v1/sandbox/create",
        summary: "The sandboxed server's create",
        request: Body::Json(schema::<compat::CreateRequest>),
        status: 201,
        response: Body::Json(schema::<CompatCreated>),
    },
    Operation {
        method: "post",
        path: "/api/v1/sandbox/destroy",
        summary: "The sandboxed server's destroy",
        request: Body::Json(schema::<compat::DestroyRequest>),
        status: 200,
        response: Body::Json(schema::<CompatDone>),
    },
    Operation {
        method: "post",
        path: "/api/v1/execute",
        summary: "The sandboxed server's execute",
        request: Body::Json(schema::<compat::ExecuteRequest>),
        status: 200,
        response: Body::Json(schema::<CompatExecuted>),
    },
    Operation {
        method: "post",
        path: "/api/v1/execute/{id}",
        summary: "The sandboxed server's execute, sandbox in the path",
        request: Body::Json(schema::<compat::ExecuteInRequest>),
        status: 200,
        response: Body::Json(schema::<CompatExecuted>),
    },
    Operation {
        method: "post",
        path: "/api/v2/execute",
        summary: "Piston's execute",
        request: Body::Json(schema::<PistonRequest>),
        status: 200,
        response: Body::Json(schema::<PistonResponse>),
    },
    Operation {
        method: "get",
        path: "/api/v2/runtimes",
        summary: "Piston's runtimes",
        request: Body::None,
        status: 200,
        response: Body::Json(schema::<Vec<PistonRuntime>>),
    },
];

/// axum's `{*path}` is OpenAPI's `{path}`.
fn openapi_path(path: &str) -> String {
    path.replace("{*", "{")
}

fn content(body: Body, g: &mut SchemaGenerator) -> Option<Value> {
    Some(match body {
        Body::None => return None,
        Body::Json(f) | Body::OptionalJson(f) => {
            json!({ "application/json": { "schema": f(g) } })
        }
        Body::Bytes => {
            json!({ "application/octet-stream": { "schema": { "type": "string", "format": "binary" } } })
        }
        Body::JsonOrEvents(f) => json!({
            "application/json": { "schema": f(g) },
            "application/x-ndjson": { "schema": schema::<ExecEvent>(g) },
        }),
        Body::Text => json!({ "application/openmetrics-text": { "schema": { "type": "string" } } }),
        Body::Html => json!({ "text/html": { "schema": { "type": "string" } } }),
        Body::Asset => json!({
            "text/javascript": { "schema": { "type": "string" } },
            "text/css": { "schema": { "type": "string" } },
        }),
    })
}

/// The OpenAPI 3.1 document.
pub fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| {
        let mut settings = schemars::generate::SchemaSettings::draft2020_12();
        settings.definitions_path = "/components/schemas".into();
        let mut g = SchemaGenerator::new(settings);
        let error = schema::<ErrorBody>(&mut g);
        let piston_error = schema::<PistonError>(&mut g);
        let mut paths = serde_json::Map::new();
        for op in OPERATIONS {
            let path = openapi_path(op.path);
            let params: Vec<Value> = path
                .split('/')
                .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
                .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
                .collect();
            let mut responses = serde_json::Map::new();
            let mut ok = json!({ "description": op.summary });
            if let Some(c) = content(op.response, &mut g) {
                ok["content"] = c;
            }
            responses.insert(op.status.to_string(), ok);
            // Piston's routes answer errors in Piston's shape.
            let error = if op.path.starts_with("/api/v2/") {
                &piston_error
            } else {
                &error
            };
            responses.insert(
                "default".into(),
                json!({"description": "An error", "content": {"application/json": {"schema": error}}}),
            );
            let mut operation = json!({
                "summary": op.summary,
                "operationId": format!("{}_{}", op.method, path.trim_matches('/').replace(['/', '{', '}', '.'], "_")),
                "responses": responses,
            });
            if !params.is_empty() {
                operation["parameters"] = Value::Array(params);
            }
            if let Some(c) = content(op.request, &mut g) {
                let required = !matches!(op.request, Body::OptionalJson(_) | Body::Bytes);
                operation["requestBody"] = json!({ "required": required, "content": c });
            }
            paths
                .entry(path)
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .expect("an object")
                .insert(op.method.into(), operation);
        }
        let schemas = g.take_definitions(true);
        json!({
            "openapi": "3.1.0",
            "info": {
                "title": "Warden",
                "version": env!("CARGO_PKG_VERSION"),
                "description": "Secure code execution for AI agents. Every error is {\"error\": {\"code\", \"message\"}}.",
            },
            "paths": paths,
            "components": { "schemas": schemas },
        })
    })
}

pub async fn openapi_json(State(_): State<AppState>) -> Json<Value> {
    Json(document().clone())
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The docs page: rendered here from the same document, no scripts.
pub async fn docs(State(_): State<AppState>) -> Html<String> {
    static PAGE: OnceLock<String> = OnceLock::new();
    Html(
        PAGE.get_or_init(|| {
            let doc = document();
            let mut html = String::from(
                "<!doctype html><html><head><meta charset=\"utf-8\"><title>Warden API</title>\
                 <style>body{font:15px/1.5 system-ui,sans-serif;max-width:60em;margin:2em auto;padding:0 1em}\
                 code,pre{font:13px ui-monospace,monospace}pre{background:#f5f5f5;padding:.6em;overflow:auto}\
                 .m{display:inline-block;min-width:4.5em;font-weight:bold}</style></head><body>\
                 <h1>Warden API</h1><p>Machine-readable: <a href=\"/openapi.json\">/openapi.json</a>. \
                 Every error is <code>{\"error\": {\"code\", \"message\"}}</code>.</p><h2>Operations</h2>",
            );
            for op in OPERATIONS {
                html.push_str(&format!(
                    "<h3><span class=\"m\">{}</span><code>{}</code></h3><p>{}</p>",
                    op.method.to_uppercase(),
                    escape(&openapi_path(op.path)),
                    escape(op.summary)
                ));
                let path = openapi_path(op.path);
                let operation = &doc["paths"][path.as_str()][op.method];
                for (label, value) in [
                    ("Request", &operation["requestBody"]["content"]),
                    ("Response", &operation["responses"][op.status.to_string().as_str()]["content"]),
                ] {
                    if let Some(map) = value.as_object() {
                        for (mime, body) in map {
                            html.push_str(&format!(
                                "<p>{label} ({}): <code>{}</code></p>",
                                escape(mime),
                                escape(&body["schema"].to_string())
                            ));
                        }
                    }
                }
            }
            html.push_str("<h2>Schemas</h2>");
            if let Some(schemas) = doc["components"]["schemas"].as_object() {
                for (name, schema) in schemas {
                    html.push_str(&format!(
                        "<h3 id=\"{0}\">{0}</h3><pre>{1}</pre>",
                        escape(name),
                        escape(&serde_json::to_string_pretty(schema).unwrap_or_default())
                    ));
                }
            }
            html.push_str("</body></html>");
            html
        })
        .clone(),
    )
}
