//! The Kubernetes backend in the binary: its settings from `[sandbox.kubernetes]`, connecting
//! it when a profile uses it, and `warden kube-manifests`, which writes `deploy/kubernetes/`
//! from the typed objects.

use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use warden_config::{BackendKind, KubernetesOptions, Settings};
use warden_engine::{Backend, Engine};
use warden_kube::objects::DeployParams;
use warden_kube::{KubeBackend, KubeSettings};

/// The backend's settings from `[sandbox.kubernetes]`.
pub fn kube_settings(o: &KubernetesOptions) -> KubeSettings {
    KubeSettings {
        namespace: o.namespace.clone(),
        kubeconfig: o.kubeconfig.clone(),
        context: o.context.clone(),
        instance: o.instance.clone(),
        runtime_class: o.runtime_class.clone(),
        runtime_classes: o.runtime_classes.clone(),
        ready_timeout: Duration::from_secs_f64(o.pod_ready_timeout_seconds),
        image_pull_policy: o.image_pull_policy.clone(),
        uid_base: o.uid_base,
        uid_count: o.uid_count,
        keepalive_command: o.keepalive_command.clone(),
        manage_network_policy: o.manage_network_policy,
        egress_blocked_cidrs: o.egress_blocked_cidrs.clone(),
        ..KubeSettings::default()
    }
}

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
    match KubeBackend::connect(kube_settings(&settings.sandbox.kubernetes)).await {
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
    let source = warden_kube::backend::describe_kubeconfig(options.kubeconfig.as_deref());
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
    let params = DeployParams::new(
        &kube_settings(&settings.sandbox.kubernetes),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_defaults_are_the_backends() {
        assert_eq!(
            kube_settings(&KubernetesOptions::default()),
            KubeSettings::default()
        );
        assert_eq!(
            kube_settings(&Settings::builtin().sandbox.kubernetes),
            KubeSettings::default()
        );
    }

    #[test]
    fn every_option_reaches_the_backend() {
        let settings = Settings::from_toml(
            r#"
            [sandbox.kubernetes]
            namespace = "ns"
            kubeconfig = "/k"
            context = "c"
            instance = "i"
            runtime_class = "gvisor"
            runtime_classes = { standard = "kata" }
            pod_ready_timeout_seconds = 1.5
            image_pull_policy = "Never"
            uid_base = 1000
            uid_count = 10
            keepalive_command = ["sleep", "infinity"]
            manage_network_policy = false
            egress_blocked_cidrs = ["10.0.0.0/8"]
            "#,
            "test",
        )
        .unwrap();
        let k = kube_settings(&settings.sandbox.kubernetes);
        assert_eq!(
            k,
            KubeSettings {
                namespace: "ns".into(),
                kubeconfig: Some("/k".into()),
                context: Some("c".into()),
                instance: "i".into(),
                runtime_class: Some("gvisor".into()),
                runtime_classes: [("standard".to_owned(), "kata".to_owned())].into(),
                ready_timeout: Duration::from_millis(1500),
                image_pull_policy: "Never".into(),
                uid_base: 1000,
                uid_count: 10,
                keepalive_command: vec!["sleep".into(), "infinity".into()],
                manage_network_policy: false,
                egress_blocked_cidrs: vec!["10.0.0.0/8".into()],
                ..KubeSettings::default()
            }
        );
    }

    #[test]
    fn the_deployed_settings_parse_and_select_the_kubernetes_backend() {
        let d = DeployParams::defaults("warden:test");
        let s = Settings::from_toml(&d.settings_toml, "configmap").unwrap();
        assert_eq!(s.sandbox.backend, BackendKind::Kubernetes);
        assert_eq!(s.sandbox.kubernetes.namespace, "warden-sandboxes");
    }
}
