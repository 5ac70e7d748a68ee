//! Benchmark of one execution in an existing sandbox, interleaved round by round (like
//! `bench/interleave.py`): the jail backend's `BackendSandbox::exec`, the docker backend's, and
//! plain `docker exec CONTAINER python3 -c 'print(1)'` on a container started with the same
//! image, network `none`, read-only root and user.
//!
//! usage: cargo run --release -p warden --example sandbox_exec_bench -- WARDEN_BINARY [ROUNDS]
//! (scripts/bench.sh runs it). Needs root and a Docker Engine with warden-python:3.11.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use warden_engine::{Backend, BackendSandbox, ExecPlan, SandboxSpec};
use warden_types::{Language, Limits};

const IMAGE: &str = "warden-python:3.11";

fn limits() -> Limits {
    let p = warden_config::Profile::default();
    p.limits()
}

fn plan() -> ExecPlan {
    ExecPlan {
        import_guard: None,
        profile: "standard".into(),
        language: Language::new("python").unwrap(),
        command: vec!["python3".into()],
        file_name: "main.py".into(),
        code: "print(1)".into(),
        args: vec![],
        stdin: vec![],
        env: Default::default(),
        cwd: None,
        limits: limits(),
        network_enabled: false,
        egress: Default::default(),
        image: Some(IMAGE.into()),
        container_runtime: None,
    }
}

fn spec(id: &str) -> SandboxSpec {
    SandboxSpec {
        id: id.into(),
        profile: "standard".into(),
        limits: limits(),
        network_enabled: false,
        egress: Default::default(),
        image: Some(IMAGE.into()),
        container_runtime: None,
        labels: BTreeMap::new(),
        env: Default::default(),
        home: None,
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn pct(v: &[f64], p: f64) -> f64 {
    v[((v.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let warden = args
        .next()
        .expect("usage: sandbox_exec_bench WARDEN_BINARY [ROUNDS]");
    let rounds: usize = args.next().map_or(100, |r| r.parse().expect("ROUNDS"));
    let jail_opts = warden_config::JailOptions::default();
    let jail = warden_jail::JailBackend::new(warden_jail::JailSettings {
        host_paths: jail_opts.host_paths,
        fast_cgroup_attach: true,
        ids: warden_jail::IdMap {
            inside_uid: 1000,
            inside_gid: 1000,
            host: warden_jail::plan::HostIds::Lease(Default::default()),
        },
        helper_exe: warden.into(),
        helper_start: warden_jail::HelperStart::ForkServer,
        wait_for_teardown: false,
        network: Default::default(),
    });
    let docker = warden_docker::DockerBackend::new(warden_docker::DockerSettings::default());
    let pid = std::process::id();
    let jail_sb: Arc<dyn BackendSandbox> = jail
        .create_sandbox(spec(&format!("bench-jail-{pid}")))
        .await
        .expect("jail sandbox");
    let docker_sb: Arc<dyn BackendSandbox> = docker
        .create_sandbox(spec(&format!("bench-docker-{pid}")))
        .await
        .expect("docker sandbox");
    let plain = format!("warden-bench-plain-{pid}");
    let started = Command::new("docker")
        .args([
            "run",
            "-d",
            "--name",
            &plain,
            "--network",
            "none",
            "--read-only",
            "--user",
            "65534:65534",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            IMAGE,
            "sleep",
            "infinity",
        ])
        .output()
        .unwrap();
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );

    let names = [
        "docker exec (plain CLI)",
        "docker backend: sandbox exec",
        "jail backend: sandbox exec",
    ];
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let mut order: Vec<usize> = (0..names.len()).collect();
    for round in 0..rounds + 3 {
        // A cheap shuffle: rotate by the round, reversed every other round.
        order.rotate_left(1);
        if round % 2 == 1 {
            order.reverse();
        }
        for &i in &order {
            let t = Instant::now();
            match i {
                0 => {
                    let out = Command::new("docker")
                        .args(["exec", &plain, "python3", "-c", "print(1)"])
                        .output()
                        .unwrap();
                    assert_eq!(out.stdout, b"1\n");
                }
                1 => {
                    let r = docker_sb.exec(plan(), None).await.unwrap();
                    assert_eq!(r.stdout, "1\n");
                }
                _ => {
                    let r = jail_sb.exec(plan(), None).await.unwrap();
                    assert_eq!(r.stdout, "1\n");
                }
            }
            // The first three rounds warm up.
            if round >= 3 {
                samples[i].push(t.elapsed().as_secs_f64() * 1000.0);
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = docker_sb.destroy().await;
    let _ = jail_sb.destroy().await;
    let _ = Command::new("docker").args(["rm", "-f", &plain]).output();

    let base = median(&mut samples[0].clone());
    println!("| command | median ms | p10 | p90 | mean | median / plain docker exec |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, s) in names.iter().zip(samples.iter_mut()) {
        let m = median(s);
        let mean = s.iter().sum::<f64>() / s.len() as f64;
        println!(
            "| {name} | {m:.1} | {:.1} | {:.1} | {mean:.1} | {:.2} |",
            pct(s, 0.1),
            pct(s, 0.9),
            m / base
        );
    }
}
