//! The security tables of the sandbox's root, as checked-in data with a reason on every entry
//! (`data/*.toml`, as the seccomp table): the host paths never mounted, the /proc entries
//! masked or made read-only, the devices created in /dev, and the paths Landlock lets the
//! program write.
//!
//! Invariants: the statics below are generated from the data at build time (`build.rs` uses
//! [`source`]), so what runs is exactly what was reviewed, and no run parses the data; every
//! entry has a reason; order is the files' order.

#[allow(dead_code)]
pub mod source;

include!(concat!(env!("OUT_DIR"), "/tables.rs"));

#[cfg(test)]
mod tests {
    use super::source::{self, TableError};
    use super::*;

    #[test]
    fn the_data_parses_and_every_entry_has_a_reason() {
        let tables = source::load().unwrap();
        // Every entry of every file carries a non-empty reason (the loader refuses otherwise;
        // this counts them against the entries, so no table is silently empty).
        for (file, text, entries) in [
            (
                source::FILES[0],
                source::HOST_PATHS,
                tables.forbidden_host_paths.len(),
            ),
            (
                source::FILES[1],
                source::PROC,
                tables.masked_proc_files.len()
                    + tables.masked_proc_dirs.len()
                    + tables.read_only_proc.len(),
            ),
            (source::FILES[2], source::DEVICES, tables.devices.len()),
            (
                source::FILES[3],
                source::LANDLOCK,
                tables.landlock_writable.len() + tables.landlock_devices.len(),
            ),
        ] {
            let value: toml::Table = toml::from_str(text).unwrap();
            let mut reasons = 0;
            for list in value.values() {
                for entry in list.as_array().unwrap() {
                    let reason = entry.get("reason").and_then(|r| r.as_str()).unwrap_or("");
                    assert!(!reason.trim().is_empty(), "{file}: {entry:?}");
                    reasons += 1;
                }
            }
            assert_eq!(reasons, entries, "{file}");
            assert!(entries > 0, "{file}");
        }
    }

    #[test]
    fn the_generated_statics_are_the_data() {
        let t = source::load().unwrap();
        assert_eq!(FORBIDDEN_HOST_PATHS, t.forbidden_host_paths);
        assert_eq!(MASKED_PROC_FILES, t.masked_proc_files);
        assert_eq!(MASKED_PROC_DIRS, t.masked_proc_dirs);
        assert_eq!(READ_ONLY_PROC, t.read_only_proc);
        assert_eq!(DEVICES, t.devices);
        assert_eq!(LANDLOCK_WRITABLE, t.landlock_writable);
        assert_eq!(LANDLOCK_DEVICES, t.landlock_devices);
    }

    /// The tables as they were when they were Rust constants: a change to the data is a
    /// change to the sandbox, made here on purpose.
    #[test]
    fn the_tables_are_the_reviewed_ones() {
        assert_eq!(
            FORBIDDEN_HOST_PATHS,
            [
                "/root", "/home", "/var", "/proc", "/sys", "/run", "/boot", "/"
            ]
        );
        assert_eq!(
            MASKED_PROC_FILES,
            [
                "/proc/kcore",
                "/proc/keys",
                "/proc/latency_stats",
                "/proc/timer_list",
                "/proc/timer_stats",
                "/proc/sched_debug",
                "/proc/sysrq-trigger",
                "/proc/kallsyms",
                "/proc/kmsg",
                "/proc/config.gz",
            ]
        );
        assert_eq!(
            MASKED_PROC_DIRS,
            ["/proc/acpi", "/proc/scsi", "/proc/asound", "/proc/driver"]
        );
        assert_eq!(
            READ_ONLY_PROC,
            ["/proc/sys", "/proc/bus", "/proc/fs", "/proc/irq"]
        );
        assert_eq!(
            DEVICES,
            ["null", "zero", "full", "random", "urandom", "tty"]
        );
        assert_eq!(LANDLOCK_WRITABLE, ["/workspace", "/tmp", "/dev/shm"]);
        assert_eq!(
            LANDLOCK_DEVICES,
            [
                "/dev/null",
                "/dev/zero",
                "/dev/full",
                "/dev/random",
                "/dev/urandom",
                "/dev/tty",
            ]
        );
    }

    fn load_with(host_paths: &str, devices: &str, landlock: &str) -> Result<(), TableError> {
        source::load_from(host_paths, source::PROC, devices, landlock).map(drop)
    }

    #[test]
    fn an_entry_without_a_reason_is_refused() {
        let no_reason = "[[forbidden]]\npath = \"/root\"\nreason = \" \"\n";
        assert!(matches!(
            load_with(no_reason, source::DEVICES, source::LANDLOCK),
            Err(TableError::NoReason { .. })
        ));
        let missing = "[[forbidden]]\npath = \"/root\"\n";
        assert!(matches!(
            load_with(missing, source::DEVICES, source::LANDLOCK),
            Err(TableError::Parse { .. })
        ));
    }

    #[test]
    fn bad_paths_names_duplicates_and_unknown_devices_are_refused() {
        let entry = |p: &str| format!("[[forbidden]]\npath = {p:?}\nreason = \"r\"\n");
        for bad in ["root", "/root/", "/usr/../root", "/a//b", "/./a", ""] {
            assert!(
                matches!(
                    load_with(&entry(bad), source::DEVICES, source::LANDLOCK),
                    Err(TableError::BadPath { .. })
                ),
                "{bad:?}"
            );
        }
        let twice = format!("{}{}", entry("/root"), entry("/root"));
        assert!(matches!(
            load_with(&twice, source::DEVICES, source::LANDLOCK),
            Err(TableError::Duplicate { .. })
        ));
        let bad_name = "[[device]]\nname = \"../sda\"\nreason = \"r\"\n";
        assert!(matches!(
            load_with(source::HOST_PATHS, bad_name, source::LANDLOCK),
            Err(TableError::BadName { .. })
        ));
        let unknown = format!(
            "{}[[device]]\npath = \"/dev/sda\"\nreason = \"r\"\n",
            "[[writable]]\npath = \"/tmp\"\nreason = \"r\"\n"
        );
        assert!(matches!(
            load_with(source::HOST_PATHS, source::DEVICES, &unknown),
            Err(TableError::UnknownDevice { .. })
        ));
    }
}
