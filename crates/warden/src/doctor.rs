//! `warden doctor`: what this host supports, and what that means for each profile.

use crate::cli::load_settings;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;
use warden_config::{BackendKind, Settings};
use warden_engine::ExecRequest;

fn docker() -> (bool, String) {
    let path = "/var/run/docker.sock";
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(path) else {
        return (false, format!("no engine at {path}"));
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.write_all(b"GET /version HTTP/1.0\r\nHost: docker\r\n\r\n");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    let version = body
        .split("\"Version\":\"")
        .nth(1)
        .and_then(|v| v.split('"').next())
        .unwrap_or("unknown");
    (
        body.starts_with("HTTP/1.0 200") || body.starts_with("HTTP/1.1 200"),
        format!("engine {version} at {path} (the docker backend is not built yet)"),
    )
}

/// Whether a runtime's command exists in the paths the jail binds.
fn command_present(settings: &Settings, command: &str) -> bool {
    if command.contains('/') {
        return Path::new(command).exists();
    }
    ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .any(|dir| Path::new(dir).join(command).exists())
        && settings
            .sandbox
            .jail
            .host_paths
            .iter()
            .any(|p| p == Path::new("/usr"))
}

pub fn run(config: Option<&PathBuf>, json: bool) -> anyhow::Result<i32> {
    let settings = load_settings(config)?;
    let probes = warden_jail::probe::run_all();
    let (docker_ok, docker_detail) = docker();
    let engine = crate::run::engine(settings.clone())?;
    // Probe the cluster when a profile uses it or credentials are configured.
    let kube_probe = (crate::kube::used(&settings)
        || settings.sandbox.kubernetes.kubeconfig.is_some()
        || std::env::var_os("KUBECONFIG").is_some())
    .then(|| crate::kube::probe(&settings));
    let mut verdicts = Vec::new();
    for (name, profile) in &settings.sandbox.profiles {
        let request = ExecRequest {
            profile: Some(name.clone()),
            code: String::new(),
            ..Default::default()
        };
        let verdict = match engine.prepare(&request) {
            Err(e) => Err(e.to_string()),
            Ok((_, plan)) => {
                let backend = settings.backend_of(profile);
                if backend == BackendKind::Kubernetes {
                    match &kube_probe {
                        Some((true, _)) if plan.image.is_some() => Ok(()),
                        Some((true, _)) => Err("the kubernetes backend needs an image: set the profile's runtime.image".into()),
                        Some((false, why)) => Err(format!("the kubernetes backend is unreachable: {why}")),
                        None => Err("the kubernetes backend was not probed".into()),
                    }
                } else if backend != BackendKind::Jail {
                    Err(format!(
                        "uses the {} backend, which this build does not have",
                        backend.as_str()
                    ))
                } else if !command_present(&settings, &plan.command[0]) {
                    Err(format!(
                        "the runtime command {:?} is not installed",
                        plan.command[0]
                    ))
                } else {
                    let jail = warden_jail::JailBackend::new(warden_jail::JailSettings {
                        host_paths: settings.sandbox.jail.host_paths.clone(),
                        fast_cgroup_attach: false,
                        ids: warden_jail::IdMap {
                            inside_uid: 0,
                            inside_gid: 0,
                            host_uid: 0,
                            host_gid: 0,
                        },
                        helper_exe: PathBuf::new(),
                        fork_when_single_threaded: false,
                        wait_for_teardown: false,
                    });
                    warden_engine::Backend::check(&jail, &plan).map_err(|e| e.to_string())
                }
            }
        };
        verdicts.push((name.clone(), verdict));
    }
    let data_science = std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import numpy, pandas, matplotlib"])
        .env_clear()
        .output()
        .is_ok_and(|o| o.status.success());
    let runtimes: Vec<_> = settings
        .sandbox
        .runtimes
        .iter()
        .map(|(lang, rt)| {
            (
                lang.clone(),
                rt.command[0].clone(),
                command_present(&settings, &rt.command[0]),
            )
        })
        .collect();
    if json {
        let value = serde_json::json!({
            "jail": probes,
            "docker": { "ok": docker_ok, "detail": docker_detail },
            "kubernetes": kube_probe.as_ref().map(|(ok, detail)| serde_json::json!({ "ok": ok, "detail": detail })),
            "runtimes": runtimes.iter().map(|(l, c, ok)| serde_json::json!({"language": l, "command": c, "present": ok})).collect::<Vec<_>>(),
            "data_science_packages": data_science,
            "profiles": verdicts.iter().map(|(n, v)| serde_json::json!({"name": n, "runnable": v.is_ok(), "why": v.as_ref().err()})).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        let mark = |ok: bool| if ok { "ok " } else { "NO " };
        println!("jail backend (native isolation):");
        for p in &probes {
            println!("  {} {:<14} {}", mark(p.ok), p.name, p.detail);
        }
        println!("docker backend:");
        println!("  {} {:<14} {}", mark(docker_ok), "docker", docker_detail);
        println!("kubernetes backend:");
        match &kube_probe {
            Some((ok, detail)) => println!("  {} {:<14} {}", mark(*ok), "cluster", detail),
            None => println!(
                "  --  {:<14} not used by any profile and no kubeconfig configured ({})",
                "cluster",
                warden_kube::backend::describe_kubeconfig(&settings.sandbox.kubernetes)
            ),
        }
        println!("runtimes:");
        for (lang, cmd, ok) in &runtimes {
            println!("  {} {:<14} {}", mark(*ok), lang, cmd);
        }
        println!(
            "  {} {:<14} numpy, pandas, matplotlib for python (scripts/setup.sh installs them)",
            mark(data_science),
            "data science"
        );
        println!("profiles:");
        for (name, v) in &verdicts {
            match v {
                Ok(()) => println!("  ok  {name:<14} runs with every limit applied"),
                Err(why) => println!("  NO  {name:<14} refused: {why}"),
            }
        }
    }
    let all_ok = probes.iter().all(|p| p.ok) && verdicts.iter().all(|(_, v)| v.is_ok());
    Ok(if all_ok { 0 } else { 1 })
}
