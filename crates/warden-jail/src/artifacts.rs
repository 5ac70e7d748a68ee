//! Artifacts: the regular files the program left under `/workspace/output`, read by the
//! supervisor through the workspace tmpfs's descriptor after the sandbox is gone.
//!
//! Invariants: every open is `openat2` beneath the workspace with no symlink, magic link or
//! mount crossing (a symlink to /etc/passwd is skipped, never followed: Judge0's
//! CVE-2024-28185 class); only regular files are read; the count, the total size and the depth
//! are capped, and the size is checked before reading (a sparse 5 GB file costs nothing);
//! names that are not UTF-8 are skipped with a reason rather than mangled.

use crate::layout::{OUTPUT_DIR_NAME, SCRATCH_WORK};
use crate::sys;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use warden_types::{Artifact, Limits, SkippedArtifact};

const MAX_DEPTH: usize = 8;
/// Entries looked at in all, whatever their kind: bounds the walk of a folder with 10 000
/// empty files.
const MAX_ENTRIES: usize = 4096;

struct Walk<'a> {
    limits: &'a Limits,
    /// Files as they were before the run (a shared workspace's earlier files are not this
    /// run's artifacts): left out unless changed.
    known: &'a HashSet<FileStamp>,
    artifacts: Vec<Artifact>,
    skipped: Vec<SkippedArtifact>,
    total: u64,
    seen: usize,
}

/// A file's identity and last change: the inode and its ctime, which every write, rename or
/// attribute change moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileStamp {
    pub ino: u64,
    pub ctime_sec: i64,
    pub ctime_nsec: i64,
}

impl FileStamp {
    pub fn of(st: &libc::stat) -> FileStamp {
        FileStamp {
            ino: st.st_ino,
            ctime_sec: st.st_ctime,
            ctime_nsec: st.st_ctime_nsec,
        }
    }
}

/// Collects the artifacts under `<scratch>/work/output`, leaving out the `known` files.
pub fn collect(
    scratch: BorrowedFd<'_>,
    limits: &Limits,
    known: &HashSet<FileStamp>,
) -> (Vec<Artifact>, Vec<SkippedArtifact>) {
    let mut walk = Walk {
        known,
        limits,
        artifacts: Vec::new(),
        skipped: Vec::new(),
        total: 0,
        seen: 0,
    };
    let output = Path::new(SCRATCH_WORK).join(OUTPUT_DIR_NAME);
    if let Ok(dir) = sys::open_beneath(scratch, &output, libc::O_RDONLY | libc::O_DIRECTORY) {
        walk.dir(dir.as_fd(), Path::new(""), 0);
    }
    walk.artifacts.sort_by(|a, b| a.name.cmp(&b.name));
    (walk.artifacts, walk.skipped)
}

