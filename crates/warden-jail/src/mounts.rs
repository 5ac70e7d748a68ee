//! Builds the sandbox's root from the plan's `MountOp`s, through the `MountSys` trait so the
//! order and flags are unit-tested with a recording fake, without root.
//!
//! Invariants: every bind of a host path is recursive and then made read-only, nosuid and nodev
//! (recursively, with `mount_setattr`); device binds are nosuid and noexec; procfs is mounted
//! before the old root goes away (the kernel only allows a new procfs while a fully visible one
//! is in the namespace); the root tmpfs is made read-only by the caller after the pivot.

use crate::plan::{JailPlan, MountOp, OUTPUT_DIR_NAME, WORKSPACE_DIR};
use crate::sys;
use std::io;
use std::path::{Path, PathBuf};

/// The mount-related system calls, so tests can record them.
pub trait MountSys {
    fn mount(
        &mut self,
        source: Option<&Path>,
        target: &Path,
        fstype: Option<&str>,
        flags: libc::c_ulong,
        data: Option<&str>,
    ) -> io::Result<()>;
    fn mount_setattr(&mut self, target: &Path, set: u64, recursive: bool) -> io::Result<()>;
    fn create_dir_all(&mut self, path: &Path, mode: u32) -> io::Result<()>;
    fn write_file(&mut self, path: &Path, contents: &[u8], mode: u32) -> io::Result<()>;
    fn symlink(&mut self, target: &Path, link: &Path) -> io::Result<()>;
    fn is_dir(&self, path: &Path) -> bool;
    fn exists(&self, path: &Path) -> bool;
}

/// The real system calls.
#[derive(Debug, Default)]
pub struct RealMountSys;

impl MountSys for RealMountSys {
    fn mount(
        &mut self,
        source: Option<&Path>,
        target: &Path,
        fstype: Option<&str>,
        flags: libc::c_ulong,
        data: Option<&str>,
    ) -> io::Result<()> {
        sys::mount(source, target, fstype, flags, data)
    }

    fn mount_setattr(&mut self, target: &Path, set: u64, recursive: bool) -> io::Result<()> {
        sys::mount_setattr(target, set, recursive)
    }

    fn create_dir_all(&mut self, path: &Path, mode: u32) -> io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(path)
    }

    fn write_file(&mut self, path: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)?;
        f.write_all(contents)
    }

    fn symlink(&mut self, target: &Path, link: &Path) -> io::Result<()> {
        std::os::unix::fs::symlink(target, link)
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn exists(&self, path: &Path) -> bool {
        path.symlink_metadata().is_ok()
    }
}

/// A mount step that failed, with the step and path.
#[derive(Debug, thiserror::Error)]
#[error("{step} {path:?}: {source}")]
pub struct MountError {
    pub step: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

fn at<'a>(step: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> MountError + 'a {
    move |source| MountError {
        step,
        path: path.to_owned(),
        source,
    }
}

/// Joins a sandbox path (absolute) under the new root.
pub fn under(root: &Path, dest: &Path) -> PathBuf {
    root.join(dest.strip_prefix("/").unwrap_or(dest))
}

const BIND_FLAGS: libc::c_ulong = libc::MS_BIND | libc::MS_REC;
const RO_ATTRS: u64 = sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV;

/// Where the new root and the workspace tmpfs are assembled under the staging folder.
pub fn root_dir(staging: &Path) -> PathBuf {
    staging.join("root")
}

pub fn scratch_dir(staging: &Path) -> PathBuf {
    staging.join("scratch")
}

/// Mounts a small staging tmpfs at `staging` holding the root tmpfs and the workspace tmpfs
/// side by side, applies every op of the plan under the root, then writes the code file. The
/// caller pivots into [`root_dir`] afterwards; the staging tmpfs and the workspace's own mount
/// point go away with the old root in one unmount, while the workspace stays alive through
/// its binds.
pub fn build_root(
    sys: &mut dyn MountSys,
    staging: &Path,
    plan: &JailPlan,
) -> Result<(), MountError> {
    let tmpfs = Some(Path::new("tmpfs"));
    sys.mount(
        tmpfs,
        staging,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("size=65536,mode=0755"),
    )
    .map_err(at("mount staging tmpfs", staging))?;
    let root = root_dir(staging);
    let scratch = scratch_dir(staging);
    for dir in [&root, &scratch] {
        sys.create_dir_all(dir, 0o755)
            .map_err(at("create folder", dir))?;
    }
    // The root tmpfs holds only mount points, a few small files and the code.
    let root_size = plan.code.len() as u64 + 1024 * 1024;
    sys.mount(
        tmpfs,
        &root,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&format!("size={root_size},mode=0755")),
    )
    .map_err(at("mount root tmpfs", &root))?;
    let scratch_data = format!(
        "size={},mode=0700,uid={},gid={}",
        plan.limits.workspace_mb * 1024 * 1024,
        plan.ids.inside_uid,
        plan.ids.inside_gid
    );
    sys.mount(
        tmpfs,
        &scratch,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&scratch_data),
    )
    .map_err(at("mount workspace tmpfs", &scratch))?;
    for op in &plan.mounts {
        apply(sys, &root, &scratch, plan, op)?;
    }
    let output = under(&root, Path::new(WORKSPACE_DIR)).join(OUTPUT_DIR_NAME);
    sys.create_dir_all(&output, 0o755)
        .map_err(at("create output folder", &output))?;
    let code = under(&root, &plan.code_path);
    sys.write_file(&code, plan.code.as_bytes(), 0o444)
        .map_err(at("write code", &plan.code_path))?;
    Ok(())
}

