//! Artifacts from a sandbox pod: `tar -c` of `/workspace/output` runs in the pod (tar stores a
//! symlink as a link, never what it points to), its stream comes back over exec, and this
//! module turns the archive into [`Artifact`]s.
//!
//! Invariants: only regular-file entries become artifacts (symlinks, hard links, devices and
//! anything else are skipped with why); names are relative, without `..`, and UTF-8; the count
//! and total size caps of the limits hold; the caller reads at most [`stream_cap`] bytes of the
//! archive, and an archive cut there yields what was whole before the cut plus a skipped entry
//! that says so.

use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Component;
use warden_types::{Artifact, Limits, SkippedArtifact};

/// At most this many bytes of the archive are read: the artifact bytes the limits allow plus
/// room for headers (512 bytes each, a few per entry) of the entries looked at.
pub fn stream_cap(limits: &Limits) -> u64 {
    limits.max_artifact_bytes + 1024 * (u64::from(limits.max_artifacts) + 64) + 1024
}

/// Most entries looked at, whatever their kind (as in the jail).
const MAX_ENTRIES: usize = 4096;

/// Turns the tar stream of the output folder (member names start with `output/`) into
/// artifacts. `cut` says the stream was stopped at [`stream_cap`].
pub fn from_tar(
    archive: &[u8],
    limits: &Limits,
    cut: bool,
) -> (Vec<Artifact>, Vec<SkippedArtifact>) {
    let mut artifacts = Vec::new();
    let mut skipped = Vec::new();
    let mut total = 0u64;
    let skip = |skipped: &mut Vec<SkippedArtifact>, name: &str, why: String| {
        if skipped.len() < 100 {
            skipped.push(SkippedArtifact {
                name: name.into(),
                why,
            });
        }
    };
    let mut tar = tar::Archive::new(archive);
    let Ok(entries) = tar.entries() else {
        return (artifacts, skipped);
    };
    let mut broken = false;
    for (seen, entry) in entries.enumerate() {
        let Ok(mut entry) = entry else {
            broken = true;
            break;
        };
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let Some(name) = relative_name(&raw) else {
            if !raw.trim_end_matches('/').eq("output") {
                skip(&mut skipped, &raw, "name outside the output folder".into());
            }
            continue;
        };
        if seen >= MAX_ENTRIES {
            skip(
                &mut skipped,
                &name,
                format!("more than {MAX_ENTRIES} entries in the output folder"),
            );
            break;
        }
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            continue;
        }
        if kind.is_symlink() {
            skip(&mut skipped, &name, "symlink (not followed)".into());
            continue;
        }
        if !kind.is_file() {
            skip(&mut skipped, &name, "not a regular file".into());
            continue;
        }
        if std::str::from_utf8(&entry.path_bytes()).is_err() {
            skip(&mut skipped, &name, "name is not valid UTF-8".into());
            continue;
        }
        if let Some(why) = warden_types::artifact_name_refusal(&name) {
            skip(
                &mut skipped,
                &warden_types::printable_name(&name),
                why.into(),
            );
            continue;
        }
        let size = entry.size();
        if artifacts.len() >= limits.max_artifacts as usize {
            skip(
                &mut skipped,
                &name,
                format!("more than {} artifacts", limits.max_artifacts),
            );
            continue;
        }
        if total + size > limits.max_artifact_bytes {
            skip(
                &mut skipped,
                &name,
                format!(
                    "{size} bytes would pass the artifact cap of {} bytes",
                    limits.max_artifact_bytes
                ),
            );
            continue;
        }
        let mut bytes = Vec::with_capacity(size as usize);
        if entry.read_to_end(&mut bytes).is_err() || bytes.len() as u64 != size {
            broken = true;
            break;
        }
        total += size;
        artifacts.push(Artifact {
            mime_type: mime_type(&name, &bytes).into(),
            sha256: hex(&Sha256::digest(&bytes)),
            size,
            name,
            bytes,
        });
    }
    if broken || cut {
        skip(
            &mut skipped,
            "output",
            if cut {
                format!(
                    "the output folder holds more than the artifact caps allow; reading stopped after {} bytes",
                    stream_cap(limits)
                )
            } else {
                "the archive of the output folder ended early".into()
            },
        );
    }
    artifacts.sort_by(|a, b| a.name.cmp(&b.name));
    (artifacts, skipped)
}