impl Walk<'_> {
    fn skip(&mut self, name: &Path, why: impl Into<String>) {
        if self.skipped.len() < 100 {
            self.skipped.push(SkippedArtifact {
                name: name.to_string_lossy().into_owned(),
                why: why.into(),
            });
        }
    }

    fn dir(&mut self, dir: BorrowedFd<'_>, prefix: &Path, depth: usize) {
        // Read from the descriptor: exactly this folder, not a path the program could swap.
        let Ok(mut names) = sys::entry_names(dir) else {
            return;
        };
        names.sort();
        for name in names {
            self.seen += 1;
            let rel: PathBuf = prefix.join(&name);
            if self.seen > MAX_ENTRIES {
                self.skip(
                    &rel,
                    format!("more than {MAX_ENTRIES} entries in the output folder"),
                );
                return;
            }
            let Ok(text) = std::str::from_utf8(name.as_bytes()) else {
                self.skip(&rel, "name is not valid UTF-8");
                continue;
            };
            if let Some(why) = warden_types::artifact_name_refusal(text) {
                let shown = warden_types::printable_name(&rel.to_string_lossy());
                self.skip(Path::new(&shown), why);
                continue;
            }
            let fd = match sys::open_beneath(
                dir,
                Path::new(&name),
                libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
            ) {
                Ok(fd) => fd,
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                    self.skip(&rel, "symlink (not followed)");
                    continue;
                }
                Err(e) => {
                    self.skip(&rel, format!("cannot open: {e}"));
                    continue;
                }
            };
            let Ok(st) = sys::fstat(fd.as_fd()) else {
                continue;
            };
            match st.st_mode & libc::S_IFMT {
                libc::S_IFDIR if depth < MAX_DEPTH => self.dir(fd.as_fd(), &rel, depth + 1),
                libc::S_IFDIR => self.skip(&rel, format!("deeper than {MAX_DEPTH} folders")),
                libc::S_IFREG if self.known.contains(&FileStamp::of(&st)) => {}
                libc::S_IFREG => self.file(fd, &rel, st.st_size as u64),
                _ => self.skip(&rel, "not a regular file"),
            }
        }
    }

    fn file(&mut self, fd: OwnedFd, rel: &Path, size: u64) {
        if self.artifacts.len() >= self.limits.max_artifacts as usize {
            self.skip(
                rel,
                format!("more than {} artifacts", self.limits.max_artifacts),
            );
            return;
        }
        if self.total + size > self.limits.max_artifact_bytes {
            self.skip(
                rel,
                format!(
                    "{size} bytes would pass the artifact cap of {} bytes",
                    self.limits.max_artifact_bytes
                ),
            );
            return;
        }
        let mut bytes = Vec::with_capacity(size as usize);
        let mut file = std::fs::File::from(fd);
        // Read at most what was announced (+1 to notice growth, which cannot happen once the
        // sandbox is gone, but costs nothing to check).
        if file
            .by_ref()
            .take(size + 1)
            .read_to_end(&mut bytes)
            .is_err()
            || bytes.len() as u64 != size
        {
            self.skip(rel, "changed while being read");
            return;
        }
        self.total += size;
        let name = rel.to_string_lossy().into_owned();
        // Hash and MIME type as every backend makes them.
        self.artifacts
            .push(warden_engine::shape::artifact(name, bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits(max_artifacts: u32, max_bytes: u64) -> Limits {
        Limits {
            timeout: Duration::from_secs(1),
            memory_mb: 1,
            max_pids: 1,
            cpus: 1.0,
            max_output_bytes: 1,
            max_file_size_bytes: 1,
            workspace_mb: 1,
            max_artifacts,
            max_artifact_bytes: max_bytes,
        }
    }

    fn collect_all(dir: BorrowedFd<'_>, limits: &Limits) -> (Vec<Artifact>, Vec<SkippedArtifact>) {
        collect(dir, limits, &HashSet::new())
    }

    #[test]
    fn known_files_are_left_out_unless_changed() {
        let (tmp, dir) = scratch();
        let old = tmp.path().join("work/output/old.txt");
        let changed = tmp.path().join("work/output/changed.txt");
        std::fs::write(&old, "old").unwrap();
        std::fs::write(&changed, "v1").unwrap();
        let stamp = |p: &Path| {
            let f = std::fs::File::open(p).unwrap();
            FileStamp::of(&sys::fstat(f.as_fd()).unwrap())
        };
        let known = HashSet::from([stamp(&old), stamp(&changed)]);
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&changed, "v2").unwrap();
        std::fs::write(tmp.path().join("work/output/sub/new.txt"), "new").unwrap();
        let (arts, skipped) = collect(dir.as_fd(), &limits(10, 1000), &known);
        assert!(skipped.is_empty(), "{skipped:?}");
        assert_eq!(
            arts.iter().map(|a| a.name.as_str()).collect::<Vec<_>>(),
            ["changed.txt", "sub/new.txt"]
        );
    }

    fn scratch() -> (tempfile::TempDir, std::fs::File) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("work/output/sub")).unwrap();
        let dir = std::fs::File::open(tmp.path()).unwrap();
        (tmp, dir)
    }

    #[test]
    fn regular_files_come_back_with_hash_and_type() {
        let (tmp, dir) = scratch();
        std::fs::write(tmp.path().join("work/output/a.csv"), "x,y\n1,2\n").unwrap();
        std::fs::write(tmp.path().join("work/output/sub/b.bin"), [0u8, 255, 1]).unwrap();
        let (arts, skipped) = collect_all(dir.as_fd(), &limits(10, 1000));
        assert!(skipped.is_empty(), "{skipped:?}");
        assert_eq!(arts.len(), 2);
        assert_eq!(arts[0].name, "a.csv");
        assert_eq!(arts[0].mime_type, "text/csv");
        assert_eq!(
            arts[0].sha256,
            "81bf9fa83c6f7f151bd491a98cd7d933de3965289e3ebd77c6c425f7eaa16392"
        );
        assert_eq!(arts[1].name, "sub/b.bin");
        assert_eq!(arts[1].mime_type, "application/octet-stream");
    }

    #[test]
    fn symlinks_are_never_followed() {
        let (tmp, dir) = scratch();
        std::os::unix::fs::symlink("/etc/passwd", tmp.path().join("work/output/passwd")).unwrap();
        std::os::unix::fs::symlink("/etc", tmp.path().join("work/output/etc")).unwrap();
        let (arts, skipped) = collect_all(dir.as_fd(), &limits(10, 1 << 20));
        assert!(arts.is_empty(), "{arts:?}");
        assert_eq!(skipped.len(), 2);
        assert!(
            skipped.iter().all(|s| s.why.contains("symlink")),
            "{skipped:?}"
        );
    }

    #[test]
    fn output_folder_itself_as_symlink_is_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("work")).unwrap();
        std::os::unix::fs::symlink("/etc", tmp.path().join("work/output")).unwrap();
        let dir = std::fs::File::open(tmp.path()).unwrap();
        let (arts, _) = collect_all(dir.as_fd(), &limits(10, 1 << 20));
        assert!(arts.is_empty());
    }

    #[test]
    fn count_and_size_caps_hold() {
        let (tmp, dir) = scratch();
        for i in 0..5 {
            std::fs::write(tmp.path().join(format!("work/output/{i}.txt")), "12345").unwrap();
        }
        let (arts, skipped) = collect_all(dir.as_fd(), &limits(3, 1000));
        assert_eq!(arts.len(), 3);
        assert_eq!(skipped.len(), 2);
        let (arts, _) = collect_all(dir.as_fd(), &limits(10, 12));
        assert_eq!(arts.len(), 2);
    }

    #[test]
    fn sparse_huge_files_are_skipped_without_reading() {
        let (tmp, dir) = scratch();
        let f = std::fs::File::create(tmp.path().join("work/output/huge")).unwrap();
        f.set_len(5 << 30).unwrap();
        let (arts, skipped) = collect_all(dir.as_fd(), &limits(10, 1 << 20));
        assert!(arts.is_empty());
        assert!(skipped[0].why.contains("artifact cap"), "{skipped:?}");
    }
}
