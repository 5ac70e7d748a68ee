//! `/mcp`: the MCP tools of `warden_mcp` over streamable HTTP, on this server's sandboxes.
//!
//! Invariants: mounted inside the router's authentication, so with API keys configured `/mcp`
//! answers 401 without a valid key, and a key's tools see only that key's sandboxes and keep
//! its limits (live sandboxes, concurrent executions); MCP executions go through the same
//! engine as the REST API's — its execution slots and queue, its metrics and traces — so the
//! daemon's bound holds across both; without keys only loopback `Host` headers are accepted (a
//! guard against DNS rebinding of a local server).

use crate::{AppState, Caller};
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use warden_mcp::{McpOptions, WardenMcp};

pub(crate) fn service(state: &AppState) -> StreamableHttpService<WardenMcp, LocalSessionManager> {
    let options = McpOptions {
        max_output_length: state.engine.settings().sandbox.max_output_length,
        max_read_bytes: state.limits.max_download_bytes,
        max_request_bytes: state.limits.max_body_bytes,
        loopback_hosts_only: state.keys.is_empty(),
        ..McpOptions::default()
    };
    let server = WardenMcp::new(state.sandboxes.clone(), options).with_caller(|extensions| {
        extensions
            .get::<Caller>()
            .map(Caller::engine)
            .unwrap_or_default()
    });
    warden_mcp::streamable_http_service(server, state.mcp_stop.clone())
}
