//! `warden mcp`: the MCP tools (see `warden_mcp`) on standard input and output, for an MCP
//! client that starts Warden as a subprocess. The same tools are at `/mcp` of `warden serve`.
//!
//! Invariants: standard output carries only the protocol (logs go to standard error); the
//! jail's helper is always exec'd (this process is multi-threaded); sandboxes live as long as
//! the session at most — when the client closes the session every sandbox is destroyed, and
//! expired ones are reaped on the way.

use crate::cli::load_settings;
use crate::run::engine_with;
use crate::serve::{DaemonLimitArgs, admission_of};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use warden_engine::Sandboxes;
use warden_jail::HelperStart;
use warden_mcp::{McpOptions, WardenMcp};

#[derive(Debug, Args)]
pub struct McpArgs {
    #[command(flatten)]
    pub limits: DaemonLimitArgs,
}

pub fn run(config: Option<&PathBuf>, args: &McpArgs) -> anyhow::Result<i32> {
    let mut settings = load_settings(config)?;
    args.limits
        .apply(&mut std::sync::Arc::make_mut(&mut settings).server)?;
    let options = McpOptions {
        max_output_length: settings.sandbox.max_output_length,
        ..McpOptions::default()
    };
    let max_sandboxes = settings.server.max_sandboxes;
    let admission = admission_of(&settings.server);
    // Only a file: stdout carries the protocol.
    let audit =
        warden_server::audit::open_log(&settings.server.audit, true).map_err(anyhow::Error::msg)?;
    let engine = engine_with(settings, None, HelperStart::ForkServer)?
        .with_admission(admission)
        .with_audit(std::sync::Arc::new(audit));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let outcome = runtime.block_on(async move {
        for (backend, removed) in engine.remove_orphans().await {
            match removed {
                Ok(0) => {}
                Ok(n) => {
                    eprintln!("warden: removed {n} leftover sandboxes of the {backend} backend")
                }
                Err(e) => eprintln!("warden: could not clean up the {backend} backend: {e}"),
            }
        }
        let sandboxes = Sandboxes::new(engine, max_sandboxes);
        let reaper = tokio::spawn({
            let sandboxes = sandboxes.clone();
            async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    sandboxes.reap_expired().await;
                }
            }
        });
        let served = warden_mcp::serve_stdio(WardenMcp::new(sandboxes.clone(), options)).await;
        reaper.abort();
        sandboxes.destroy_all().await;
        served
    });
    // A read of standard input may still be pending on a blocking thread: don't wait for it.
    runtime.shutdown_timeout(Duration::from_millis(100));
    outcome?;
    Ok(0)
}
