//! Artifacts from the tar archive of `/workspace/output` that the wrapper streams back.
//!
//! Invariants (the same promises as the jail's `artifacts.rs`): only regular files become
//! artifacts; symlinks, hard links, devices and FIFOs are skipped with a reason and never
//! followed; names are relative, `/`-separated, without `..`, valid UTF-8 and at most 8 folders
//! deep; the count and the total size are capped, checked against the header's size before the
//! content is taken; at most 4096 entries are looked at. The archive is untrusted input: a
//! malformed one ends the walk, keeping what was read.

use sha2::{Digest, Sha256};
use std::io::Read;
use warden_types::{Artifact, Limits, SkippedArtifact};

const MAX_DEPTH: usize = 8;
const MAX_ENTRIES: usize = 4096;
const MAX_SKIPPED: usize = 100;

#[derive(Debug, Default)]
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

/// A regular file read from the archive, before the caps pick which ones are returned.
struct Candidate {
    name: String,
    bytes: Vec<u8>,
}

/// Walks the archive. `complete` is false when the stream was cut at the size cap: whatever
/// could not be read is then reported as one skipped entry.
///
/// The caps are applied in the jail's order (folder by folder, names sorted), not in the
/// archive's (the folder's on-disk order), so both backends return the same files. The
/// archive's size is already bounded by the caller, so every candidate is held until then.
pub fn collect(archive: &[u8], limits: &Limits, complete: bool) -> Collected {
    let mut out = Collected::default();
    let mut candidates = Vec::new();
    let mut seen = 0usize;
    let mut tar = tar::Archive::new(archive);
    let Ok(entries) = tar.entries() else {
        return out;
    };
    for entry in entries {
        let Ok(mut entry) = entry else {
            if complete {
                out.skip("(archive)", "the output folder's archive is malformed");
            }
            break;
        };
        seen += 1;
        let raw = entry.path_bytes().into_owned();
        let Ok(raw) = String::from_utf8(raw) else {
            out.skip("(name not UTF-8)", "name is not valid UTF-8");
            continue;
        };
        if let Some(why) = warden_types::artifact_name_refusal(&raw) {
            out.skip(&warden_types::printable_name(&raw), why);
            continue;
        }
        let Some(name) = clean_name(&raw) else {
            if !matches!(raw.as_str(), "." | "./") {
                out.skip(&raw, "name is absolute or has `..`");
            }
            continue;
        };
        if seen > MAX_ENTRIES {
            out.skip(
                &name,
                format!("more than {MAX_ENTRIES} entries in the output folder"),
            );
            break;
        }
        let depth = name.matches('/').count();
        let kind = entry.header().entry_type();
        match kind {
            tar::EntryType::Directory => {
                if depth >= MAX_DEPTH {
                    out.skip(&name, format!("deeper than {MAX_DEPTH} folders"));
                }
                continue;
            }
            tar::EntryType::Symlink => {
                out.skip(&name, "symlink (not followed)");
                continue;
            }
            tar::EntryType::Link => {
                out.skip(&name, "hard link (not followed)");
                continue;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {}
            _ => {
                out.skip(&name, "not a regular file");
                continue;
            }
        }
        if depth > MAX_DEPTH {
            out.skip(&name, format!("deeper than {MAX_DEPTH} folders"));
            continue;
        }
        let size = entry.header().size().unwrap_or(u64::MAX);
        let mut bytes = Vec::with_capacity(size.min(1 << 20) as usize);
        if entry.by_ref().take(size).read_to_end(&mut bytes).is_err() || bytes.len() as u64 != size
        {
            out.skip(&name, "cut short in the archive");
            break;
        }
        candidates.push(Candidate { name, bytes });
    }
    candidates.sort_by(|a, b| a.name.split('/').cmp(b.name.split('/')));
    let mut total = 0u64;
    for Candidate { name, bytes } in candidates {
        let size = bytes.len() as u64;
        if out.artifacts.len() >= limits.max_artifacts as usize {
            out.skip(
                &name,
                format!("more than {} artifacts", limits.max_artifacts),
            );
            continue;
        }
        if total.saturating_add(size) > limits.max_artifact_bytes {
            out.skip(
                &name,
                format!(
                    "{size} bytes would pass the artifact cap of {} bytes",
                    limits.max_artifact_bytes
                ),
            );
            continue;
        }
        total += size;
        out.artifacts.push(Artifact {
            mime_type: warden_types::mime_type(&name, &bytes).to_owned(),
            sha256: Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
            size,
            name,
            bytes,
        });
    }
    if !complete {
        out.skip(
            "(rest of the output folder)",
            format!(
                "the output folder holds more than the artifact cap of {} bytes; the rest was not read",
                limits.max_artifact_bytes
            ),
        );
    }
    out
}

/// `./a/b.txt` → `a/b.txt`; `None` for the root entry, absolute names and `..`.
fn clean_name(raw: &str) -> Option<String> {
    let trimmed = raw.trim_start_matches("./").trim_end_matches('/');
    if trimmed.is_empty() || trimmed == "." || raw.starts_with('/') {
        return None;
    }
    let parts: Vec<&str> = trimmed.split('/').filter(|p| !p.is_empty()).collect();
    if parts.iter().any(|p| *p == ".." || *p == ".") {
        return None;
    }
    Some(parts.join("/"))
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

    fn archive(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        build(&mut b);
        b.into_inner().unwrap()
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

    #[test]
    fn files_come_back_with_hash_and_type() {
        let a = archive(|b| {
            file(b, "./a.csv", b"x,y\n1,2\n");
            file(b, "./sub/b.bin", &[0, 255, 1]);
        });
        let c = collect(&a, &limits(10, 1000), true);
        assert!(c.skipped.is_empty(), "{:?}", c.skipped);
        assert_eq!(c.artifacts.len(), 2);
        assert_eq!(c.artifacts[0].name, "a.csv");
        assert_eq!(c.artifacts[0].mime_type, "text/csv");
        let want: String = Sha256::digest(b"x,y\n1,2\n")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(c.artifacts[0].sha256, want);
        assert_eq!(c.artifacts[1].name, "sub/b.bin");
        assert_eq!(c.artifacts[1].mime_type, "application/octet-stream");
    }

    #[test]
    fn links_and_specials_are_skipped_never_followed() {
        let a = archive(|b| {
            link(b, tar::EntryType::Symlink, "./passwd", "/etc/passwd");
            link(b, tar::EntryType::Link, "./hard", "./x");
            let mut h = tar::Header::new_gnu();
            h.set_size(0);
            h.set_entry_type(tar::EntryType::Fifo);
            b.append_data(&mut h, "./fifo", &[][..]).unwrap();
        });
        let c = collect(&a, &limits(10, 1 << 20), true);
        assert!(c.artifacts.is_empty());
        let whys: Vec<_> = c.skipped.iter().map(|s| s.why.as_str()).collect();
        assert_eq!(
            whys,
            [
                "symlink (not followed)",
                "hard link (not followed)",
                "not a regular file"
            ]
        );
    }

    #[test]
    fn count_and_size_caps_hold_and_a_cut_archive_says_so() {
        let a = archive(|b| {
            for i in 0..5 {
                file(b, &format!("./{i}.txt"), b"12345");
            }
        });
        let c = collect(&a, &limits(3, 1000), true);
        assert_eq!(c.artifacts.len(), 3);
        assert_eq!(c.skipped.len(), 2);
        let c = collect(&a, &limits(10, 12), true);
        assert_eq!(c.artifacts.len(), 2);
        let c = collect(&a[..1024 + 100], &limits(10, 1000), false);
        assert_eq!(c.artifacts.len(), 1);
        assert!(c.skipped.last().unwrap().why.contains("rest was not read"));
    }

    #[test]
    fn names_are_cleaned_or_refused() {
        assert_eq!(clean_name("./a/b.txt").as_deref(), Some("a/b.txt"));
        assert_eq!(clean_name("./"), None);
        assert_eq!(clean_name("/etc/passwd"), None);
        assert_eq!(clean_name("./a/../../x"), None);
        let deep = format!("./{}f", "d/".repeat(9));
        let a = archive(|b| file(b, &deep, b"x"));
        let c = collect(&a, &limits(10, 100), true);
        assert!(c.artifacts.is_empty());
        assert!(c.skipped[0].why.contains("deeper"));
    }
}
