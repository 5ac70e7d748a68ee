//! Parsing the checked-in security tables of the sandbox's root (`data/*.toml`: forbidden host
//! paths, masked /proc entries, devices, Landlock paths) and rendering them as Rust statics.
//!
//! This file is compiled twice, as the seccomp table is: by `build.rs`, which turns the tables
//! into `static` slices at build time (a bad table fails the build, and no run parses data on
//! its start-up path), and into the crate for its tests. It depends only on serde and toml.
//!
//! Invariants: every entry has a non-empty reason; paths are absolute, without `.`, `..`,
//! empty components or a trailing slash (`/` itself excepted); names are unique within a table;
//! a device Landlock lets the program write is one that `devices.toml` creates. Anything else
//! is an error, never skipped.

use serde::Deserialize;
use std::fmt::Write;

pub const HOST_PATHS: &str = include_str!("../../data/host_paths.toml");
pub const PROC: &str = include_str!("../../data/proc.toml");
pub const DEVICES: &str = include_str!("../../data/devices.toml");
pub const LANDLOCK: &str = include_str!("../../data/landlock.toml");

/// The files' names, for the build's `rerun-if-changed`.
pub const FILES: &[&str] = &[
    "data/host_paths.toml",
    "data/proc.toml",
    "data/devices.toml",
    "data/landlock.toml",
];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TableError {
    #[error("{file}: {message}")]
    Parse { file: &'static str, message: String },
    #[error("{file}: entry {value:?} has no reason")]
    NoReason { file: &'static str, value: String },
    #[error("{file}: {value:?} is not a clean absolute path")]
    BadPath { file: &'static str, value: String },
    #[error("{file}: device name {value:?} must be one plain file name")]
    BadName { file: &'static str, value: String },
    #[error("{file}: {value:?} is listed twice")]
    Duplicate { file: &'static str, value: String },
    #[error("{file}: device {value:?} is not created in the sandbox (data/devices.toml)")]
    UnknownDevice { file: &'static str, value: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PathEntry {
    path: String,
    reason: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceEntry {
    name: String,
    reason: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostPathsFile {
    forbidden: Vec<PathEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProcFile {
    masked_file: Vec<PathEntry>,
    masked_dir: Vec<PathEntry>,
    read_only: Vec<PathEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DevicesFile {
    device: Vec<DeviceEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LandlockFile {
    writable: Vec<PathEntry>,
    device: Vec<PathEntry>,
}

/// The checked tables, in file order (the order is the plan's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tables {
    pub forbidden_host_paths: Vec<String>,
    pub masked_proc_files: Vec<String>,
    pub masked_proc_dirs: Vec<String>,
    pub read_only_proc: Vec<String>,
    pub devices: Vec<String>,
    pub landlock_writable: Vec<String>,
    pub landlock_devices: Vec<String>,
}

fn parse<T: for<'de> Deserialize<'de>>(file: &'static str, text: &str) -> Result<T, TableError> {
    toml::from_str(text).map_err(|e| TableError::Parse {
        file,
        message: e.to_string(),
    })
}

fn clean_absolute(path: &str) -> bool {
    path == "/"
        || (path.starts_with('/')
            && !path.ends_with('/')
            && path[1..]
                .split('/')
                .all(|c| !c.is_empty() && c != "." && c != ".."))
}

/// The values of `entries` (each `(value, reason)`), checked: a reason each, no duplicates, and
/// `check` on every value.
fn values<'a>(
    file: &'static str,
    entries: impl Iterator<Item = (&'a str, &'a str)>,
    check: impl Fn(&str) -> Result<(), TableError>,
) -> Result<Vec<String>, TableError> {
    let mut out: Vec<String> = Vec::new();
    for (value, reason) in entries {
        if reason.trim().is_empty() {
            return Err(TableError::NoReason {
                file,
                value: value.into(),
            });
        }
        check(value)?;
        if out.iter().any(|v| v == value) {
            return Err(TableError::Duplicate {
                file,
                value: value.into(),
            });
        }
        out.push(value.into());
    }
    Ok(out)
}

fn paths(file: &'static str, entries: &[PathEntry]) -> Result<Vec<String>, TableError> {
    values(
        file,
        entries.iter().map(|e| (e.path.as_str(), e.reason.as_str())),
        |p| {
            if clean_absolute(p) {
                Ok(())
            } else {
                Err(TableError::BadPath {
                    file,
                    value: p.into(),
                })
            }
        },
    )
}

/// Parses and checks the four tables' texts.
pub fn load_from(
    host_paths: &str,
    proc: &str,
    devices: &str,
    landlock: &str,
) -> Result<Tables, TableError> {
    let host: HostPathsFile = parse(FILES[0], host_paths)?;
    let proc: ProcFile = parse(FILES[1], proc)?;
    let dev: DevicesFile = parse(FILES[2], devices)?;
    let land: LandlockFile = parse(FILES[3], landlock)?;
    let devices = values(
        FILES[2],
        dev.device
            .iter()
            .map(|e| (e.name.as_str(), e.reason.as_str())),
        |n| {
            if n.is_empty() || n.contains('/') || n == "." || n == ".." {
                Err(TableError::BadName {
                    file: FILES[2],
                    value: n.into(),
                })
            } else {
                Ok(())
            }
        },
    )?;
    let landlock_devices = paths(FILES[3], &land.device)?;
    for d in &landlock_devices {
        let created = d
            .strip_prefix("/dev/")
            .is_some_and(|name| devices.iter().any(|n| n == name));
        if !created {
            return Err(TableError::UnknownDevice {
                file: FILES[3],
                value: d.clone(),
            });
        }
    }
    Ok(Tables {
        forbidden_host_paths: paths(FILES[0], &host.forbidden)?,
        masked_proc_files: paths(FILES[1], &proc.masked_file)?,
        masked_proc_dirs: paths(FILES[1], &proc.masked_dir)?,
        read_only_proc: paths(FILES[1], &proc.read_only)?,
        devices,
        landlock_writable: paths(FILES[3], &land.writable)?,
        landlock_devices,
    })
}

/// The checked-in tables.
pub fn load() -> Result<Tables, TableError> {
    load_from(HOST_PATHS, PROC, DEVICES, LANDLOCK)
}

/// The tables as Rust statics (`build.rs` writes this into `OUT_DIR/tables.rs`).
pub fn render(t: &Tables) -> String {
    let mut out = String::new();
    for (name, doc, list) in [
        (
            "FORBIDDEN_HOST_PATHS",
            "Host paths never mounted into a sandbox (`data/host_paths.toml`).",
            &t.forbidden_host_paths,
        ),
        (
            "MASKED_PROC_FILES",
            "Files of the sandbox's procfs hidden behind /dev/null (`data/proc.toml`).",
            &t.masked_proc_files,
        ),
        (
            "MASKED_PROC_DIRS",
            "Folders of the sandbox's procfs hidden behind an empty tmpfs (`data/proc.toml`).",
            &t.masked_proc_dirs,
        ),
        (
            "READ_ONLY_PROC",
            "Folders of the sandbox's procfs made read-only (`data/proc.toml`).",
            &t.read_only_proc,
        ),
        (
            "DEVICES",
            "The device nodes bound into the sandbox's /dev, by name (`data/devices.toml`).",
            &t.devices,
        ),
        (
            "LANDLOCK_WRITABLE",
            "Folders beneath which the program may write (`data/landlock.toml`).",
            &t.landlock_writable,
        ),
        (
            "LANDLOCK_DEVICES",
            "Device nodes the program may write (`data/landlock.toml`).",
            &t.landlock_devices,
        ),
    ] {
        let _ = write!(out, "#[doc = {doc:?}]\npub static {name}: &[&str] = &[");
        for v in list {
            let _ = write!(out, "{v:?},");
        }
        out.push_str("];\n");
    }
    out
}
