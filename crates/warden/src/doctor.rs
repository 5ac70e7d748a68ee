//! `warden doctor`: what this host supports, and what that means for each profile.

use crate::cli::load_settings;
use std::path::{Path, PathBuf};
use warden_config::{BackendKind, Settings};
use warden_engine::ExecRequest;

/// The docker engine, as the docker backend sees it: version, OCI runtimes, and which of the
/// profiles' images are present. `Err` says why the engine cannot be used.
fn docker(settings: &Settings) -> Result<warden_docker::EngineProbe, String> {
    let mut images: Vec<String> = settings
        .sandbox
        .profiles
        .keys()
        .filter_map(|name| {
            let req = ExecRequest {
                profile: Some(name.clone()),
                ..Default::default()
            };
            warden_engine::Engine::new(std::sync::Arc::new(settings.clone()))
                .prepare(&req)
                .ok()
                .and_then(|(_, plan)| plan.image)
        })
        .collect();
    images.sort();
    images.dedup();
    let backend = crate::run::docker_backend(settings);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime
        .block_on(backend.probe(&images))
        .map_err(|e| e.to_string())
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

/// The one command that installs a runtime's command (Debian's package), when known.
fn install_runtime(command: &str) -> Option<&'static str> {
    let name = command.rsplit('/').next().unwrap_or(command);
    Some(match name {
        "python3" => "apt-get install python3",
        "python" => "apt-get install python-is-python3",
        "node" | "nodejs" => "apt-get install nodejs",
        "bash" => "apt-get install bash",
        "sh" | "dash" => "apt-get install dash",
        "ruby" => "apt-get install ruby",
        "php" => "apt-get install php-cli",
        "perl" => "apt-get install perl",
        "lua" | "lua5.4" => "apt-get install lua5.4",
        _ => return None,
    })
}

/// What networked profiles (`network_enabled = true`) need on the host: nftables, iproute2 and
/// IPv4/IPv6 forwarding (`scripts/setup-net.sh`).
fn networking_present() -> bool {
    let tool = |name: &str| {
        ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
            .iter()
            .any(|dir| Path::new(dir).join(name).exists())
    };
    let on = |path: &str| std::fs::read_to_string(path).is_ok_and(|v| v.trim() == "1");
    tool("nft")
        && tool("ip")
        && on("/proc/sys/net/ipv4/ip_forward")
        && on("/proc/sys/net/ipv6/conf/all/forwarding")
}

/// ` — install: CMD` after a missing part's line.
fn hint(present: bool, install: Option<&str>) -> String {
    match (present, install) {
        (false, Some(cmd)) => format!(" — install: {cmd}"),
        _ => String::new(),
    }
}

const INSTALL_DATA_SCIENCE: &str =
    "apt-get install python3-numpy python3-pandas python3-matplotlib";
const INSTALL_DOCKER: &str = "apt-get install docker.io";
const INSTALL_IMAGES: &str = "scripts/setup-docker-images.sh";
const INSTALL_GVISOR: &str = "scripts/setup-gvisor.sh";
const INSTALL_NET: &str = "scripts/setup-net.sh";

/// Whether a docker profile can run here: the engine answers, the plan is one the docker
/// backend accepts, its image is present and its OCI runtime registered.
fn docker_verdict(
    settings: &Settings,
    docker: &Result<warden_docker::EngineProbe, String>,
    plan: &warden_engine::ExecPlan,
) -> Result<(), String> {
    let probe = docker
        .as_ref()
        .map_err(|e| format!("the docker engine is not usable: {e}"))?;
    let backend = crate::run::docker_backend(settings);
    warden_engine::Backend::check(&backend, plan).map_err(|e| e.to_string())?;
    let image = plan.image.as_deref().unwrap_or_default();
    if !probe.images.iter().any(|(i, ok)| i == image && *ok) {
        return Err(format!(
            "image {image:?} is not present on the engine (scripts/setup-docker-images.sh builds the default ones)"
        ));
    }
    if let Some(rt) = &plan.container_runtime
        && !probe.runtimes.contains(rt)
    {
        return Err(format!(
            "container_runtime {rt:?} is not registered with the engine (registered: {})",
            probe.runtimes.join(", ")
        ));
    }
    Ok(())
}