fn mount_point(sys: &mut dyn MountSys, source: &Path, dest: &Path) -> Result<(), MountError> {
    if sys.exists(dest) {
        return Ok(());
    }
    if sys.is_dir(source) {
        sys.create_dir_all(dest, 0o755)
            .map_err(at("create mount point", dest))
    } else {
        if let Some(parent) = dest.parent() {
            sys.create_dir_all(parent, 0o755)
                .map_err(at("create mount point", parent))?;
        }
        sys.write_file(dest, b"", 0o444)
            .map_err(at("create mount point", dest))
    }
}

fn apply(
    sys: &mut dyn MountSys,
    root: &Path,
    scratch: &Path,
    plan: &JailPlan,
    op: &MountOp,
) -> Result<(), MountError> {
    match op {
        MountOp::BindReadOnly { source, dest } => {
            let target = under(root, dest);
            mount_point(sys, source, &target)?;
            sys.mount(Some(source), &target, None, BIND_FLAGS, None)
                .map_err(at("bind", source))?;
            sys.mount_setattr(&target, RO_ATTRS, true)
                .map_err(at("make read-only", dest))
        }
        MountOp::BindDevice { source, dest } => {
            let target = under(root, dest);
            mount_point(sys, source, &target)?;
            sys.mount(Some(source), &target, None, libc::MS_BIND, None)
                .map_err(at("bind device", source))?;
            sys.mount_setattr(
                &target,
                sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NOEXEC,
                false,
            )
            .map_err(at("restrict device", dest))
        }
        MountOp::Symlink { target, dest } => {
            let link = under(root, dest);
            if let Some(parent) = link.parent() {
                sys.create_dir_all(parent, 0o755)
                    .map_err(at("create folder", parent))?;
            }
            sys.symlink(target, &link).map_err(at("symlink", dest))
        }
        MountOp::Dir { dest, mode } => sys
            .create_dir_all(&under(root, dest), *mode)
            .map_err(at("create folder", dest)),
        MountOp::File {
            dest,
            contents,
            mode,
        } => {
            let path = under(root, dest);
            if let Some(parent) = path.parent() {
                sys.create_dir_all(parent, 0o755)
                    .map_err(at("create folder", parent))?;
            }
            sys.write_file(&path, contents.as_bytes(), *mode)
                .map_err(at("write file", dest))
        }
        MountOp::Proc { dest } => {
            let target = under(root, dest);
            sys.create_dir_all(&target, 0o555)
                .map_err(at("create folder", dest))?;
            sys.mount(
                Some(Path::new("proc")),
                &target,
                Some("proc"),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                None,
            )
            .map_err(at("mount proc", dest))
        }
        MountOp::Tmpfs {
            dest,
            size_bytes,
            mode,
        } => {
            let target = under(root, dest);
            sys.create_dir_all(&target, 0o755)
                .map_err(at("create folder", dest))?;
            let data = format!(
                "size={size_bytes},mode={mode:o},uid={},gid={}",
                plan.ids.inside_uid, plan.ids.inside_gid
            );
            sys.mount(
                Some(Path::new("tmpfs")),
                &target,
                Some("tmpfs"),
                libc::MS_NOSUID | libc::MS_NODEV,
                Some(&data),
            )
            .map_err(at("mount tmpfs", dest))
        }
        MountOp::BindScratch { subdir, dest } => {
            let source = scratch.join(subdir);
            sys.create_dir_all(&source, 0o700)
                .map_err(at("create folder", &source))?;
            let target = under(root, dest);
            sys.create_dir_all(&target, 0o755)
                .map_err(at("create folder", dest))?;
            sys.mount(Some(&source), &target, None, libc::MS_BIND, None)
                .map_err(at("bind workspace", dest))
        }
        MountOp::MaskFile { dest } => {
            let target = under(root, dest);
            if !sys.exists(&target) {
                return Ok(());
            }
            sys.mount(
                Some(&under(root, Path::new("/dev/null"))),
                &target,
                None,
                libc::MS_BIND,
                None,
            )
            .map_err(at("mask", dest))
        }
        MountOp::MaskDir { dest } => {
            let target = under(root, dest);
            if !sys.is_dir(&target) {
                return Ok(());
            }
            sys.mount(
                Some(Path::new("tmpfs")),
                &target,
                Some("tmpfs"),
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                Some("size=0,mode=0555"),
            )
            .map_err(at("mask", dest))
        }
        MountOp::ReadOnly { dest } => {
            let target = under(root, dest);
            if !sys.exists(&target) {
                return Ok(());
            }
            sys.mount(Some(&target), &target, None, BIND_FLAGS, None)
                .map_err(at("bind", dest))?;
            sys.mount_setattr(&target, RO_ATTRS | sys::MOUNT_ATTR_NOEXEC, true)
                .map_err(at("make read-only", dest))
        }
    }
}

