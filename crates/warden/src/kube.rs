//! The Kubernetes backend in the binary: connecting it when a profile uses it, and
//! `warden kube-manifests`, which writes `deploy/kubernetes/` from the typed objects.

use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use warden_config::{BackendKind, Settings};
use warden_engine::{Backend, Engine};
use warden_kube::KubeBackend;
use warden_kube::objects::DeployParams;

/// Whether any profile runs on the kubernetes backend.
pub fn used(settings: &Settings) -> bool {
    settings
        .sandbox
        .profiles
        .values()
        .any(|p| settings.backend_of(p) == BackendKind::Kubernetes)
}

/// Connects the backend (inside the runtime that will use it: the client's worker lives
/// there) when a profile uses it; otherwise, or on failure, the engine says why it is not
/// available. `reap` deletes this instance's labelled pods that no live sandbox owns — only a
/// daemon may, since one-shot CLIs share the instance label.
pub async fn attach(engine: Engine, settings: &Settings, reap: bool) -> Engine {
    if !used(settings) {
        return engine;
    }
    match KubeBackend::connect(&settings.sandbox.kubernetes).await {
        Ok(backend) => {
            if reap {
                match backend.remove_orphans(&[]).await {
                    Ok(0) => {}
                    Ok(n) => eprintln!("warden: deleted {n} sandbox pods left by an earlier run"),
                    Err(e) => eprintln!("warden: could not reap old sandbox pods: {e}"),
                }
            }
            engine.with_backend(BackendKind::Kubernetes, Arc::new(backend))
        }
        Err(e) => engine.with_unavailable_backend(BackendKind::Kubernetes, e.to_string()),
    }
}

/// For `warden doctor`: which credentials, and whether the API server answers with them.
pub fn probe(settings: &Settings) -> (bool, String) {
    let options = &settings.sandbox.kubernetes;
    let source = warden_kube::backend::describe_kubeconfig(options);
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return (false, "cannot start a runtime".into());
    };
    runtime.block_on(async {
        let reach = async {
            let client = warden_kube::backend::client(
                options.kubeconfig.as_deref(),
                options.context.as_deref(),
            )
            .await
            .map_err(|e| e.to_string())?;
            let cluster = warden_kube::KubeCluster::new(client, &options.namespace);
            warden_kube::Cluster::version(&cluster)
                .await
                .map_err(|e| e.to_string())
        };
        match tokio::time::timeout(Duration::from_secs(5), reach).await {
            Ok(Ok(version)) => (
                true,
                format!(
                    "API server {version} via {source}, namespace {}",
                    options.namespace
                ),
            ),
            Ok(Err(e)) => (false, format!("{source}: {e}")),
            Err(_) => (false, format!("{source}: no answer within 5s")),
        }
    })
}

#[derive(Debug, Args)]
pub struct ManifestArgs {
    /// Folder to write the YAML files into; default: print them to stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Warden's own image.
    #[arg(long, default_value_t = warden_kube::manifests::default_image())]
    pub image: String,
    /// The namespace Warden itself runs in (sandboxes go to [sandbox.kubernetes].namespace).
    #[arg(long, default_value = "warden")]
    pub warden_namespace: String,
}

pub fn manifests(config: Option<&PathBuf>, args: &ManifestArgs) -> anyhow::Result<i32> {
    let settings = crate::cli::load_settings(config)?;
    let params = DeployParams::from_options(
        &settings.sandbox.kubernetes,
        &args.warden_namespace,
        &args.image,
    );
    let files = warden_kube::manifests::render(&params)?;
    match &args.out {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            for (name, text) in files {
                let path = dir.join(name);
                std::fs::write(&path, text)
                    .map_err(|e| anyhow::anyhow!("write {}: {e}", path.display()))?;
                println!("{}", path.display());
            }
        }
        None => {
            for (_, text) in files {
                print!("{text}");
            }
        }
    }
    Ok(0)
}
