//! `warden run`: one program, one fresh sandbox.

use crate::cli::{EXIT_WARDEN_ERROR, load_settings};
use clap::Args;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use warden_config::{BackendKind, Settings};
use warden_docker::{DockerBackend, DockerSettings};
use warden_engine::{Engine, EngineError, ExecRequest};
use warden_jail::{HelperStart, IdMap, JailBackend, JailSettings};
use warden_types::{ExecEvent, ExecResult};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The program's source file, or `-` for standard input.
    pub file: PathBuf,
    /// Language (python, javascript, bash, or an alias); default: from the file's extension,
    /// else the profile's language.
    #[arg(short, long)]
    pub language: Option<String>,
    /// Profile name; default: the settings' default_profile.
    #[arg(short, long)]
    pub profile: Option<String>,
    /// Wall-clock limit in seconds (within the profile's quota).
    #[arg(long)]
    pub timeout: Option<f64>,
    /// Memory limit in MiB (within the profile's quota).
    #[arg(long)]
    pub memory: Option<u64>,
    /// Print the whole result as JSON instead of streaming the output.
    #[arg(long)]
    pub json: bool,
    /// A file whose content is the program's standard input.
    #[arg(long)]
    pub stdin: Option<PathBuf>,
    /// Arguments for the program, after `--`.
    #[arg(last = true)]
    pub args: Vec<String>,
}

/// The engine with the backends this process can offer, for a one-shot CLI process.
pub fn engine(settings: Arc<Settings>) -> anyhow::Result<Engine> {
    engine_with(settings, None, HelperStart::ForkWhenSingleThreaded)
}

/// The jail backend as doctor describes it (never started).
pub fn jail_backend(settings: &Settings) -> anyhow::Result<JailBackend> {
    Ok(jail_with(settings, HelperStart::Exec)?)
}

fn jail_with(settings: &Settings, mode: HelperStart) -> std::io::Result<JailBackend> {
    let jail = &settings.sandbox.jail;
    Ok(JailBackend::new(JailSettings {
        host_paths: jail.host_paths.clone(),
        fast_cgroup_attach: jail.fast_cgroup_attach,
        ids: IdMap {
            inside_uid: jail.sandbox_uid,
            inside_gid: jail.sandbox_gid,
            host: warden_jail::plan::HostIds::Lease(warden_net::uids::UidRange {
                base: jail.uid_base,
                count: jail.uid_count,
            }),
        },
        helper_exe: std::env::current_exe()?,
        helper_start: mode,
        // Only pid 1 of a pid namespace (a container's entry point) must wait: its exit would
        // kill the helper before the clean-up, which otherwise finishes on its own within a
        // millisecond or two of the answer.
        wait_for_teardown: mode == HelperStart::ForkWhenSingleThreaded && std::process::id() == 1,
        network: warden_jail::NetSettings {
            pool: jail.network.pool,
            pool6: jail.network.pool6,
            upstream_dns: jail.network.upstream_dns,
            secrets: settings.sandbox.secrets.clone(),
            upstream_ca_file: jail.network.upstream_ca_file.clone(),
        },
    })
    .with_landlock(landlock_requirements(settings)))
}

/// What each profile requires of Landlock (its `landlock` setting), for the jail's check.
pub fn landlock_requirements(
    settings: &Settings,
) -> std::collections::BTreeMap<String, warden_types::landlock::LandlockRequirement> {
    settings
        .sandbox
        .profiles
        .iter()
        .map(|(name, p)| (name.clone(), p.landlock.clone()))
        .collect()
}

pub fn engine_with(
    settings: Arc<Settings>,
    prestarted: Option<warden_jail::Prestarted>,
    mode: HelperStart,
) -> anyhow::Result<Engine> {
    let backend = jail_with(&settings, mode)?.adopt(prestarted);
    let engine = Engine::new(settings.clone()).with_backend(BackendKind::Jail, Arc::new(backend));
    // The docker backend only where a profile uses it: a jail-only daemon never talks to an
    // engine (nor warns, at start, that it could not look for leftover containers).
    let uses_docker = settings
        .sandbox
        .profiles
        .values()
        .any(|p| settings.backend_of(p) == BackendKind::Docker);
    Ok(if uses_docker {
        engine.with_backend(BackendKind::Docker, Arc::new(docker_backend(&settings)))
    } else {
        engine.with_unavailable_backend(
            BackendKind::Docker,
            "no profile of these settings uses it".into(),
        )
    })
}

/// The docker backend from `[sandbox.docker]`, with networked containers wired by
/// `[sandbox.jail.network]` (one address pool for both backends) and this binary as their
/// network keeper; it connects on first use, so a process whose profiles never use docker
/// never talks to the engine.
pub fn docker_backend(settings: &Settings) -> DockerBackend {
    let options = &settings.sandbox.docker;
    let network = &settings.sandbox.jail.network;
    DockerBackend::new(DockerSettings {
        host: options.host.clone(),
        call_timeout: Duration::from_secs_f64(options.call_timeout_seconds),
        uids: warden_net::uids::UidRange {
            base: options.uid_base,
            count: options.uid_count,
        },
        network: warden_docker::NetSettings {
            pool: network.pool,
            pool6: network.pool6,
            upstream_dns: network.upstream_dns,
            keeper_exe: std::env::current_exe().ok(),
            run_dir: warden_net::RUN_DIR.into(),
            secrets: settings.sandbox.secrets.clone(),
            upstream_ca_file: network.upstream_ca_file.clone(),
        },
        seccomp_profile: Some(seccomp_profile()),
    })
}

