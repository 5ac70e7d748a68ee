//! `warden profiles`: the profiles and their effective limits, and their warm pools' sizes.

use crate::cli::load_settings;
use std::fmt::Write;
use std::path::PathBuf;
use warden_config::Settings;

pub fn render_table(settings: &Settings) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<14} {:>8} {:>8} {:>5} {:>5} {:>9} {:>10} {:>8} {:<8} {:<7} {:>4} POLICIES",
        "PROFILE",
        "TIMEOUT",
        "MEMORY",
        "PIDS",
        "CPUS",
        "OUTPUT",
        "WORKSPACE",
        "NETWORK",
        "BACKEND",
        "LANG",
        "POOL"
    );
    for (name, p) in &settings.sandbox.profiles {
        let marker = if *name == settings.sandbox.default_profile {
            "*"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{:<14} {:>8} {:>8} {:>5} {:>5} {:>9} {:>10} {:>8} {:<8} {:<7} {:>4} {}",
            format!("{name}{marker}"),
            format!("{}s", p.timeout_seconds),
            format!("{}MiB", p.max_memory_mb),
            p.max_pids,
            p.cpus,
            format!("{}KiB", p.max_output_bytes / 1024),
            format!("{}MiB", p.workspace_mb),
            if p.network_enabled { "on" } else { "off" },
            settings.backend_of(p).as_str(),
            p.runtime.language,
            p.pool_size,
            if p.enabled_policies.is_empty() {
                "-".to_owned()
            } else {
                p.enabled_policies.join(",")
            },
        );
    }
    let _ = writeln!(out, "* default profile");
    out
}

pub fn render_json(settings: &Settings) -> serde_json::Value {
    let profiles: Vec<_> = settings
        .sandbox
        .profiles
        .iter()
        .map(|(name, p)| {
            serde_json::json!({
                "name": name,
                "default": *name == settings.sandbox.default_profile,
                "backend": settings.backend_of(p).as_str(),
                "language": p.runtime.language,
                "limits": p.limits(),
                "network_enabled": p.network_enabled,
                "read_only": p.read_only,
                "strict_mode": p.strict_mode,
                "enabled_policies": p.enabled_policies,
                "pool_size": p.pool_size,
                "preload_modules": p.preload_modules,
            })
        })
        .collect();
    serde_json::json!({ "profiles": profiles })
}

pub fn run(config: Option<&PathBuf>, json: bool) -> anyhow::Result<i32> {
    let settings = load_settings(config)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&render_json(&settings))?);
    } else {
        print!("{}", render_table(&settings));
    }
    Ok(0)
}
