//! Snapshots and forks of durable sandboxes: a snapshot is a named copy of a sandbox's
//! workspace, owned by the API key that made it, listed, deleted, and counted against the
//! key's `[server] snapshot_quota_mb`; `from_snapshot` makes a new durable sandbox from one
//! ([`crate::Sandboxes::create`]); a fork makes `count` new sandboxes from a sandbox's
//! workspace as it is now.
//!
//! Invariants: a snapshot is listed only once its copy is complete (its folder is written,
//! then its record committed), so a crash in the middle leaves no half snapshot listed (its
//! folder, without a record, is swept at the next start) and the sandbox as it was; the copy
//! is consistent as of one instant (the backend freezes the workspace for it); a sandbox made
//! from a snapshot or by a fork has its own copy of every byte (no writable byte is shared
//! with its parent or a sibling: the backend unshares a copy's blocks before using it); names
//! are unique per owner, and checked with the quota under one lock.
//!
//! Contexts: before the copy, each running Python context's state is saved into the
//! workspace by the eviction's save ([`crate::BackendSandbox::save_context`]; the interpreter
//! goes on), so the copy carries it, and removed from the sandbox after the copy. A sandbox
//! made from the copy lists the same contexts; each loads its state at its first cell (or
//! starts afresh, `context_restarted: true`, where nothing was saved). What could not be saved
//! is named in the snapshot's and the fork's answer (`contexts[].unsaved`; `*`: all of a
//! context, as for another language's). The state is as of just before the copy: a cell that
//! runs between the save and the copy is not in it.

use crate::sandboxes::{CreateSandbox, Seed, valid_name};
use crate::store::{SnapshotRecord, StoreError};
use crate::{Caller, EngineError, SandboxInfo, Sandboxes};

/// At most this many sandboxes per fork.
pub const MAX_FORKS: u32 = 16;

const MIB: u64 = 1024 * 1024;

pub use warden_types::{Forked, SnapshotInfo};

/// A snapshot's record as the API shows it.
fn info_of(r: &SnapshotRecord) -> SnapshotInfo {
    SnapshotInfo {
        name: r.name.clone(),
        sandbox_id: r.source.clone(),
        profile: r.profile.clone(),
        language: r.language.clone(),
        workspace_mb: r.limits.workspace_mb,
        size_bytes: r.bytes,
        created_at: warden_types::rfc3339(r.created_ms),
        contexts: r.saved.clone(),
    }
}

/// The bytes the files of a folder take of the disk.
fn allocated(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.blocks() * 512)
        .sum()
}

fn not_durable(entry_profile: &str) -> EngineError {
    EngineError::InvalidRequest {
        field: "sandbox",
        message: format!(
            "snapshots and forks are of durable sandboxes, and this one's profile {entry_profile:?} is not (see its `durable`)"
        ),
    }
}