/// Warden's seccomp table as the OCI profile containers run under (the jail's own filter is
/// compiled from the same table at build time).
pub fn seccomp_profile() -> Arc<str> {
    warden_jail::seccomp::oci::profile()
        .expect("the checked-in seccomp table builds (it is compiled at build time too)")
        .to_string()
        .into()
}

fn language_from_extension(path: &Path) -> Option<&'static str> {
    match path.extension()?.to_str()? {
        "py" => Some("python"),
        "js" | "mjs" | "cjs" => Some("javascript"),
        "sh" | "bash" => Some("bash"),
        _ => None,
    }
}

/// `warden run`, with the helper `main` forked for it (if it could).
pub fn run(
    config: Option<&PathBuf>,
    args: &RunArgs,
    prestarted: Option<warden_jail::Prestarted>,
) -> anyhow::Result<i32> {
    let trace = |what: &str| {
        if std::env::var_os("WARDEN_TRACE_TIMING").is_some() {
            eprintln!(
                "warden-trace: {:.3} cli {what}",
                warden_jail::monotonic_ms()
            );
        }
    };
    trace("started");
    let settings = load_settings(config)?;
    trace("settings loaded");
    let code = if args.file.as_os_str() == "-" {
        let mut code = String::new();
        std::io::stdin().read_to_string(&mut code)?;
        code
    } else {
        std::fs::read_to_string(&args.file)
            .map_err(|e| anyhow::anyhow!("read {}: {e}", args.file.display()))?
    };
    let timeout = match args.timeout {
        Some(t) if !(t.is_finite() && t > 0.0) => {
            anyhow::bail!("--timeout must be a positive number of seconds")
        }
        Some(t) => Some(Duration::from_secs_f64(t)),
        None => None,
    };
    let stdin = match &args.stdin {
        Some(p) => std::fs::read(p).map_err(|e| anyhow::anyhow!("read {}: {e}", p.display()))?,
        None => Vec::new(),
    };
    let request = ExecRequest {
        code,
        language: args
            .language
            .clone()
            .or_else(|| language_from_extension(&args.file).map(str::to_owned)),
        profile: args.profile.clone(),
        timeout,
        memory_mb: args.memory,
        stdin,
        args: args.args.clone(),
    };
    let engine = engine_with(settings, prestarted, HelperStart::ForkWhenSingleThreaded)?;
    trace("engine built");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    trace("runtime built");
    let json = args.json;
    let kube_settings = engine.settings().clone();
    let outcome = runtime.block_on(async move {
        let engine = crate::kube::attach(engine, &kube_settings, false).await;
        if json {
            return engine.execute(request, None).await;
        }
        trace("execute");
        let (tx, mut rx) = tokio::sync::mpsc::channel(64);
        let printer = async {
            let mut out = std::io::stdout();
            let mut err = std::io::stderr();
            while let Some(event) = rx.recv().await {
                let _ = match event {
                    ExecEvent::Stdout { text, .. } => {
                        out.write_all(text.as_bytes()).and(out.flush())
                    }
                    ExecEvent::Stderr { text, .. } => {
                        err.write_all(text.as_bytes()).and(err.flush())
                    }
                    ExecEvent::End(_) | ExecEvent::Error { .. } => Ok(()),
                };
            }
        };
        let (result, ()) = tokio::join!(engine.execute(request, Some(tx)), printer);
        result
    });
    trace("result received");
    match outcome {
        Ok(result) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&result)?);
            } else {
                report(&result);
            }
            trace("done");
            Ok(result.shell_status())
        }
        Err(e) if json => {
            println!("{}", serde_json::to_string_pretty(&error_json(&e))?);
            Ok(EXIT_WARDEN_ERROR)
        }
        Err(e) => {
            eprintln!("warden: {e}");
            Ok(EXIT_WARDEN_ERROR)
        }
    }
}

/// The error as the JSON shape of the API: `{"error": {"code", "message", …}}`.
pub fn error_json(e: &EngineError) -> serde_json::Value {
    let code = e.code();
    let mut error = serde_json::json!({ "code": code, "message": e.to_string() });
    if let EngineError::PolicyViolation(v) = e {
        error["violation"] = serde_json::to_value(v).unwrap_or_default();
    }
    serde_json::json!({ "error": error })
}

/// After streaming: say which limit ended the run, if one did, and what was left out.
fn report(result: &ExecResult) {
    if result.reason.is_limit() {
        eprintln!("warden: stopped by the {} limit", result.reason);
    } else if let (warden_types::Reason::Signal, Some(sig)) = (result.reason, result.signal) {
        eprintln!("warden: the program was killed by signal {sig}");
    }
    if result.stdout_truncated || result.stderr_truncated {
        eprintln!("warden: output truncated");
    }
    for a in &result.artifacts {
        eprintln!(
            "warden: artifact {} ({} bytes, {})",
            a.name, a.size, a.mime_type
        );
    }
    for s in &result.skipped_artifacts {
        eprintln!("warden: artifact {} skipped: {}", s.name, s.why);
    }
}
