//! `warden serve`: the HTTP API, with the MCP tools at `/mcp` (streamable HTTP). Without API
//! keys in the settings it listens only on loopback.

use crate::cli::load_settings;
use crate::run::{HelperMode, engine_with};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use warden_engine::AdmissionLimits;
use warden_server::{AppState, ServerLimits, router};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on; other than loopback only with API keys configured.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub limits: DaemonLimitArgs,
}

/// The daemon's bounds, overriding `[server]`'s (shared by `warden serve` and `warden mcp`).
#[derive(Debug, Args)]
pub struct DaemonLimitArgs {
    /// Executions running at once [default: `[server].max_concurrent`, 8].
    #[arg(long)]
    pub max_concurrent: Option<usize>,
    /// Requests waiting for a slot before the answer is 429 [default: `[server].max_queued`, 64].
    #[arg(long)]
    pub max_queued: Option<usize>,
    /// Sandboxes with a lifetime alive at once [default: `[server].max_sandboxes`, 64].
    #[arg(long)]
    pub max_sandboxes: Option<usize>,
}

impl DaemonLimitArgs {
    /// The settings' `[server]` bounds with the flags given applied.
    pub fn apply(&self, server: &mut warden_config::ServerSettings) -> anyhow::Result<()> {
        if self.max_concurrent == Some(0) {
            anyhow::bail!("--max-concurrent must be at least 1");
        }
        if self.max_sandboxes == Some(0) {
            anyhow::bail!("--max-sandboxes must be at least 1");
        }
        server.max_concurrent = self.max_concurrent.unwrap_or(server.max_concurrent);
        server.max_queued = self.max_queued.unwrap_or(server.max_queued);
        server.max_sandboxes = self.max_sandboxes.unwrap_or(server.max_sandboxes);
        Ok(())
    }
}

/// The admission bounds of `[server]` (after [`DaemonLimitArgs::apply`]).
pub fn admission_of(server: &warden_config::ServerSettings) -> AdmissionLimits {
    AdmissionLimits {
        max_concurrent: server.max_concurrent,
        max_queued: server.max_queued,
        ..AdmissionLimits::default()
    }
}

/// Every held connection is a descriptor, and so is every sandbox's workspace: the soft limit
/// (1024 by default) would bind long before `[server] max_connections`; the hard one is the
/// administrator's to set.
fn raise_descriptor_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed by pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// Ctrl-C or SIGTERM (what a service manager or `docker stop` sends).
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(t) => { t.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}

pub fn run(config: Option<&PathBuf>, args: &ServeArgs) -> anyhow::Result<i32> {
    let mut settings = load_settings(config)?;
    args.limits
        .apply(&mut std::sync::Arc::make_mut(&mut settings).server)?;
    if !args.listen.ip().is_loopback() && settings.server.api_keys.is_empty() {
        anyhow::bail!(
            "--listen {}: a non-loopback address needs API keys ([[server.api_keys]] in the settings); listen on 127.0.0.1 or [::1], or configure keys",
            args.listen
        );
    }
    let limits = ServerLimits::from_settings(&settings.server);
    let state_settings = settings.server.clone();
    raise_descriptor_limit();
    let admission = admission_of(&settings.server);
    let audit = warden_server::audit::open_log(&settings.server.audit, false)
        .map_err(anyhow::Error::msg)?;
    let engine = engine_with(settings, None, HelperMode::Exec)?
        .with_admission(admission)
        .with_audit(std::sync::Arc::new(audit));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let kube_settings = engine.settings().clone();
        // The daemon owns this instance's sandbox pods: those of an earlier process are reaped.
        let engine = crate::kube::attach(engine, &kube_settings, true).await;
        // What a crashed predecessor left (containers, pods, cgroups) goes first.
        for (backend, removed) in engine.remove_orphans().await {
            match removed {
                Ok(0) => {}
                Ok(n) => {
                    eprintln!("warden: removed {n} leftover sandboxes of the {backend} backend")
                }
                Err(e) => eprintln!("warden: could not clean up the {backend} backend: {e}"),
            }
        }
        // Held one-shot sandboxes for the profiles with a oneshot_pool_size, in the background.
        engine.start_oneshot_pools();
        let pooled_oneshots = engine.clone();
        let state = AppState::new(engine, limits);
        // Warm sandboxes for the profiles with a pool_size, built in the background.
        state.sandboxes().start_pools();
        let reaper = state.spawn_reaper(std::time::Duration::from_secs(1));
        let listener = tokio::net::TcpListener::bind(args.listen).await?;
        let addr = listener.local_addr()?;
        eprintln!("warden: listening on http://{addr}");
        eprintln!("warden: the playground is at http://{addr}/ (the API's description at /docs)");
        let stopping = state.clone();
        // Head and body deadlines, a bound on connections that sheds idle ones first.
        let conn_limits = warden_server::listen::ConnLimits::from_settings(&state_settings);
        warden_server::listen::serve(listener, router(state.clone()), conn_limits, async move {
            shutdown_signal().await;
            // Open MCP sessions (at /mcp) would otherwise hold the shutdown up.
            stopping.stop_mcp();
        })
        .await?;
        reaper.abort();
        pooled_oneshots.close_oneshot_pools().await;
        state.sandboxes().destroy_all().await;
        anyhow::Ok(0)
    })
}