impl Sandboxes {
    fn owner_snapshots(&self, owner: Option<&str>) -> Result<Vec<SnapshotRecord>, EngineError> {
        let Some(store) = &self.store else {
            return Ok(Vec::new());
        };
        let mut out: Vec<_> = store
            .snapshots()
            .map_err(EngineError::Storage)?
            .into_iter()
            .filter(|r| r.owner.as_deref() == owner)
            .collect();
        out.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then(a.name.cmp(&b.name)));
        Ok(out)
    }

    /// What a sandbox made from the owner's snapshot `name` starts with.
    pub(crate) fn snapshot_seed(
        &self,
        owner: Option<&str>,
        name: &str,
    ) -> Result<Seed, EngineError> {
        let record = self
            .owner_snapshots(owner)?
            .into_iter()
            .find(|r| r.name == name)
            .ok_or_else(|| EngineError::SnapshotNotFound(name.to_owned()))?;
        let store = self.store.as_ref().expect("a snapshot only with a store");
        Ok(Seed {
            dir: store.snapshot_dir(&record.id),
            profile: record.profile,
            language: record.language,
            limits: record.limits,
            contexts: record.contexts,
        })
    }

    /// Records the sandbox's workspace as it is now under `name` (see the module docs).
    pub async fn snapshot(
        &self,
        owner: Option<&str>,
        sandbox: &str,
        name: &str,
    ) -> Result<SnapshotInfo, EngineError> {
        if !valid_name(name) {
            return Err(EngineError::InvalidRequest {
                field: "name",
                message: "1-48 characters of a-z, 0-9 and '-', not starting with '-'".into(),
            });
        }
        let entry = self.find(owner, sandbox)?;
        let Some(store) = self.store.clone().filter(|_| entry.durable) else {
            return Err(not_durable(&entry.profile));
        };
        let _one = self.snapshotting.lock().await;
        let mine = self.owner_snapshots(owner)?;
        if mine.iter().any(|r| r.name == name) {
            return Err(EngineError::SnapshotNameTaken(name.to_owned()));
        }
        let quota_mb = self.engine().settings().server.snapshot_quota_mb;
        let used_mb = mine.iter().map(|r| r.bytes).sum::<u64>().div_ceil(MIB);
        let need_mb = entry.limits.workspace_mb;
        if used_mb + need_mb > quota_mb {
            return Err(EngineError::SnapshotQuota {
                need_mb,
                used_mb,
                quota_mb,
            });
        }
        let id = format!(
            "snap-{}",
            &uuid::Uuid::now_v7().simple().to_string()[20..32]
        );
        let dir = store.snapshot_dir(&id);
        let operation = format!(
            "copy the workspace of sandbox {} into snapshot {name:?}",
            entry.id
        );
        std::fs::create_dir(&dir)
            .map_err(|e| EngineError::Storage(StoreError::io(operation.clone(), &e)))?;
        // The folder is complete before the record says so; a crash between leaves a folder
        // without a record, never a listed half.
        let (saved, saved_now) = self.save_contexts(&entry).await;
        let contexts = entry.contexts.records();
        let copied = entry.handle.snapshot_to(&dir).await;
        self.discard_saved_contexts(&entry, &saved_now).await;
        if let Err(e) = copied {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(match e {
                crate::BackendError::NoSpace(_) => {
                    EngineError::Storage(StoreError::Full { operation })
                }
                e => e.into(),
            });
        }
        let record = SnapshotRecord {
            id,
            name: name.to_owned(),
            owner: owner.map(str::to_owned),
            source: entry.id.clone(),
            profile: entry.profile.clone(),
            language: entry.language.clone(),
            limits: entry.limits.clone(),
            bytes: allocated(&dir),
            created_ms: warden_types::now_ms(),
            contexts,
            saved,
        };
        if let Err(e) = store.put_snapshot(&record) {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(EngineError::Storage(e));
        }
        Ok(info_of(&record))
    }

    /// The owner's snapshots, oldest first.
    pub fn list_snapshots(&self, owner: Option<&str>) -> Result<Vec<SnapshotInfo>, EngineError> {
        Ok(self.owner_snapshots(owner)?.iter().map(info_of).collect())
    }

    /// Deletes the owner's snapshot (its record, then its folder); returns its name.
    pub async fn delete_snapshot(
        &self,
        owner: Option<&str>,
        name: &str,
    ) -> Result<String, EngineError> {
        let _one = self.snapshotting.lock().await;
        let record = self
            .owner_snapshots(owner)?
            .into_iter()
            .find(|r| r.name == name)
            .ok_or_else(|| EngineError::SnapshotNotFound(name.to_owned()))?;
        let store = self.store.as_ref().expect("a snapshot only with a store");
        store
            .remove_snapshot(owner, name)
            .map_err(EngineError::Storage)?;
        // A folder left here (an error) is swept at the next start: it has no record.
        let _ = std::fs::remove_dir_all(store.snapshot_dir(&record.id));
        Ok(record.name)
    }

    /// Makes `count` new sandboxes, each with its own copy of the sandbox's workspace as it
    /// is now, its profile, language, limits, labels, environment, idle TTL and contexts
    /// (with their saved state, see the module docs; names are not copied). All or none: a
    /// failure destroys the ones made.
    pub async fn fork(
        &self,
        caller: &Caller,
        sandbox: &str,
        count: u32,
    ) -> Result<Forked, EngineError> {
        if !(1..=MAX_FORKS).contains(&count) {
            return Err(EngineError::InvalidRequest {
                field: "count",
                message: format!("from 1 to {MAX_FORKS}"),
            });
        }
        let entry = self.find(caller.owner(), sandbox)?;
        let Some(store) = self.store.clone().filter(|_| entry.durable) else {
            return Err(not_durable(&entry.profile));
        };
        // One copy as of now, in a folder without a record (swept after a crash), that each
        // fork copies again.
        let dir = store.snapshot_dir(&format!(
            ".fork-{}",
            &uuid::Uuid::now_v7().simple().to_string()[20..32]
        ));
        let operation = format!("copy the workspace of sandbox {} for a fork", entry.id);
        std::fs::create_dir(&dir)
            .map_err(|e| EngineError::Storage(StoreError::io(operation.clone(), &e)))?;
        let (saved, saved_now) = self.save_contexts(&entry).await;
        let contexts = entry.contexts.records();
        let made = async {
            let copied = entry.handle.snapshot_to(&dir).await;
            self.discard_saved_contexts(&entry, &saved_now).await;
            copied
                .map_err(|e| match e {
                    crate::BackendError::NoSpace(_) => EngineError::Storage(StoreError::Full {
                        operation: operation.clone(),
                    }),
                    e => e.into(),
                })
                .map_err(|e| (e, Vec::new()))?;
            let seed = Seed {
                dir: dir.clone(),
                profile: entry.profile.clone(),
                language: entry.language.clone(),
                limits: entry.limits.clone(),
                contexts,
            };
            let idle = entry.ttls.lock().expect("not poisoned").idle;
            let mut made = Vec::new();
            for _ in 0..count {
                let req = CreateSandbox {
                    labels: entry.labels.clone(),
                    env: entry.env.clone(),
                    home: entry.home.clone(),
                    idle_ttl_seconds: Some(idle.as_secs().max(1)),
                    ..CreateSandbox::default()
                };
                match self.create_seeded(caller, req, Some(seed.clone())).await {
                    Ok(info) => made.push(info),
                    Err(e) => return Err((e, made)),
                }
            }
            Ok(made)
        };
        let result: Result<Vec<SandboxInfo>, (EngineError, Vec<SandboxInfo>)> = made.await;
        let _ = std::fs::remove_dir_all(&dir);
        match result {
            Ok(sandboxes) => Ok(Forked {
                sandboxes,
                contexts: saved,
            }),
            Err((e, made)) => {
                for info in made {
                    let _ = self.destroy(caller.owner(), &info.id).await;
                }
                Err(e)
            }
        }
    }
}