/// The optional parts of the host, each with whether it is here and the one command that
/// installs it.
fn optional_json(
    docker: &Result<warden_docker::EngineProbe, String>,
    data_science: bool,
    networking: bool,
) -> serde_json::Value {
    let mut parts = vec![
        serde_json::json!({"part": "data_science", "present": data_science, "install": INSTALL_DATA_SCIENCE}),
        serde_json::json!({"part": "networking", "present": networking, "install": INSTALL_NET}),
        serde_json::json!({"part": "docker_engine", "present": docker.is_ok(), "install": INSTALL_DOCKER}),
    ];
    if let Ok(p) = docker {
        parts.push(serde_json::json!({"part": "gvisor", "present": p.runtimes.iter().any(|r| r == "runsc"), "install": INSTALL_GVISOR}));
        for (image, ok) in &p.images {
            parts.push(serde_json::json!({"part": format!("image {image}"), "present": ok, "install": INSTALL_IMAGES}));
        }
    }
    serde_json::Value::Array(parts)
}

pub fn run(config: Option<&PathBuf>, json: bool) -> anyhow::Result<i32> {
    let settings = load_settings(config)?;
    let probes = warden_jail::probe::run_all();
    // Each sandbox's own host uid comes from these ranges (warden_net::uids).
    let range = |base, count| warden_net::uids::UidRange { base, count }.describe();
    let jail = &settings.sandbox.jail;
    let jail_uids = range(jail.uid_base, jail.uid_count);
    let docker_uids = range(
        settings.sandbox.docker.uid_base,
        settings.sandbox.docker.uid_count,
    );
    let docker = docker(&settings);
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
                if backend == BackendKind::Docker {
                    docker_verdict(&settings, &docker, &plan)
                } else if backend == BackendKind::Kubernetes {
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
                            host: warden_jail::plan::HostIds::Lease(Default::default()),
                        },
                        helper_exe: PathBuf::new(),
                        helper_start: warden_jail::HelperStart::Exec,
                        wait_for_teardown: false,
                        network: warden_jail::NetSettings {
                            pool: settings.sandbox.jail.network.pool,
                            pool6: settings.sandbox.jail.network.pool6,
                            upstream_dns: settings.sandbox.jail.network.upstream_dns,
                            secrets: settings.sandbox.secrets.clone(),
                            upstream_ca_file: settings
                                .sandbox
                                .jail
                                .network
                                .upstream_ca_file
                                .clone(),
                        },
                    })
                    .with_landlock(crate::run::landlock_requirements(&settings));
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
                install_runtime(&rt.command[0]),
            )
        })
        .collect();
    let networking = networking_present();
    let jail_unsupported =
        warden_engine::Backend::unsupported(&crate::run::jail_backend(&settings)?);
    let docker_backend = crate::run::docker_backend(&settings);
    let docker_unsupported = warden_engine::Backend::unsupported(&docker_backend);
    let runsc_unsupported = match &docker {
        Ok(_) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(docker_backend.unsupported_under("runsc")),
        Err(_) => Vec::new(),
    };
    let unsupported = [
        ("jail", &jail_unsupported),
        ("docker", &docker_unsupported),
        ("docker+runsc", &runsc_unsupported),
    ];
    let unsupported_json: Vec<_> = unsupported
        .iter()
        .flat_map(|(backend, list)| {
            list.iter().map(move |u| {
                serde_json::json!({ "backend": backend, "promise": u.promise, "check": u.check, "why": u.why })
            })
        })
        .collect();
    if json {
        let value = serde_json::json!({
            "unsupported": unsupported_json,
            "jail": probes,
            "uids": {
                "jail": {"ok": jail_uids.0, "detail": jail_uids.1},
                "docker": {"ok": docker_uids.0, "detail": docker_uids.1},
            },
            "docker": match &docker {
                Ok(p) => serde_json::json!({
                    "ok": true,
                    "version": p.version,
                    "api_version": p.api_version,
                    "runtimes": p.runtimes,
                    "runsc": p.runtimes.iter().any(|r| r == "runsc"),
                    "images": p.images.iter().map(|(i, ok)| serde_json::json!({"image": i, "present": ok})).collect::<Vec<_>>(),
                }),
                Err(e) => serde_json::json!({ "ok": false, "detail": e }),
            },
            "kubernetes": kube_probe.as_ref().map(|(ok, detail)| serde_json::json!({ "ok": ok, "detail": detail })),
            "runtimes": runtimes.iter().map(|(l, c, ok, install)| serde_json::json!({"language": l, "command": c, "present": ok, "install": install})).collect::<Vec<_>>(),
            "data_science_packages": data_science,
            "networking": networking,
            "optional": optional_json(&docker, data_science, networking),
            "profiles": verdicts.iter().map(|(n, v)| serde_json::json!({"name": n, "runnable": v.is_ok(), "why": v.as_ref().err()})).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        let mark = |ok: bool| if ok { "ok " } else { "NO " };
        println!("jail backend (native isolation):");
        for p in &probes {
            println!("  {} {:<14} {}", mark(p.ok), p.name, p.detail);
        }
        println!("  {} {:<14} {}", mark(jail_uids.0), "uids", jail_uids.1);
        println!(
            "  {} {:<14} nftables, iproute2 and forwarding for networked profiles{}",
            mark(networking),
            "networking",
            hint(networking, Some(INSTALL_NET))
        );
        println!("docker backend:");
        println!("  {} {:<14} {}", mark(docker_uids.0), "uids", docker_uids.1);
        match &docker {
            Ok(p) => {
                println!(
                    "  ok  {:<14} engine {} (API {})",
                    "engine", p.version, p.api_version
                );
                let runsc = p.runtimes.iter().any(|r| r == "runsc");
                println!(
                    "  {} {:<14} OCI runtimes: {}{}{}",
                    mark(runsc),
                    "gvisor",
                    p.runtimes.join(", "),
                    if runsc {
                        ""
                    } else {
                        " (runsc is not registered: profiles with container_runtime = \"runsc\" are refused)"
                    },
                    hint(runsc, Some(INSTALL_GVISOR))
                );
                for (image, ok) in &p.images {
                    println!(
                        "  {} {:<14} {image}{}",
                        mark(*ok),
                        "image",
                        hint(*ok, Some(INSTALL_IMAGES))
                    );
                }
            }
            Err(e) => println!(
                "  NO  {:<14} {e}{}",
                "engine",
                hint(false, Some(INSTALL_DOCKER))
            ),
        }
        println!("kubernetes backend:");
        match &kube_probe {
            Some((ok, detail)) => println!("  {} {:<14} {}", mark(*ok), "cluster", detail),
            None => println!(
                "  --  {:<14} not used by any profile and no kubeconfig configured ({})",
                "cluster",
                warden_kube::backend::describe_kubeconfig(
                    settings.sandbox.kubernetes.kubeconfig.as_deref()
                )
            ),
        }
        println!("runtimes:");
        for (lang, cmd, ok, install) in &runtimes {
            println!(
                "  {} {:<14} {}{}",
                mark(*ok),
                lang,
                cmd,
                hint(*ok, *install)
            );
        }
        println!(
            "  {} {:<14} numpy, pandas, matplotlib for python (the data_science profile){}",
            mark(data_science),
            "data science",
            hint(data_science, Some(INSTALL_DATA_SCIENCE))
        );
        println!("profiles:");
        for (name, v) in &verdicts {
            match v {
                Ok(()) => println!("  ok  {name:<14} runs with every limit applied"),
                Err(why) => println!("  NO  {name:<14} refused: {why}"),
            }
        }
        println!("conformance promises not kept here (crates/warden/tests/conformance.rs):");
        for (backend, list) in unsupported {
            for u in list {
                let check = u.check.map(|c| format!(" ({c})")).unwrap_or_default();
                println!("  --  {backend:<14} {}{check}: {}", u.promise, u.why);
            }
        }
    }
    let all_ok = probes.iter().all(|p| p.ok)
        && jail_uids.0
        && docker_uids.0
        && verdicts.iter().all(|(_, v)| v.is_ok());
    Ok(if all_ok { 0 } else { 1 })
}
