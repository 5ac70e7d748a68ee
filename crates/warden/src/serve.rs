//! `warden serve`: the HTTP API, with the MCP tools at `/mcp` (streamable HTTP). Without API
//! keys in the settings it listens only on loopback.

use crate::cli::load_settings;
use crate::run::engine_with;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use warden_engine::AdmissionLimits;
use warden_jail::HelperStart;
use warden_server::{AppState, ServerLimits, router};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on; other than loopback only with API keys configured.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub limits: DaemonLimitArgs,
    /// Where durable sandboxes are kept (workspace images and their records); one daemon per
    /// folder [default: `[server].data_dir`, /var/lib/warden].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

/// The daemon's bounds, overriding `[server]`'s (shared by `warden serve` and `warden mcp`).
#[derive(Debug, Args)]
pub struct DaemonLimitArgs {
    /// Executions running at once [default: `[server].max_concurrent`, twice the CPUs].
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
        server.max_concurrent = self.max_concurrent.or(server.max_concurrent);
        server.max_queued = self.max_queued.unwrap_or(server.max_queued);
        server.max_sandboxes = self.max_sandboxes.unwrap_or(server.max_sandboxes);
        Ok(())
    }
}

/// The admission bounds of `[server]` (after [`DaemonLimitArgs::apply`]).
pub fn admission_of(server: &warden_config::ServerSettings) -> AdmissionLimits {
    AdmissionLimits {
        max_concurrent: server.max_concurrent(),
        max_queued: server.max_queued,
        ..AdmissionLimits::default()
    }
}

/// Every held connection is a descriptor, and so is every sandbox's workspace: the soft limit
/// (1024 by default) would bind long before `[server] max_connections`; the hard one is the
/// administrator's to set.
/// Returns the soft limit now.
fn raise_descriptor_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed by pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return u64::MAX;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return raised.rlim_cur;
            }
        }
    }
    limit.rlim_cur
}

/// Descriptors a live idle sandbox holds in the daemon: the jail's workspace tmpfs (its uid's
/// lease is a byte-range lock on a shared file: none of its own; docker's sandboxes, none).
const DESCRIPTORS_PER_SANDBOX: u64 = 1;

/// Descriptors a live context holds in the daemon beside its sandbox's: its helper's two pipes
/// and the pidfd tokio reaps the helper by (bench/scale.py measured 2.98 per context).
const DESCRIPTORS_PER_CONTEXT: u64 = 3;

/// Descriptors kept for all else: the listener, the audit log, the pipes of running
/// executions and of the helpers being started, the warm pools' sandboxes (and their
/// contexts).
const DESCRIPTOR_RESERVE: u64 = 1024;

/// How the descriptor limit `nofile` is shared beside `max_connections` connections: the
/// most sandboxes (`max_sandboxes`, lowered to leave room for one context each if it does not
/// fit) and the most live contexts in all of them with what is left. Past either, a create
/// would fail half-way (a helper's pipes, a workspace) instead of being refused cleanly.
/// A host whose limit leaves less still gets `MIN_SANDBOXES` and `MIN_CONTEXTS` (its
/// connections would run out first, and shedding handles those).
fn descriptor_budget(nofile: u64, max_connections: usize, max_sandboxes: u64) -> (u64, u64) {
    let budget = nofile.saturating_sub(DESCRIPTOR_RESERVE + max_connections as u64);
    let sandboxes = if max_sandboxes.saturating_mul(DESCRIPTORS_PER_SANDBOX) > budget {
        (budget / (DESCRIPTORS_PER_SANDBOX + DESCRIPTORS_PER_CONTEXT)).max(MIN_SANDBOXES)
    } else {
        max_sandboxes
    };
    let contexts = budget.saturating_sub(sandboxes.saturating_mul(DESCRIPTORS_PER_SANDBOX))
        / DESCRIPTORS_PER_CONTEXT;
    (sandboxes, contexts.max(MIN_CONTEXTS))
}

