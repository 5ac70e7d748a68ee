//! Artifacts from a tar stream of the output folder, for backends that can only read the
//! sandbox's files through an archive made inside it (docker, Kubernetes).
//!
//! Invariants (the jail's promises, `warden-jail/src/artifacts.rs`): only regular files become
//! artifacts; symlinks, hard links, devices and FIFOs are skipped with a reason and never
//! followed; names are relative to the output folder, `/`-separated, without `.` or `..`,
//! valid UTF-8, without control characters, and at most [`MAX_DEPTH`] folders deep; at most
//! [`MAX_ENTRIES`] entries are looked at and [`MAX_SKIPPED`] skipped ones recorded; the count
//! and total size caps of the limits hold, and a file larger than the whole size cap is never
//! read. The caps apply in the jail's order (folder by folder, names sorted), not the
//! archive's, so every backend returns the same files; artifacts come back sorted by name. The
//! archive is untrusted input: a malformed or cut one ends the walk, keeping the files read
//! whole before, and one skipped entry says so.

use std::collections::HashSet;
use std::io::Read;
use warden_types::{Artifact, Limits, SkippedArtifact};

/// Folders deeper than this are not entered.
pub const MAX_DEPTH: usize = 8;
/// Entries looked at in all, whatever their kind: bounds the walk of a folder with 10 000
/// empty files.
pub const MAX_ENTRIES: usize = 4096;
/// Skipped entries recorded at most.
pub const MAX_SKIPPED: usize = 100;

/// The artifacts of a run and the files left out, with why.
#[derive(Debug, Default, PartialEq)]
pub struct Collected {
    pub artifacts: Vec<Artifact>,
    pub skipped: Vec<SkippedArtifact>,
}

impl Collected {
    fn skip(&mut self, name: &str, why: impl Into<String>) {
        if self.skipped.len() < MAX_SKIPPED {
            self.skipped.push(SkippedArtifact {
                name: name.to_owned(),
                why: why.into(),
            });
        }
    }
}

/// What the archive holds under one name, before the caps pick the artifacts.
enum Found {
    File(Vec<u8>),
    /// A regular file larger than the whole size cap: its bytes are not read.
    TooBig(u64),
    Skipped(String),
}