/// `output/a/b.txt` → `a/b.txt`; `None` for the folder itself and for anything that is not a
/// plain relative path under it.
fn relative_name(raw: &str) -> Option<String> {
    let rest = raw.strip_prefix("output/")?;
    let path = std::path::Path::new(rest);
    let mut parts = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_str()?),
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The MIME type from the extension, else from the content (the jail's table).
pub fn mime_type(name: &str, bytes: &[u8]) -> &'static str {
    let ext = std::path::Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("gif") => "image/gif",
        Some("svg") => "image/svg+xml",
        Some("webp") => "image/webp",
        Some("pdf") => "application/pdf",
        Some("csv") => "text/csv",
        Some("tsv") => "text/tab-separated-values",
        Some("json") => "application/json",
        Some("html" | "htm") => "text/html",
        Some("md") => "text/markdown",
        Some("txt" | "log") => "text/plain",
        Some("xml") => "application/xml",
        Some("zip") => "application/zip",
        Some("parquet") => "application/vnd.apache.parquet",
        _ if bytes.starts_with(b"\x89PNG\r\n\x1a\n") => "image/png",
        _ if std::str::from_utf8(bytes).is_ok() => "text/plain",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    pub(crate) fn limits(max_artifacts: u32, max_bytes: u64) -> Limits {
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

    /// Builds an archive as `tar -C /workspace -c output` would.
    fn archive(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        let mut dir = tar::Header::new_gnu();
        dir.set_entry_type(tar::EntryType::Directory);
        dir.set_size(0);
        dir.set_mode(0o755);
        b.append_data(&mut dir, "output/", std::io::empty())
            .unwrap();
        build(&mut b);
        b.into_inner().unwrap()
    }

    fn file(b: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, name, data).unwrap();
    }

    fn link(b: &mut tar::Builder<Vec<u8>>, name: &str, target: &str) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, name, target).unwrap();
    }

    #[test]
    fn regular_files_come_back_with_hash_and_type() {
        let tar = archive(|b| {
            file(b, "output/a.csv", b"x,y\n1,2\n");
            file(b, "output/sub/b.bin", &[0, 255, 1]);
        });
        let (arts, skipped) = from_tar(&tar, &limits(10, 1000), false);
        assert!(skipped.is_empty(), "{skipped:?}");
        assert_eq!(arts.len(), 2);
        assert_eq!(arts[0].name, "a.csv");
        assert_eq!(arts[0].mime_type, "text/csv");
        assert_eq!(arts[0].sha256, hex(&Sha256::digest(b"x,y\n1,2\n")));
        assert_eq!(arts[1].name, "sub/b.bin");
        assert_eq!(arts[1].bytes, [0, 255, 1]);
    }

    #[test]
    fn symlinks_are_never_followed() {
        let tar = archive(|b| {
            link(b, "output/passwd", "/etc/passwd");
            link(b, "output/etc", "/etc");
        });
        let (arts, skipped) = from_tar(&tar, &limits(10, 1 << 20), false);
        assert!(arts.is_empty());
        assert_eq!(skipped.len(), 2);
        assert!(
            skipped.iter().all(|s| s.why.contains("symlink")),
            "{skipped:?}"
        );
    }

    #[test]
    fn count_and_size_caps_hold() {
        let tar = archive(|b| {
            for i in 0..5 {
                file(b, &format!("output/{i}.txt"), b"12345");
            }
        });
        let (arts, skipped) = from_tar(&tar, &limits(3, 1000), false);
        assert_eq!((arts.len(), skipped.len()), (3, 2));
        let (arts, skipped) = from_tar(&tar, &limits(10, 12), false);
        assert_eq!(arts.len(), 2);
        assert!(skipped[0].why.contains("artifact cap"), "{skipped:?}");
    }

    #[test]
    fn a_cut_archive_keeps_the_whole_entries_and_says_so() {
        let tar = archive(|b| {
            file(b, "output/a.txt", b"first");
            file(b, "output/b.txt", &[b'x'; 4000]);
        });
        // Cut in the middle of the second file's data.
        let (arts, skipped) = from_tar(&tar[..3000], &limits(10, 1 << 20), true);
        assert_eq!(arts.len(), 1);
        assert_eq!(arts[0].name, "a.txt");
        assert!(
            skipped.last().unwrap().why.contains("reading stopped"),
            "{skipped:?}"
        );
    }

    #[test]
    fn names_outside_the_output_folder_are_refused() {
        assert_eq!(relative_name("output/a/b.txt").as_deref(), Some("a/b.txt"));
        assert_eq!(relative_name("output/./a").as_deref(), Some("a"));
        assert_eq!(relative_name("output/../etc/passwd"), None);
        assert_eq!(relative_name("/etc/passwd"), None);
        assert_eq!(relative_name("output/"), None);
    }
}
