//! Argument parsing and dispatch.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::sync::Arc;
use warden_config::Settings;

/// Exit status for a failure of warden itself (bad settings, refused profile, policy
/// violation), as `docker run` uses 125; otherwise the program's own status is mirrored.
pub const EXIT_WARDEN_ERROR: i32 = 125;

#[derive(Debug, Parser)]
#[command(
    name = "warden",
    version,
    about = "Run untrusted code in a sandbox, in milliseconds"
)]
pub struct Cli {
    /// Settings file (settings.toml); default: the built-in profiles.
    #[arg(long, global = true, env = "WARDEN_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one program in a fresh sandbox and print its output.
    Run(crate::run::RunArgs),
    /// Serve the HTTP API (one-shot execution, health) on a loopback address.
    Serve(crate::serve::ServeArgs),
    /// Serve the MCP tools on standard input and output (for an MCP client's config).
    Mcp(crate::mcp::McpArgs),
    /// List the profiles and their effective limits.
    Profiles {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Write the Kubernetes manifests (deploy/kubernetes) for these settings.
    KubeManifests(crate::kube::ManifestArgs),
    /// Report what this host supports and what that means for each profile.
    Doctor {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub fn load_settings(config: Option<&PathBuf>) -> anyhow::Result<Arc<Settings>> {
    let settings = match config {
        Some(path) => Settings::load(path)?,
        None => Settings::builtin(),
    };
    Ok(Arc::new(settings))
}

/// Whether these arguments (the program's name first) are `warden [--config FILE] run …`.
pub fn is_run(mut args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    let _program = args.next();
    while let Some(arg) = args.next() {
        if arg == "--config" {
            args.next();
        } else if !arg.to_string_lossy().starts_with("--config=") {
            return arg == "run";
        }
    }
    false
}

pub fn main(prestarted: Option<warden_jail::Prestarted>) -> i32 {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Run(args) => crate::run::run(cli.config.as_ref(), args, prestarted),
        Command::Serve(args) => crate::serve::run(cli.config.as_ref(), args),
        Command::Mcp(args) => crate::mcp::run(cli.config.as_ref(), args),
        Command::Profiles { json } => crate::profiles::run(cli.config.as_ref(), *json),
        Command::KubeManifests(args) => crate::kube::manifests(cli.config.as_ref(), args),
        Command::Doctor { json } => crate::doctor::run(cli.config.as_ref(), *json),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("warden: {e:#}");
            EXIT_WARDEN_ERROR
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_run;

    fn args(line: &str) -> impl Iterator<Item = std::ffi::OsString> {
        line.split(' ')
            .map(std::ffi::OsString::from)
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn run_is_recognised_behind_the_global_config_option_only() {
        assert!(is_run(args("warden run x.py")));
        assert!(is_run(args("warden --config s.toml run x.py")));
        assert!(is_run(args("warden --config=s.toml run -")));
        assert!(!is_run(args("warden profiles")));
        assert!(!is_run(args("warden --config run profiles")));
        assert!(!is_run(args("warden serve run")));
        assert!(!is_run(args("warden")));
    }
}