/// Turns `archive`, a tar stream of the output folder whose member names are `root/…` (`.` for
/// `tar -C output -c .`, `output` for `tar -C workspace -c output`), into artifacts.
/// `complete` is false when the caller stopped reading the stream at its size cap: what could
/// not be read is then reported as one skipped entry.
pub fn artifacts_from_tar(
    archive: &[u8],
    root: &str,
    limits: &Limits,
    complete: bool,
) -> Collected {
    let (found, ended_early) = walk(archive, root, limits);
    let mut out = Collected::default();
    let mut total = 0u64;
    for (name, found) in found {
        let size = match &found {
            Found::Skipped(why) => {
                out.skip(&name, why.as_str());
                continue;
            }
            Found::File(bytes) => bytes.len() as u64,
            Found::TooBig(size) => *size,
        };
        if out.artifacts.len() >= limits.max_artifacts as usize {
            out.skip(
                &name,
                format!("more than {} artifacts", limits.max_artifacts),
            );
            continue;
        }
        let Found::File(bytes) = found else {
            out.skip(&name, too_big(size, limits));
            continue;
        };
        if total.saturating_add(size) > limits.max_artifact_bytes {
            out.skip(&name, too_big(size, limits));
            continue;
        }
        total += size;
        out.artifacts.push(super::artifact(name, bytes));
    }
    if !complete {
        out.skip(
            "(rest of the output folder)",
            "the output folder holds more than the artifact caps allow; the rest was not read",
        );
    } else if ended_early {
        out.skip(
            "(archive)",
            "the output folder's archive is malformed or ended early",
        );
    }
    out.artifacts.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn too_big(size: u64, limits: &Limits) -> String {
    format!(
        "{size} bytes would pass the artifact cap of {} bytes",
        limits.max_artifact_bytes
    )
}

/// Reads the archive's entries in the jail's walk order; true when an entry was malformed or
/// cut short.
fn walk(archive: &[u8], root: &str, limits: &Limits) -> (Vec<(String, Found)>, bool) {
    let mut found = Vec::new();
    let mut deep_folders = HashSet::new();
    let mut seen = 0usize;
    let mut ended_early = false;
    let mut tar = tar::Archive::new(archive);
    let Ok(entries) = tar.entries() else {
        return (found, true);
    };
    for entry in entries {
        let Ok(mut entry) = entry else {
            ended_early = true;
            break;
        };
        let raw = entry.path_bytes().into_owned();
        let raw = match String::from_utf8(raw) {
            Ok(raw) => raw,
            Err(e) => {
                let lossy = String::from_utf8_lossy(e.as_bytes());
                let why = "name is not valid UTF-8".to_owned();
                found.push((shown_name(&lossy, root), Found::Skipped(why)));
                continue;
            }
        };
        if let Some(why) = warden_types::artifact_name_refusal(&raw) {
            found.push((shown_name(&raw, root), Found::Skipped(why.into())));
            continue;
        }
        let name = match relative_name(&raw, root) {
            Name::Root => continue,
            Name::Outside => {
                found.push((raw, Found::Skipped("name outside the output folder".into())));
                continue;
            }
            Name::Dots => {
                found.push((raw, Found::Skipped("name has `.` or `..`".into())));
                continue;
            }
            Name::Relative(name) => name,
        };
        let kind = entry.header().entry_type();
        // The jail never enters a folder past the depth cap: it reports that folder once and
        // sees nothing inside it.
        if let Some(folder) = deep_folder(&name, kind.is_dir()) {
            if deep_folders.insert(folder.clone()) {
                let why = format!("deeper than {MAX_DEPTH} folders");
                found.push((folder, Found::Skipped(why)));
            }
            continue;
        }
        seen += 1;
        if seen > MAX_ENTRIES {
            let why = format!("more than {MAX_ENTRIES} entries in the output folder");
            found.push((name, Found::Skipped(why)));
            break;
        }
        let why = match kind {
            tar::EntryType::Directory => continue,
            tar::EntryType::Regular | tar::EntryType::Continuous => None,
            tar::EntryType::Symlink => Some("symlink (not followed)"),
            tar::EntryType::Link => Some("hard link (not followed)"),
            _ => Some("not a regular file"),
        };
        if let Some(why) = why {
            found.push((name, Found::Skipped(why.into())));
            continue;
        }
        let Ok(size) = entry.header().size() else {
            ended_early = true;
            break;
        };
        if size > limits.max_artifact_bytes {
            found.push((name, Found::TooBig(size)));
            continue;
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        if entry.read_to_end(&mut bytes).is_err() || bytes.len() as u64 != size {
            ended_early = true;
            break;
        }
        found.push((name, Found::File(bytes)));
    }
    // Folder by folder with names sorted is the order of the names' components.
    found.sort_by(|(a, _), (b, _)| a.split('/').cmp(b.split('/')));
    (found, ended_early)
}

/// A member name read against the output folder's root.
#[derive(Debug, PartialEq)]
enum Name {
    /// The output folder itself.
    Root,
    /// Absolute or in another folder.
    Outside,
    /// Has a `.` or `..` component below the root.
    Dots,
    /// The path below the root, `/`-separated.
    Relative(String),
}

/// `./a/b.txt` or `a/b.txt` (root `.`), `output/a/b.txt` (root `output`) → `a/b.txt`.
fn relative_name(raw: &str, root: &str) -> Name {
    let below_root = raw
        .strip_prefix(root)
        .filter(|rest| rest.is_empty() || rest.starts_with('/'));
    let rest = match below_root {
        Some(rest) => rest,
        // `tar -c .` names members `./a`, other tars `a`.
        None if root == "." && !raw.starts_with('/') => raw,
        None => return Name::Outside,
    };
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    if parts.is_empty() {
        Name::Root
    } else if parts.iter().any(|p| matches!(*p, "." | "..")) {
        Name::Dots
    } else {
        Name::Relative(parts.join("/"))
    }
}

/// A refused name as a skipped entry shows it: below the root where it is, control characters
/// escaped.
fn shown_name(raw: &str, root: &str) -> String {
    match relative_name(raw, root) {
        Name::Relative(name) => warden_types::printable_name(&name),
        _ => warden_types::printable_name(raw),
    }
}

/// The folder past the depth cap that holds `name` (or is it), if there is one.
fn deep_folder(name: &str, is_dir: bool) -> Option<String> {
    let parts: Vec<&str> = name.split('/').collect();
    let folders = if is_dir { parts.len() } else { parts.len() - 1 };
    (folders > MAX_DEPTH).then(|| parts[..=MAX_DEPTH].join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};
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

    /// An archive as `tar -C /workspace -c output` makes it (the folder's own entry first).
    fn archive(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        folder(&mut b, "output/");
        build(&mut b);
        b.into_inner().unwrap()
    }

    fn folder(b: &mut tar::Builder<Vec<u8>>, name: &str) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_size(0);
        h.set_mode(0o755);
        b.append_data(&mut h, name, std::io::empty()).unwrap();
    }

    fn file(b: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, name, data).unwrap();
    }

    fn link(b: &mut tar::Builder<Vec<u8>>, kind: tar::EntryType, name: &str, target: &str) {
        let mut h = tar::Header::new_gnu();
        h.set_size(0);
        h.set_entry_type(kind);
        b.append_link(&mut h, name, target).unwrap();
    }

    /// A member name that `append_data` would refuse (`..`, absolute, not UTF-8).
    fn raw_file(b: &mut tar::Builder<Vec<u8>>, name: &[u8], data: &[u8]) {
        let mut h = tar::Header::new_old();
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        b.append(&h, data).unwrap();
    }

    fn names(c: &Collected) -> Vec<&str> {
        c.artifacts.iter().map(|a| a.name.as_str()).collect()
    }

    #[test]
    fn files_come_back_with_hash_and_type() {
        let a = archive(|b| {
            file(b, "output/a.csv", b"x,y\n1,2\n");
            file(b, "output/sub/b.bin", &[0, 255, 1]);
            file(b, "output/PLOT.PNG", b"upper case");
        });
        let c = artifacts_from_tar(&a, "output", &limits(10, 1000), true);
        assert!(c.skipped.is_empty(), "{:?}", c.skipped);
        assert_eq!(names(&c), ["PLOT.PNG", "a.csv", "sub/b.bin"]);
        assert_eq!(c.artifacts[0].mime_type, "image/png");
        assert_eq!(c.artifacts[1].mime_type, "text/csv");
        let want: String = Sha256::digest(b"x,y\n1,2\n")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(c.artifacts[1].sha256, want);
        assert_eq!(c.artifacts[1].size, 8);
        assert_eq!(c.artifacts[2].bytes, [0, 255, 1]);
        assert_eq!(c.artifacts[2].mime_type, "application/octet-stream");
    }

    #[test]
    fn the_root_dot_reads_a_listing_archive() {
        // The docker wrapper's `tar -C output -c .` (or its list of `./…` names).
        let mut b = tar::Builder::new(Vec::new());
        folder(&mut b, "./");
        raw_file(&mut b, b"./a.txt", b"a");
        raw_file(&mut b, b"./d/b.txt", b"b");
        // `append_data` writes `c.txt`, as other tars do.
        file(&mut b, "./c.txt", b"c");
        let a = b.into_inner().unwrap();
        let c = artifacts_from_tar(&a, ".", &limits(10, 1000), true);
        assert!(c.skipped.is_empty(), "{:?}", c.skipped);
        assert_eq!(names(&c), ["a.txt", "c.txt", "d/b.txt"]);
    }

    #[test]
    fn links_and_specials_are_skipped_never_followed() {
        let a = archive(|b| {
            link(b, tar::EntryType::Symlink, "output/passwd", "/etc/passwd");
            link(b, tar::EntryType::Symlink, "output/etc", "/etc");
            link(b, tar::EntryType::Link, "output/hard", "output/x");
            let mut h = tar::Header::new_gnu();
            h.set_size(0);
            h.set_entry_type(tar::EntryType::Fifo);
            b.append_data(&mut h, "output/fifo", &[][..]).unwrap();
        });
        let c = artifacts_from_tar(&a, "output", &limits(10, 1 << 20), true);
        assert!(c.artifacts.is_empty());
        let skipped: Vec<_> = c
            .skipped
            .iter()
            .map(|s| (s.name.as_str(), s.why.as_str()))
            .collect();
        assert_eq!(
            skipped,
            [
                ("etc", "symlink (not followed)"),
                ("fifo", "not a regular file"),
                ("hard", "hard link (not followed)"),
                ("passwd", "symlink (not followed)"),
            ]
        );
    }

    #[test]
    fn count_and_size_caps_hold() {
        let a = archive(|b| {
            for i in 0..5 {
                file(b, &format!("output/{i}.txt"), b"12345");
            }
        });
        let c = artifacts_from_tar(&a, "output", &limits(3, 1000), true);
        assert_eq!(names(&c), ["0.txt", "1.txt", "2.txt"]);
        assert_eq!(c.skipped.len(), 2);
        assert!(c.skipped[0].why.contains("more than 3 artifacts"));
        let c = artifacts_from_tar(&a, "output", &limits(10, 12), true);
        assert_eq!(c.artifacts.len(), 2);
        assert!(c.skipped[0].why.contains("artifact cap"), "{:?}", c.skipped);
        // A file larger than the whole cap is skipped; smaller ones after it still fit.
        let a = archive(|b| {
            file(b, "output/a.big", &[b'x'; 50]);
            file(b, "output/b.txt", b"small");
        });
        let c = artifacts_from_tar(&a, "output", &limits(10, 20), true);
        assert_eq!(names(&c), ["b.txt"]);
        assert_eq!(c.skipped[0].name, "a.big");
        assert!(c.skipped[0].why.starts_with("50 bytes would pass"));
    }

    #[test]
    fn caps_apply_in_the_jails_order_whatever_the_archives() {
        // The jail walks folder by folder with names sorted: `d` (and what is in it) comes
        // before `d.txt`, although `d.txt` sorts first as a whole name.
        let a = archive(|b| {
            file(b, "output/z.txt", b"z");
            file(b, "output/d.txt", b"d");
            file(b, "output/d/inner.txt", b"i");
        });
        let c = artifacts_from_tar(&a, "output", &limits(2, 1000), true);
        assert_eq!(names(&c), ["d.txt", "d/inner.txt"]);
        assert_eq!(c.skipped.len(), 1);
        assert_eq!(c.skipped[0].name, "z.txt");
    }

    #[test]
    fn a_cut_archive_keeps_the_whole_entries_and_says_so() {
        let a = archive(|b| {
            file(b, "output/a.txt", b"first");
            file(b, "output/b.txt", &[b'x'; 4000]);
        });
        // Cut in the middle of the second file's data.
        let c = artifacts_from_tar(&a[..3000], "output", &limits(10, 1 << 20), false);
        assert_eq!(names(&c), ["a.txt"]);
        assert!(
            c.skipped.last().unwrap().why.contains("rest was not read"),
            "{:?}",
            c.skipped
        );
        // Cut in a header.
        let c = artifacts_from_tar(&a[..512 + 1024 + 100], "output", &limits(10, 1000), false);
        assert_eq!(names(&c), ["a.txt"]);
        assert_eq!(c.skipped.len(), 1);
        // The same archive said to be whole is malformed.
        let c = artifacts_from_tar(&a[..3000], "output", &limits(10, 1 << 20), true);
        assert_eq!(names(&c), ["a.txt"]);
        assert!(c.skipped[0].why.contains("malformed"), "{:?}", c.skipped);
    }

    #[test]
    fn names_outside_the_folder_or_with_dots_are_refused() {
        assert_eq!(
            relative_name("output/a/b.txt", "output"),
            Name::Relative("a/b.txt".into())
        );
        assert_eq!(
            relative_name("./a//b.txt", "."),
            Name::Relative("a/b.txt".into())
        );
        assert_eq!(relative_name("output/", "output"), Name::Root);
        assert_eq!(relative_name("./", "."), Name::Root);
        assert_eq!(relative_name(".", "."), Name::Root);
        assert_eq!(relative_name("/etc/passwd", "output"), Name::Outside);
        assert_eq!(relative_name("/etc/passwd", "."), Name::Outside);
        assert_eq!(relative_name("outputx/a", "output"), Name::Outside);
        assert_eq!(relative_name("..x", "."), Name::Relative("..x".into()));
        assert_eq!(relative_name("../x", "."), Name::Dots);
        assert_eq!(relative_name("output/../etc/passwd", "output"), Name::Dots);
        assert_eq!(relative_name("./a/../../x", "."), Name::Dots);
        assert_eq!(relative_name("output/./a", "output"), Name::Dots);

        let a = archive(|b| {
            raw_file(b, b"output/../escape", b"x");
            raw_file(b, b"/etc/passwd", b"x");
            raw_file(b, b"output/caf\xe9.txt", b"x");
            raw_file(b, b"output/bell\x07", b"x");
        });
        let c = artifacts_from_tar(&a, "output", &limits(10, 100), true);
        assert!(c.artifacts.is_empty());
        let mut skipped: Vec<_> = c
            .skipped
            .iter()
            .map(|s| (s.name.as_str(), s.why.as_str()))
            .collect();
        skipped.sort();
        assert_eq!(
            skipped,
            [
                ("/etc/passwd", "name outside the output folder"),
                ("bell\\u{7}", "name has a control character"),
                ("caf\u{fffd}.txt", "name is not valid UTF-8"),
                ("output/../escape", "name has `.` or `..`"),
            ]
        );
    }

    #[test]
    fn a_folder_past_the_depth_cap_is_reported_once_and_not_entered() {
        let deep = format!("output/{}", "d/".repeat(9));
        let a = archive(|b| {
            folder(b, &deep);
            file(b, &format!("{deep}f1"), b"x");
            link(b, tar::EntryType::Symlink, &format!("{deep}l"), "/etc");
            // Without the folder's own entry, as the docker wrapper's list makes it.
            file(b, &format!("output/{}g", "e/".repeat(10)), b"x");
            // Eight folders deep is still in.
            file(b, &format!("output/{}ok", "o/".repeat(8)), b"x");
        });
        let c = artifacts_from_tar(&a, "output", &limits(10, 100), true);
        assert_eq!(names(&c), [format!("{}ok", "o/".repeat(8))]);
        let skipped: Vec<_> = c
            .skipped
            .iter()
            .map(|s| (s.name.as_str(), s.why.as_str()))
            .collect();
        let d9 = ["d"; 9].join("/");
        let e9 = ["e"; 9].join("/");
        assert_eq!(
            skipped,
            [
                (d9.as_str(), "deeper than 8 folders"),
                (e9.as_str(), "deeper than 8 folders")
            ]
        );
    }

    #[test]
    fn entries_and_skipped_records_are_capped() {
        let a = archive(|b| {
            for i in 0..MAX_ENTRIES + 10 {
                link(b, tar::EntryType::Symlink, &format!("output/{i:05}"), "/");
            }
        });
        let c = artifacts_from_tar(&a, "output", &limits(10, 100), true);
        assert_eq!(c.skipped.len(), MAX_SKIPPED);
        assert!(c.artifacts.is_empty());
        let (found, _) = walk(&a, "output", &limits(10, 100));
        assert_eq!(found.len(), MAX_ENTRIES + 1);
        assert!(matches!(&found[MAX_ENTRIES].1, Found::Skipped(why) if why.contains("entries")));
    }
}
