//! `/mcp`: the MCP tools of `warden_mcp` over streamable HTTP, on this server's sandboxes.
//!
//! Invariants: mounted inside the router's authentication, so with API keys configured `/mcp`
//! answers 401 without a valid key, and a key's tools see only that key's sandboxes and keep
//! its limits (live sandboxes, concurrent executions); MCP executions share the REST API's
//! execution slots and queue, so the daemon's bound holds across both; without keys only
//! loopback `Host` headers are accepted (a guard against DNS rebinding of a local server).

use crate::metrics::ExecLabels;
use crate::{AppState, Caller};
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use warden_mcp::{McpCaller, McpEvent, McpOptions, WardenMcp};

/// The MCP service for `state`, to nest at `/mcp`.
pub(crate) fn service(state: &AppState) -> StreamableHttpService<WardenMcp, LocalSessionManager> {
    let options = McpOptions {
        max_output_length: state.engine.settings().sandbox.max_output_length,
        max_concurrent: state.limits.max_concurrent,
        max_queued: state.limits.max_queued,
        max_read_bytes: state.limits.max_download_bytes,
        max_request_bytes: state.limits.max_body_bytes,
        loopback_hosts_only: state.keys.is_empty(),
        ..McpOptions::default()
    };
    let observed = state.clone();
    let server = WardenMcp::new(state.sandboxes.clone(), options)
        .with_shared_slots(state.slots.clone(), state.admission.clone())
        .with_caller(caller_of)
        .with_observer(move |event| count(&observed, event));
    warden_mcp::streamable_http_service(server, state.mcp_stop.clone())
}

/// The caller the authentication layer left on the request, for the tools.
fn caller_of(extensions: &axum::http::Extensions) -> McpCaller {
    match extensions.get::<Caller>().and_then(|c| c.0.clone()) {
        Some(key) => McpCaller {
            owner: Some(key.name.clone()),
            max_sandboxes: key.max_sandboxes,
            slots: key
                .running
                .clone()
                .map(|slots| (slots, key.max_concurrent.unwrap_or_default())),
        },
        None => McpCaller::default(),
    }
}

/// Counts what a tool did in the server's metrics, as the REST handlers count theirs.
fn count(state: &AppState, event: McpEvent<'_>) {
    match event {
        McpEvent::Execution {
            profile,
            language,
            outcome: Ok(result),
        } => {
            state
                .metrics
                .duration
                .observe(result.duration_ms as f64 / 1000.0);
            state
                .metrics
                .executions
                .get_or_create(&ExecLabels {
                    profile: profile.to_owned(),
                    language: language.to_owned(),
                    outcome: result.reason.as_str().to_owned(),
                })
                .inc();
        }
        McpEvent::Execution {
            profile,
            language,
            outcome: Err(e),
        } => {
            // Counted (with the policy, for a violation) under the REST API's error code.
            let _ = crate::refusal(state, profile, language, e.clone());
        }
        McpEvent::SandboxesChanged => {
            state
                .metrics
                .sandboxes_live
                .set(state.sandboxes.count() as i64);
        }
    }
}