#[cfg(test)]
pub(crate) mod fake {
    use super::*;
    use std::collections::BTreeSet;

    /// Records every call as one line; pretends every host path is a folder unless it ends in
    /// a file-like name.
    #[derive(Debug, Default)]
    pub struct RecordingMountSys {
        pub calls: Vec<String>,
        pub made: BTreeSet<PathBuf>,
    }

    impl MountSys for RecordingMountSys {
        fn mount(
            &mut self,
            source: Option<&Path>,
            target: &Path,
            fstype: Option<&str>,
            flags: libc::c_ulong,
            data: Option<&str>,
        ) -> io::Result<()> {
            self.calls.push(format!(
                "mount {} -> {} type={} flags={:#x} data={}",
                source.map_or("-".into(), |s| s.display().to_string()),
                target.display(),
                fstype.unwrap_or("-"),
                flags,
                data.unwrap_or("-")
            ));
            self.made.insert(target.to_owned());
            Ok(())
        }
        fn mount_setattr(&mut self, target: &Path, set: u64, recursive: bool) -> io::Result<()> {
            self.calls.push(format!(
                "setattr {} set={set:#x} recursive={recursive}",
                target.display()
            ));
            Ok(())
        }
        fn create_dir_all(&mut self, path: &Path, mode: u32) -> io::Result<()> {
            self.calls
                .push(format!("mkdir {} {mode:o}", path.display()));
            self.made.insert(path.to_owned());
            Ok(())
        }
        fn write_file(&mut self, path: &Path, contents: &[u8], mode: u32) -> io::Result<()> {
            self.calls.push(format!(
                "write {} {mode:o} ({} bytes)",
                path.display(),
                contents.len()
            ));
            self.made.insert(path.to_owned());
            Ok(())
        }
        fn symlink(&mut self, target: &Path, link: &Path) -> io::Result<()> {
            self.calls.push(format!(
                "symlink {} -> {}",
                link.display(),
                target.display()
            ));
            Ok(())
        }
        fn is_dir(&self, path: &Path) -> bool {
            path.extension().is_none() && !path.starts_with("/dev")
        }
        fn exists(&self, path: &Path) -> bool {
            self.made.contains(path) || path.starts_with("/st/root/proc")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::RecordingMountSys;
    use super::*;
    use crate::plan::{IdMap, PlanInput};
    use std::time::Duration;
    use warden_types::Limits;

    fn plan() -> JailPlan {
        let paths = vec![PathBuf::from("/usr"), PathBuf::from("/etc/ld.so.cache")];
        JailPlan::build(PlanInput {
            argv: vec!["python3".into(), "/code/main.py".into()],
            code: "print(1)\n".into(),
            code_file_name: "main.py".into(),
            stdin: vec![],
            limits: Limits {
                timeout: Duration::from_secs(1),
                memory_mb: 64,
                max_pids: 16,
                cpus: 1.0,
                max_output_bytes: 1024,
                max_file_size_bytes: 1024,
                workspace_mb: 8,
                max_artifacts: 4,
                max_artifact_bytes: 4096,
            },
            host_paths: &paths,
            ids: IdMap {
                inside_uid: 1000,
                inside_gid: 1000,
                host_uid: 65534,
                host_gid: 65534,
            },
            cgroup_name: "t".into(),
            extra_env: vec![],
        })
        .unwrap()
    }

    #[test]
    fn host_binds_are_read_only_nosuid_nodev_recursively() {
        let mut sys = RecordingMountSys::default();
        build_root(&mut sys, Path::new("/st"), &plan()).unwrap();
        let calls = sys.calls.join("\n");
        assert!(
            calls.contains("mount /usr -> /st/root/usr type=- flags=0x5000"),
            "{calls}"
        );
        assert!(
            calls.contains("setattr /st/root/usr set=0x7 recursive=true"),
            "{calls}"
        );
        assert!(
            calls.contains("setattr /st/root/etc/ld.so.cache set=0x7 recursive=true"),
            "{calls}"
        );
    }

    #[test]
    fn root_is_a_tmpfs_and_the_code_is_written_last() {
        let mut sys = RecordingMountSys::default();
        build_root(&mut sys, Path::new("/st"), &plan()).unwrap();
        assert!(
            sys.calls[0].starts_with("mount tmpfs -> /st type=tmpfs"),
            "{}",
            sys.calls[0]
        );
        assert!(
            sys.calls
                .iter()
                .any(|c| c.starts_with("mount tmpfs -> /st/root type=tmpfs"))
        );
        assert_eq!(
            sys.calls.last().unwrap(),
            "write /st/root/code/main.py 444 (9 bytes)"
        );
    }

    #[test]
    fn workspace_tmpfs_is_capped_and_owned_by_the_sandbox_user() {
        let mut sys = RecordingMountSys::default();
        build_root(&mut sys, Path::new("/st"), &plan()).unwrap();
        let calls = sys.calls.join("\n");
        assert!(
            calls.contains(
                "-> /st/scratch type=tmpfs flags=0x6 data=size=8388608,mode=0700,uid=1000,gid=1000"
            ),
            "{calls}"
        );
        assert!(
            calls.contains("mount /st/scratch/work -> /st/root/workspace"),
            "{calls}"
        );
        assert!(
            calls.contains("mount /st/scratch/tmp -> /st/root/tmp"),
            "{calls}"
        );
    }

    #[test]
    fn proc_is_fresh_and_sensitive_entries_are_masked() {
        let mut sys = RecordingMountSys::default();
        build_root(&mut sys, Path::new("/st"), &plan()).unwrap();
        let calls = sys.calls.join("\n");
        assert!(
            calls.contains("mount proc -> /st/root/proc type=proc"),
            "{calls}"
        );
        assert!(
            calls.contains("mount /st/root/dev/null -> /st/root/proc/kcore"),
            "{calls}"
        );
        assert!(
            calls.contains("setattr /st/root/proc/sys set=0xf recursive=true"),
            "{calls}"
        );
        assert!(
            !calls
                .lines()
                .any(|l| l.starts_with("mount /sys") || l.starts_with("mount /proc ")),
            "the host's /sys or /proc must never be a source: {calls}"
        );
    }
}
