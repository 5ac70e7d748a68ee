//! Builds the sandbox's root from the plan's `MountOp`s, through the `MountSys` trait so the
//! order and flags are unit-tested with a recording fake, without root.
//!
//! Invariants: every bind of a host path is recursive and made read-only, nosuid and nodev
//! (recursively, with `mount_setattr`, together with the root itself) before anything writable
//! is mounted; procfs is mounted before the old root goes away (the kernel only allows a new
//! procfs while a fully visible one is in the namespace).

use crate::layout::{OUTPUT_DIR_NAME, SCRATCH_WORK};
use crate::plan::{JailPlan, MountOp, NetAttachment};
use crate::sys;
use std::collections::HashSet;
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
    /// One folder; its parent exists.
    fn create_dir(&mut self, path: &Path, mode: u32) -> io::Result<()>;
    fn write_file(&mut self, path: &Path, contents: &[u8], mode: u32) -> io::Result<()>;
    fn symlink(&mut self, target: &Path, link: &Path) -> io::Result<()>;
    fn is_dir(&self, path: &Path) -> bool;
    /// Mounts a clone of the (detached) mount behind descriptor `fd` at `target`.
    fn attach_clone(&mut self, fd: i32, target: &Path) -> io::Result<()>;
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

    fn create_dir(&mut self, path: &Path, mode: u32) -> io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new().mode(mode).create(path)
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

    fn attach_clone(&mut self, fd: i32, target: &Path) -> io::Result<()> {
        // SAFETY: the plan names a descriptor the helper inherited and keeps open for the run.
        let tree = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        sys::attach_clone(tree, target)
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
/// side by side and builds the root in four phases, each with as few system calls as it can
/// (this is on every sandbox's start-up path):
/// 1. everything written into the root tmpfs: folders, mount points, symlinks, small files and
///    the code;
/// 2. the host paths, bound recursively;
/// 3. one recursive `mount_setattr`: the root and every host bind read-only, nosuid, nodev;
/// 4. what goes on top: devices, /dev/shm, procfs and its masks, the workspace binds.
///
/// The caller pivots into [`root_dir`] afterwards; the staging tmpfs and the workspace's own
/// mount point go away with the old root in one unmount, while the workspace stays alive
/// through its binds.
pub fn build_root(
    sys: &mut dyn MountSys,
    staging: &Path,
    plan: &JailPlan,
    network: Option<&NetAttachment>,
) -> Result<(), MountError> {
    let tmpfs = Some(Path::new("tmpfs"));
    let flags = libc::MS_NOSUID | libc::MS_NODEV;
    sys.mount(
        tmpfs,
        staging,
        Some("tmpfs"),
        flags,
        Some("size=65536,mode=0755"),
    )
    .map_err(at("mount staging tmpfs", staging))?;
    let root = root_dir(staging);
    let scratch = scratch_dir(staging);
    for dir in [&root, &scratch] {
        sys.create_dir(dir, 0o755)
            .map_err(at("create folder", dir))?;
    }
    // The root tmpfs holds only mount points, a few small files and the code; a gated run's
    // has the same size whatever its code (see `crate::gate`).
    let code_room = if plan.gated {
        crate::layout::GATED_CODE_ROOM.max(plan.code.len())
    } else {
        plan.code.len()
    };
    let root_size = code_room as u64 + 1024 * 1024;
    sys.mount(
        tmpfs,
        &root,
        Some("tmpfs"),
        flags,
        Some(&format!("size={root_size},mode=0755")),
    )
    .map_err(at("mount root tmpfs", &root))?;
    let scratch_data = format!(
        "size={},mode=0700,uid={},gid={}",
        plan.limits.workspace_mb * 1024 * 1024,
        plan.ids.inside_uid,
        plan.ids.inside_gid
    );
    match plan.shared_workspace_fd {
        Some(fd) => sys
            .attach_clone(fd, &scratch)
            .map_err(at("attach the sandbox's workspace", &scratch))?,
        None => sys
            .mount(tmpfs, &scratch, Some("tmpfs"), flags, Some(&scratch_data))
            .map_err(at("mount workspace tmpfs", &scratch))?,
    }

    let mut dirs = Dirs {
        made: HashSet::from([root.clone()]),
    };
    for op in &plan.mounts {
        prepare(sys, &mut dirs, &root, &scratch, network, op)?;
    }
    let code = under(&root, &plan.code_path);
    dirs.parent_of(sys, &code)?;
    // A gated run's code is written by the supervisor (`crate::gate`), last, as here.
    if !plan.gated {
        sys.write_file(&code, plan.code.as_bytes(), 0o444)
            .map_err(at("write code", &plan.code_path))?;
    }

    for op in &plan.mounts {
        if let MountOp::BindReadOnly { source, dest } = op {
            sys.mount(Some(source), &under(&root, dest), None, BIND_FLAGS, None)
                .map_err(at("bind", source))?;
        }
    }
    sys.mount_setattr(&root, RO_ATTRS, true)
        .map_err(at("make the root read-only", &root))?;

    for op in &plan.mounts {
        mount_on_top(sys, &root, &scratch, plan, op)?;
    }
    let output = scratch.join(SCRATCH_WORK).join(OUTPUT_DIR_NAME);
    // A shared workspace keeps its folders from run to run (the program may also have
    // removed or replaced the output folder: then it simply has none).
    exists_ok(sys.create_dir(&output, 0o755)).map_err(at("create output folder", &output))?;
    Ok(())
}

fn exists_ok(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

/// Folders known to exist, so each is created once and nothing is stat'ed twice.
struct Dirs {
    made: HashSet<PathBuf>,
}

impl Dirs {
    fn dir(&mut self, sys: &mut dyn MountSys, path: &Path, mode: u32) -> Result<(), MountError> {
        if self.made.contains(path) {
            return Ok(());
        }
        if let Some(parent) = path.parent() {
            self.dir(sys, parent, 0o755)?;
        }
        sys.create_dir(path, mode)
            .map_err(at("create folder", path))?;
        self.made.insert(path.to_owned());
        Ok(())
    }

    fn parent_of(&mut self, sys: &mut dyn MountSys, path: &Path) -> Result<(), MountError> {
        match path.parent() {
            Some(parent) => self.dir(sys, parent, 0o755),
            None => Ok(()),
        }
    }

    /// An empty file or folder to mount `source` on.
    fn mount_point(
        &mut self,
        sys: &mut dyn MountSys,
        source_is_dir: bool,
        dest: &Path,
    ) -> Result<(), MountError> {
        if source_is_dir {
            self.dir(sys, dest, 0o755)
        } else {
            self.parent_of(sys, dest)?;
            sys.write_file(dest, b"", 0o444)
                .map_err(at("create mount point", dest))
        }
    }
}

/// Phase 1: what each op needs written into the root before it turns read-only.
fn prepare(
    sys: &mut dyn MountSys,
    dirs: &mut Dirs,
    root: &Path,
    scratch: &Path,
    network: Option<&NetAttachment>,
    op: &MountOp,
) -> Result<(), MountError> {
    match op {
        MountOp::BindReadOnly { source, dest } => {
            let is_dir = sys.is_dir(source);
            dirs.mount_point(sys, is_dir, &under(root, dest))
        }
        MountOp::BindDevice { dest, .. } => dirs.mount_point(sys, false, &under(root, dest)),
        MountOp::Symlink { target, dest } => {
            let link = under(root, dest);
            dirs.parent_of(sys, &link)?;
            sys.symlink(target, &link).map_err(at("symlink", dest))
        }
        MountOp::Dir { dest, mode } => dirs.dir(sys, &under(root, dest), *mode),
        MountOp::File {
            dest,
            contents,
            mode,
        } => {
            let path = under(root, dest);
            dirs.parent_of(sys, &path)?;
            sys.write_file(&path, contents.as_bytes(), *mode)
                .map_err(at("write file", dest))
        }
        MountOp::ImportGuard { dir, delivery } => {
            use warden_engine::import_guard::{SOURCE, bytecode};
            let folder = under(root, &delivery.folder(dir));
            dirs.dir(sys, &folder, 0o755)?;
            let source = folder.join(delivery.file_name());
            sys.write_file(&source, SOURCE.as_bytes(), 0o444)
                .map_err(at("write file", &source))?;
            // Compiled for the interpreter this binary was built beside: an interpreter of
            // another version does not look for it (another cache tag) or refuses it (another
            // magic number), and compiles the source as without it.
            if let Some((tag, pyc)) = bytecode() {
                let cache = folder.join("__pycache__");
                dirs.dir(sys, &cache, 0o755)?;
                let compiled = cache.join(delivery.bytecode_name(tag));
                sys.write_file(&compiled, pyc, 0o444)
                    .map_err(at("write file", &compiled))?;
            }
            Ok(())
        }
        MountOp::ResolvConf { dest } => {
            // Planned for a networked sandbox only, whose helper always attaches its link:
            // without the attachment, no resolver to name, and the sandbox is not built.
            let network = network.ok_or_else(|| MountError {
                step: "write resolv.conf",
                path: dest.clone(),
                source: io::Error::other("the sandbox's network was not attached"),
            })?;
            let path = under(root, dest);
            dirs.parent_of(sys, &path)?;
            sys.write_file(&path, network.resolv_conf.as_bytes(), 0o644)
                .map_err(at("write file", dest))
        }
        MountOp::GatewayCa { dest } => {
            let bundle = network
                .and_then(|n| n.ca_bundle.as_ref())
                .ok_or_else(|| MountError {
                    step: "write the CA bundle",
                    path: dest.clone(),
                    source: io::Error::other("the sandbox's egress gateway has no CA"),
                })?;
            let path = under(root, dest);
            dirs.parent_of(sys, &path)?;
            sys.write_file(&path, bundle.as_bytes(), 0o644)
                .map_err(at("write file", dest))
        }
        MountOp::Proc { dest } | MountOp::Tmpfs { dest, .. } => {
            dirs.dir(sys, &under(root, dest), 0o755)
        }
        MountOp::BindScratch { subdir, dest } => {
            let source = scratch.join(subdir);
            exists_ok(sys.create_dir(&source, 0o700)).map_err(at("create folder", &source))?;
            dirs.dir(sys, &under(root, dest), 0o755)
        }
        // Inside procfs, which is mounted in phase 4.
        MountOp::MaskFile { .. } | MountOp::MaskDir { .. } | MountOp::ReadOnly { .. } => Ok(()),
    }
}

/// Phase 4: the mounts that go on top of the read-only root.
fn mount_on_top(
    sys: &mut dyn MountSys,
    root: &Path,
    scratch: &Path,
    plan: &JailPlan,
    op: &MountOp,
) -> Result<(), MountError> {
    // Entries of procfs that this kernel lacks are simply not there to hide.
    let missing_ok = |r: io::Result<()>| match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    };
    match op {
        // Device binds keep the host's nosuid and need no noexec: execve only runs regular
        // files, and a device node is never one.
        MountOp::BindDevice { source, dest } => sys
            .mount(Some(source), &under(root, dest), None, libc::MS_BIND, None)
            .map_err(at("bind device", source)),
        MountOp::Proc { dest } => sys
            .mount(
                Some(Path::new("proc")),
                &under(root, dest),
                Some("proc"),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                None,
            )
            .map_err(at("mount proc", dest)),
        MountOp::Tmpfs {
            dest,
            size_bytes,
            mode,
        } => {
            let data = format!(
                "size={size_bytes},mode={mode:o},uid={},gid={}",
                plan.ids.inside_uid, plan.ids.inside_gid
            );
            sys.mount(
                Some(Path::new("tmpfs")),
                &under(root, dest),
                Some("tmpfs"),
                libc::MS_NOSUID | libc::MS_NODEV,
                Some(&data),
            )
            .map_err(at("mount tmpfs", dest))
        }
        MountOp::BindScratch { subdir, dest } => sys
            .mount(
                Some(&scratch.join(subdir)),
                &under(root, dest),
                None,
                libc::MS_BIND,
                None,
            )
            .map_err(at("bind workspace", dest)),
        MountOp::MaskFile { dest } => missing_ok(sys.mount(
            Some(&under(root, Path::new("/dev/null"))),
            &under(root, dest),
            None,
            libc::MS_BIND,
            None,
        ))
        .map_err(at("mask", dest)),
        MountOp::MaskDir { dest } => missing_ok(sys.mount(
            Some(Path::new("tmpfs")),
            &under(root, dest),
            Some("tmpfs"),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some("size=0,mode=0555"),
        ))
        .map_err(at("mask", dest)),
        MountOp::ReadOnly { dest } => {
            let target = under(root, dest);
            match sys.mount(Some(&target), &target, None, BIND_FLAGS, None) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                other => other.map_err(at("bind", dest))?,
            }
            sys.mount_setattr(&target, RO_ATTRS | sys::MOUNT_ATTR_NOEXEC, true)
                .map_err(at("make read-only", dest))
        }
        MountOp::BindReadOnly { .. }
        | MountOp::Symlink { .. }
        | MountOp::Dir { .. }
        | MountOp::File { .. }
        | MountOp::ImportGuard { .. }
        | MountOp::ResolvConf { .. }
        | MountOp::GatewayCa { .. } => Ok(()),
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
        fn create_dir(&mut self, path: &Path, mode: u32) -> io::Result<()> {
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
        fn attach_clone(&mut self, fd: i32, target: &Path) -> io::Result<()> {
            self.calls
                .push(format!("attach fd {fd} -> {}", target.display()));
            self.made.insert(target.to_owned());
            Ok(())
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
        plan_with(None)
    }

    fn plan_with(network: Option<warden_net::NetRequest>) -> JailPlan {
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
                host: crate::plan::HostIds::Lease(Default::default()),
            },
            extra_env: vec![],
            shared_workspace_fd: None,
            network,
        })
        .unwrap()
    }

    fn networked_plan() -> JailPlan {
        let request: warden_net::NetRequest = serde_json::from_value(serde_json::json!({
            "egress": {}, "pool": "10.213.0.0/16", "upstream_dns": "192.0.2.53:53"
        }))
        .unwrap();
        plan_with(Some(request))
    }

    #[test]
    fn brokered_secrets_give_placeholders_a_ca_bundle_and_init_never_the_value() {
        let request: warden_net::NetRequest = serde_json::from_value(serde_json::json!({
            "egress": {"gateway": {"allow": ["api.test"]}, "secrets": ["api"]},
            "pool": "10.213.0.0/16", "upstream_dns": "192.0.2.53:53",
            "secrets": [{"name": "api", "env": "API_KEY", "placeholder": "WARDEN_SECRET_API_X",
                         "value": "real", "hosts": ["api.test"], "header": "authorization"}],
            "upstream_ca_pem": "-----BEGIN CERTIFICATE-----"
        }))
        .unwrap();
        let p = plan_with(Some(request));
        assert_eq!(
            p.mounts.last(),
            Some(&MountOp::GatewayCa {
                dest: crate::plan::GATEWAY_CA_BUNDLE.into()
            })
        );
        let env: std::collections::BTreeMap<_, _> = p.env.iter().cloned().collect();
        assert_eq!(env["API_KEY"], "WARDEN_SECRET_API_X");
        for var in crate::plan::CA_BUNDLE_VARIABLES {
            assert_eq!(env[*var], crate::plan::GATEWAY_CA_BUNDLE);
        }
        assert!(!serde_json::to_string(&p.env).unwrap().contains("real"));
        let for_init = serde_json::to_string(&*p.for_init()).unwrap();
        assert!(!for_init.contains("\"real\""), "{for_init}");
        assert!(!for_init.contains("BEGIN CERTIFICATE"), "{for_init}");
        // Without the helper's bundle, the sandbox is not built.
        let mut sys = RecordingMountSys::default();
        assert!(build_root(&mut sys, Path::new("/st"), &p, None).is_err());
    }

    #[test]
    fn a_networked_sandbox_gets_the_resolv_conf_its_helper_attached() {
        let p = networked_plan();
        assert_eq!(
            p.mounts.last(),
            Some(&MountOp::ResolvConf {
                dest: "/etc/resolv.conf".into()
            })
        );
        let attachment = NetAttachment {
            interface: serde_json::from_value(serde_json::json!({
                "address": "10.213.0.2", "prefix": 30, "gateway": "10.213.0.1",
                "address6": "fd00::2", "prefix6": 126, "gateway6": "fd00::1"
            }))
            .unwrap(),
            resolv_conf: "nameserver 10.213.0.1\n".into(),
            ca_bundle: None,
        };
        let mut sys = RecordingMountSys::default();
        build_root(&mut sys, Path::new("/st"), &p, Some(&attachment)).unwrap();
        let calls = sys.calls.join("\n");
        assert!(
            calls.contains("write /st/root/etc/resolv.conf 644 (22 bytes)"),
            "{calls}"
        );
        // Without its attachment the sandbox is not built (fail closed).
        let mut sys = RecordingMountSys::default();
        let err = build_root(&mut sys, Path::new("/st"), &p, None).unwrap_err();
        assert_eq!(err.step, "write resolv.conf");
    }

    #[test]
    fn a_shared_workspace_is_attached_instead_of_a_fresh_tmpfs() {
        let mut sys = RecordingMountSys::default();
        let mut p = plan();
        p.shared_workspace_fd = Some(3);
        build_root(&mut sys, Path::new("/st"), &p, None).unwrap();
        let calls = sys.calls.join("\n");
        assert!(calls.contains("attach fd 3 -> /st/scratch"), "{calls}");
        assert!(!calls.contains("-> /st/scratch type=tmpfs"), "{calls}");
        assert!(
            calls.contains("mount /st/scratch/work -> /st/root/workspace"),
            "{calls}"
        );
    }

    #[test]
    fn host_binds_are_made_read_only_with_the_root_before_anything_writable() {
        let mut sys = RecordingMountSys::default();
        build_root(&mut sys, Path::new("/st"), &plan(), None).unwrap();
        let calls = &sys.calls;
        let pos = |needle: &str| {
            calls
                .iter()
                .position(|c| c.starts_with(needle))
                .unwrap_or_else(|| panic!("no {needle:?} in {calls:#?}"))
        };
        let ro = pos("setattr /st/root set=0x7 recursive=true");
        assert!(pos("mount /usr -> /st/root/usr type=- flags=0x5000") < ro);
        assert!(pos("mount /etc/ld.so.cache -> /st/root/etc/ld.so.cache") < ro);
        for writable in [
            "mount tmpfs -> /st/root/dev/shm",
            "mount proc -> /st/root/proc",
            "mount /st/scratch/work -> /st/root/workspace",
            "mount /st/scratch/tmp -> /st/root/tmp",
            "mount /dev/null -> /st/root/dev/null",
        ] {
            assert!(
                pos(writable) > ro,
                "{writable} mounted before the root is read-only"
            );
        }
        // Nothing is written into the root once it is read-only.
        assert!(
            calls[ro..]
                .iter()
                .all(|c| !(c.starts_with("write /st/root") || c.starts_with("mkdir /st/root"))),
            "{calls:#?}"
        );
    }

    #[test]
    fn root_is_a_tmpfs_and_holds_the_read_only_code() {
        let mut sys = RecordingMountSys::default();
        build_root(&mut sys, Path::new("/st"), &plan(), None).unwrap();
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
        assert!(
            sys.calls
                .contains(&"write /st/root/code/main.py 444 (9 bytes)".to_owned())
        );
        assert_eq!(
            sys.calls.last().unwrap(),
            "mkdir /st/scratch/work/output 755"
        );
    }

    #[test]
    fn a_gated_root_leaves_the_code_to_the_supervisor_and_has_one_size_whatever_the_code() {
        let guard = warden_engine::import_guard::ImportGuard {
            allowed: vec!["json".into()],
        };
        let root_mounts = |code: &str| {
            let mut plan = plan();
            plan.code = code.into();
            plan.add_import_guard(&guard, None);
            assert!(plan.gated);
            assert!(
                plan.env
                    .contains(&("WARDEN_IMPORT_GUARD_START".into(), "5".into()))
            );
            let mut sys = RecordingMountSys::default();
            build_root(&mut sys, Path::new("/st"), &plan, None).unwrap();
            assert!(
                !sys.calls.iter().any(|c| c.contains("/code/main.py")),
                "{:#?}",
                sys.calls
            );
            sys.calls
                .into_iter()
                .find(|c| c.starts_with("mount tmpfs -> /st/root type=tmpfs"))
                .unwrap()
        };
        // A pooled sandbox's root is built before its code is known.
        assert_eq!(root_mounts(""), root_mounts("print(1)\n"));
        // The guard's files come from this binary, not from the plan; where they go depends
        // on the interpreter init will run: named by its version (a file `python3.12` here),
        // in its user site-packages as `usercustomize`; otherwise on `PYTHONPATH` as
        // `sitecustomize`.
        let bin = tempfile::tempdir().unwrap();
        std::fs::write(bin.path().join("python3.12"), "").unwrap();
        let versioned = bin.path().join("python3.12").display().to_string();
        let cases = [
            (
                versioned.as_str(),
                "/warden/import-guard/lib/python3.12/site-packages",
                "usercustomize",
                ("PYTHONUSERBASE", "/warden/import-guard"),
            ),
            (
                "/nowhere/python",
                "/warden/import-guard",
                "sitecustomize",
                ("PYTHONPATH", "/warden/import-guard"),
            ),
        ];
        for (interpreter, folder, module, (var, value)) in cases {
            let mut guarded = plan();
            guarded.argv[0] = interpreter.into();
            guarded.add_import_guard(&guard, None);
            let encoded = serde_json::to_vec(&guarded).unwrap();
            assert!(encoded.len() < 4096, "{} bytes", encoded.len());
            assert!(
                guarded.env.contains(&(var.into(), value.into())),
                "{interpreter}: {:?}",
                guarded.env
            );
            let mut sys = RecordingMountSys::default();
            build_root(&mut sys, Path::new("/st"), &guarded, None).unwrap();
            let source = warden_engine::import_guard::SOURCE.len();
            let written = format!("write /st/root{folder}/{module}.py 444 ({source} bytes)");
            assert!(sys.calls.contains(&written), "{written}: {:#?}", sys.calls);
            if let Some((tag, pyc)) = warden_engine::import_guard::bytecode() {
                let written = format!(
                    "write /st/root{folder}/__pycache__/{module}.{tag}.pyc 444 ({} bytes)",
                    pyc.len()
                );
                assert!(sys.calls.contains(&written), "{written}: {:#?}", sys.calls);
            }
        }
        // A context's driver, and a program larger than a gated root's room, are not gated.
        let mut session = plan();
        session.add_import_guard(&guard, Some("/code/warden_driver.py"));
        let mut large = plan();
        large.code = "#".repeat(crate::layout::GATED_CODE_ROOM + 1);
        large.add_import_guard(&guard, None);
        assert!(!session.gated && !large.gated);
    }

    #[test]
    fn workspace_tmpfs_is_capped_and_owned_by_the_sandbox_user() {
        let mut sys = RecordingMountSys::default();
        build_root(&mut sys, Path::new("/st"), &plan(), None).unwrap();
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
        build_root(&mut sys, Path::new("/st"), &plan(), None).unwrap();
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