/// The fewest sandboxes and contexts the descriptor limit lowers their caps to.
const MIN_SANDBOXES: u64 = 16;
const MIN_CONTEXTS: u64 = 16;

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
    if let Some(dir) = &args.data_dir {
        let dir = std::path::absolute(dir)?;
        std::sync::Arc::make_mut(&mut settings).server.data_dir = dir;
    }
    // Durable sandboxes' records and workspaces: refused at once if another daemon holds them.
    // Opened only when a profile is durable (a daemon of kubernetes profiles, or of profiles
    // with `durable = false`, needs no data_dir).
    let durable = settings
        .sandbox
        .profiles
        .values()
        .any(|p| settings.durable(p));
    let store = if durable {
        Some(
            warden_engine::Store::open(&settings.server.data_dir)
                .map_err(|e| anyhow::anyhow!("[server] data_dir: {e}"))?,
        )
    } else {
        None
    };
    if !args.listen.ip().is_loopback() && settings.server.api_keys.is_empty() {
        anyhow::bail!(
            "--listen {}: a non-loopback address needs API keys ([[server.api_keys]] in the settings); listen on 127.0.0.1 or [::1], or configure keys",
            args.listen
        );
    }
    let nofile = raise_descriptor_limit();
    let (fit, contexts) = descriptor_budget(
        nofile,
        settings.server.max_connections,
        settings.server.max_sandboxes as u64,
    );
    if settings.server.max_sandboxes as u64 > fit {
        let server = &mut std::sync::Arc::make_mut(&mut settings).server;
        eprintln!(
            "warden: max_sandboxes {} lowered to {fit}: the descriptor limit is {nofile}, each live sandbox holds {DESCRIPTORS_PER_SANDBOX} and each context {DESCRIPTORS_PER_CONTEXT}, and max_connections is {}; raise the hard limit (LimitNOFILE= in the service's unit, ulimit -Hn) or lower max_connections to hold more",
            server.max_sandboxes, server.max_connections
        );
        server.max_sandboxes = fit as usize;
    }
    // Each sandbox may start up to MAX_CONTEXTS: say so when they cannot all.
    let per_sandbox = warden_engine::contexts::MAX_CONTEXTS as u64;
    if contexts < fit.saturating_mul(per_sandbox) {
        eprintln!(
            "warden: room for {contexts} live contexts in all sandboxes (the descriptor limit is {nofile}, max_sandboxes {fit}, max_connections {}); past it a new context is refused with 503 host_contexts_full; raise the hard limit or lower max_sandboxes to hold more",
            settings.server.max_connections
        );
    }
    let limits = ServerLimits {
        max_contexts: contexts as usize,
        ..ServerLimits::from_settings(&settings.server)
    };
    let state_settings = settings.server.clone();
    let admission = admission_of(&settings.server);
    let audit = warden_server::audit::open_log(&settings.server.audit, false)
        .map_err(anyhow::Error::msg)?;
    let engine = engine_with(settings, None, HelperStart::ForkServer)?
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
        let mut state = AppState::new(engine, limits);
        if let Some(store) = store {
            state = state.with_store(store);
        }
        // The durable sandboxes of the last process, before anyone can ask for them.
        match state.sandboxes().restore().await {
            Ok(r) => {
                if !r.restored.is_empty() || !r.expired.is_empty() {
                    eprintln!(
                        "warden: took up {} durable sandboxes ({} past their lifetime removed)",
                        r.restored.len(),
                        r.expired.len()
                    );
                }
                for (id, why) in &r.failed {
                    eprintln!("warden: durable sandbox {id} not taken up (kept on disk): {why}");
                }
                for id in &r.swept {
                    eprintln!("warden: removed the leftover folder of sandbox {id}");
                }
            }
            Err(e) => anyhow::bail!("reading the durable sandboxes: {e}"),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_descriptor_limit_bounds_the_sandboxes_and_the_contexts() {
        // This machine's hard limit: 10,000 sandboxes fit beside 256 connections, and the
        // rest holds contexts.
        let (per_sandbox, per_context) = (DESCRIPTORS_PER_SANDBOX, DESCRIPTORS_PER_CONTEXT);
        let budget = 20_000 - DESCRIPTOR_RESERVE - 256;
        assert_eq!(
            descriptor_budget(20_000, 256, 10_000),
            (10_000, (budget - 10_000 * per_sandbox) / per_context)
        );
        // 1 and 3 as measured (bench/scale.py): 2,906 contexts beside 10,000 sandboxes.
        assert_eq!(descriptor_budget(20_000, 256, 10_000), (10_000, 2_906));
        // Too many sandboxes: lowered to leave room for one context each.
        let budget = 20_000 - DESCRIPTOR_RESERVE - 4096;
        let lowered = budget / (per_sandbox + per_context);
        assert_eq!(
            descriptor_budget(20_000, 4096, 20_000),
            (lowered, (budget - lowered * per_sandbox) / per_context)
        );
        assert_eq!(
            descriptor_budget(1024, 4096, 64),
            (MIN_SANDBOXES, MIN_CONTEXTS)
        );
        assert_eq!(
            descriptor_budget(u64::MAX, 4096, 64),
            (64, (u64::MAX - 5120 - 64) / per_context)
        );
    }
}
