//! The durable state of `warden serve` under its data directory: the records of durable
//! sandboxes in an embedded database (redb, `state.redb`) and each sandbox's own folder
//! (`sandboxes/<id>/`, where its backend keeps the workspace).
//!
//! Invariants: one process at a time holds the database (redb's file lock: a second daemon on
//! the same folder is refused at [`Store::open`]); every change is one transaction, committed
//! durably before the call returns, so a crash leaves either the old record or the new one,
//! never a part; a write that fails (the disk full) leaves what was committed before intact
//! and says which operation failed and why; a sandbox's folder exists only while its record
//! does or is being made (a folder without a record is a leftover of a crash, removed by
//! [`Store::sweep`]).

use redb::{ReadableDatabase, ReadableTable};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use warden_types::Limits;

const SANDBOXES: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("sandboxes");
/// Snapshots by `owner NUL name`.
const SNAPSHOTS: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("snapshots");

/// The database file under the data directory.
pub const DB_FILE: &str = "state.redb";
/// The folder of the sandboxes' own folders under the data directory.
pub const SANDBOXES_DIR: &str = "sandboxes";
/// The folder of the snapshots' folders under the data directory.
pub const SNAPSHOTS_DIR: &str = "snapshots";

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    #[error("the data directory {0} is in use by another warden process (one daemon per data_dir)")]
    InUse(PathBuf),
    /// The disk under the data directory is full.
    #[error("{operation}: no space left on the disk of the data directory")]
    Full { operation: String },
    #[error("{operation}: {why}")]
    Failed { operation: String, why: String },
}

impl StoreError {
    fn of(operation: impl Into<String>, e: impl Into<redb::Error>) -> StoreError {
        let e: redb::Error = e.into();
        let operation = operation.into();
        let full = match &e {
            redb::Error::Io(io) => io.raw_os_error() == Some(libc_enospc()),
            _ => false,
        };
        if full {
            StoreError::Full { operation }
        } else {
            StoreError::Failed {
                operation,
                why: e.to_string(),
            }
        }
    }

    pub(crate) fn io(operation: impl Into<String>, e: &io::Error) -> StoreError {
        let operation = operation.into();
        if e.raw_os_error() == Some(libc_enospc()) {
            StoreError::Full { operation }
        } else {
            StoreError::Failed {
                operation,
                why: e.to_string(),
            }
        }
    }
}

/// ENOSPC (the same number on every Linux architecture).
const fn libc_enospc() -> i32 {
    28
}

/// A context of a durable sandbox, as kept: it comes back with the state saved in the
/// workspace (an eviction's, a snapshot's), else restarted (fresh state).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextRecord {
    pub id: String,
    pub language: String,
    pub created_ms: u64,
}

/// What a durable sandbox is, kept across restarts of the daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub id: String,
    pub name: Option<String>,
    /// The API key's name that owns it (`None`: the daemon without keys).
    pub owner: Option<String>,
    pub profile: String,
    pub language: String,
    pub labels: BTreeMap<String, String>,
    pub limits: Limits,
    pub idle_ttl_seconds: u64,
    /// Since `created_ms`.
    pub lifetime_ms: u64,
    pub created_ms: u64,
    pub env: BTreeMap<String, String>,
    pub home: Option<String>,
    pub contexts: Vec<ContextRecord>,
    /// Executions so far, as of this record's writing (each write brings it up to date: a
    /// create, a change of TTLs or contexts, a graceful stop; not every execution).
    #[serde(default)]
    pub executions: u64,
}

/// A named copy of a durable sandbox's workspace, owned by the API key that made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    /// Its folder's name (`snap-…`), unique.
    pub id: String,
    pub name: String,
    pub owner: Option<String>,
    /// The sandbox it was taken of, and what a sandbox made from it is built with.
    pub source: String,
    pub profile: String,
    pub language: String,
    pub limits: Limits,
    /// What it takes of the disk.
    pub bytes: u64,
    pub created_ms: u64,
    /// The contexts a sandbox made from it has (their saved state is in its workspace).
    #[serde(default)]
    pub contexts: Vec<ContextRecord>,
    /// What was saved of each context's state, and what was not.
    #[serde(default)]
    pub saved: Vec<warden_types::EvictedContext>,
}

fn snapshot_key(owner: Option<&str>, name: &str) -> String {
    format!("{}\0{name}", owner.unwrap_or(""))
}

/// A record that cannot be read: its sandbox's id, and why.
pub type Unreadable = (String, String);

/// The data directory: the database and the sandboxes' folders.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    db: redb::Database,
}

impl Store {
    /// Opens (or creates) the data directory and its database. Refused while another process
    /// holds it.
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        use std::os::unix::fs::DirBuilderExt;
        let op = |what: &str| format!("{what} {}", dir.display());
        for folder in [
            dir.to_path_buf(),
            dir.join(SANDBOXES_DIR),
            dir.join(SNAPSHOTS_DIR),
        ] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&folder)
                .map_err(|e| StoreError::io(op("create the data directory"), &e))?;
        }
        let db = match redb::Database::create(dir.join(DB_FILE)) {
            Ok(db) => db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => {
                return Err(StoreError::InUse(dir.to_path_buf()));
            }
            Err(e) => return Err(StoreError::of(op("open the database of"), e)),
        };
        let store = Store {
            dir: dir.to_path_buf(),
            db,
        };
        store.write("create the sandboxes table", |table| {
            let _ = table;
            Ok(())
        })?;
        store.write_snapshots("create the snapshots table", |table| {
            let _ = table;
            Ok(())
        })?;
        Ok(store)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The folder of one sandbox (its backend's workspace lives there).
    pub fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.dir.join(SANDBOXES_DIR).join(id)
    }

    fn write(
        &self,
        operation: &str,
        change: impl FnOnce(&mut redb::Table<'_, &str, &[u8]>) -> Result<(), redb::Error>,
    ) -> Result<(), StoreError> {
        self.write_in(SANDBOXES, operation, change)
    }

    fn write_snapshots(
        &self,
        operation: &str,
        change: impl FnOnce(&mut redb::Table<'_, &str, &[u8]>) -> Result<(), redb::Error>,
    ) -> Result<(), StoreError> {
        self.write_in(SNAPSHOTS, operation, change)
    }

    fn write_in(
        &self,
        which: redb::TableDefinition<&str, &[u8]>,
        operation: &str,
        change: impl FnOnce(&mut redb::Table<'_, &str, &[u8]>) -> Result<(), redb::Error>,
    ) -> Result<(), StoreError> {
        let txn = self
            .db
            .begin_write()
            .map_err(|e| StoreError::of(operation, e))?;
        {
            let mut table = txn
                .open_table(which)
                .map_err(|e| StoreError::of(operation, e))?;
            change(&mut table).map_err(|e| StoreError::of(operation, e))?;
        }
        txn.commit().map_err(|e| StoreError::of(operation, e))
    }

    /// Saves a sandbox's record (new or changed), durably.
    pub fn put(&self, record: &SandboxRecord) -> Result<(), StoreError> {
        self.put_all(std::slice::from_ref(record))
    }

    /// Saves (creates or replaces) several records in one transaction: one commit to disk
    /// for all of them (a shutdown's, with every durable sandbox's count of executions).
    pub fn put_all(&self, records: &[SandboxRecord]) -> Result<(), StoreError> {
        let encoded: Vec<(&str, Vec<u8>)> = records
            .iter()
            .map(|r| {
                let bytes = serde_json::to_vec(r).expect("a record serializes");
                (r.id.as_str(), bytes)
            })
            .collect();
        let operation = match records {
            [one] => format!("save the record of sandbox {}", one.id),
            _ => format!("save the records of {} sandboxes", records.len()),
        };
        self.write(&operation, |table| {
            for (id, bytes) in &encoded {
                table.insert(*id, bytes.as_slice())?;
            }
            Ok(())
        })
    }

    /// Removes a sandbox's record (nothing to do if there is none).
    pub fn remove(&self, id: &str) -> Result<(), StoreError> {
        self.write(&format!("remove the record of sandbox {id}"), |table| {
            table.remove(id)?;
            Ok(())
        })
    }

    /// Every record, by id. A record that cannot be read is named in the second list with
    /// why (kept in the database, never dropped silently).
    pub fn all(&self) -> Result<(Vec<SandboxRecord>, Vec<Unreadable>), StoreError> {
        let op = "read the sandboxes' records";
        let txn = self.db.begin_read().map_err(|e| StoreError::of(op, e))?;
        let table = txn
            .open_table(SANDBOXES)
            .map_err(|e| StoreError::of(op, e))?;
        let mut records = Vec::new();
        let mut unreadable = Vec::new();
        for item in table.iter().map_err(|e| StoreError::of(op, e))? {
            let (key, value) = item.map_err(|e| StoreError::of(op, e))?;
            match serde_json::from_slice::<SandboxRecord>(value.value()) {
                Ok(record) => records.push(record),
                Err(e) => unreadable.push((key.value().to_owned(), e.to_string())),
            }
        }
        Ok((records, unreadable))
    }

    /// The folder of one snapshot.
    pub fn snapshot_dir(&self, id: &str) -> PathBuf {
        self.dir.join(SNAPSHOTS_DIR).join(id)
    }

    /// Saves a snapshot's record: from here on it is listed (its folder is complete).
    pub fn put_snapshot(&self, record: &SnapshotRecord) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(record).expect("a record serializes");
        let key = snapshot_key(record.owner.as_deref(), &record.name);
        self.write_snapshots(
            &format!("save the record of snapshot {:?}", record.name),
            |table| {
                table.insert(key.as_str(), bytes.as_slice())?;
                Ok(())
            },
        )
    }

    /// Removes a snapshot's record (nothing to do if there is none).
    pub fn remove_snapshot(&self, owner: Option<&str>, name: &str) -> Result<(), StoreError> {
        let key = snapshot_key(owner, name);
        self.write_snapshots(
            &format!("remove the record of snapshot {name:?}"),
            |table| {
                table.remove(key.as_str())?;
                Ok(())
            },
        )
    }

    /// Every snapshot's record (unreadable ones left out: they stay in the database).
    pub fn snapshots(&self) -> Result<Vec<SnapshotRecord>, StoreError> {
        let op = "read the snapshots' records";
        let txn = self.db.begin_read().map_err(|e| StoreError::of(op, e))?;
        let table = txn
            .open_table(SNAPSHOTS)
            .map_err(|e| StoreError::of(op, e))?;
        let mut out = Vec::new();
        for item in table.iter().map_err(|e| StoreError::of(op, e))? {
            let (_, value) = item.map_err(|e| StoreError::of(op, e))?;
            if let Ok(record) = serde_json::from_slice::<SnapshotRecord>(value.value()) {
                out.push(record);
            }
        }
        Ok(out)
    }

    /// Removes the folders of snapshots that have no record: a snapshot that a crash cut off
    /// before its record was saved (so it was never listed). Returns their names.
    pub fn sweep_snapshots(&self) -> Result<Vec<String>, StoreError> {
        let known: BTreeSet<String> = self.snapshots()?.into_iter().map(|r| r.id).collect();
        Ok(sweep_folder(&self.dir.join(SNAPSHOTS_DIR), &known, |_| {
            Ok(())
        }))
    }

    /// Removes the folders of sandboxes that have no record (a crash between making a
    /// sandbox's folder and saving its record, or between removing the record and the
    /// folder), each after `release` let go of what its backend left in it (a mount: see
    /// [`crate::Backend::release_leftover`]); a folder `release` fails on is kept (and said),
    /// never removed through a mount. Returns their names.
    pub fn sweep(
        &self,
        known: &BTreeSet<String>,
        release: impl Fn(&Path) -> Result<(), String>,
    ) -> Vec<String> {
        sweep_folder(&self.dir.join(SANDBOXES_DIR), known, release)
    }
}

/// Removes the entries of `folder` not named in `known`, each after `release`; returns their
/// names.
fn sweep_folder(
    folder: &Path,
    known: &BTreeSet<String>,
    release: impl Fn(&Path) -> Result<(), String>,
) -> Vec<String> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(folder) else {
        return removed;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !known.contains(&name) {
            if let Err(e) = release(&entry.path()) {
                eprintln!(
                    "warden: keeping the leftover {}: {e}",
                    entry.path().display()
                );
                continue;
            }
            match std::fs::remove_dir_all(entry.path()) {
                Ok(()) => removed.push(name),
                Err(e) => eprintln!(
                    "warden: removing the leftover {}: {e}",
                    entry.path().display()
                ),
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> SandboxRecord {
        SandboxRecord {
            id: id.into(),
            name: Some("n".into()),
            owner: Some("key-a".into()),
            profile: "standard".into(),
            language: "python".into(),
            labels: BTreeMap::from([("k".into(), "v".into())]),
            limits: warden_config::Profile::default().limits(),
            idle_ttl_seconds: 60,
            lifetime_ms: 3_600_000,
            created_ms: 1,
            env: BTreeMap::new(),
            home: None,
            contexts: vec![ContextRecord {
                id: "default".into(),
                language: "python".into(),
                created_ms: 2,
            }],
            executions: 3,
        }
    }

    #[test]
    fn records_survive_a_reopen_and_removal_is_final() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path()).unwrap();
            store.put(&record("sb-1")).unwrap();
            store.put(&record("sb-2")).unwrap();
            store.remove("sb-2").unwrap();
            store.remove("sb-none").unwrap();
        }
        let store = Store::open(dir.path()).unwrap();
        let (records, unreadable) = store.all().unwrap();
        assert_eq!(records, vec![record("sb-1")]);
        assert!(unreadable.is_empty());
    }

    #[test]
    fn a_second_holder_of_the_folder_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _first = Store::open(dir.path()).unwrap();
        assert_eq!(
            Store::open(dir.path()).unwrap_err(),
            StoreError::InUse(dir.path().to_path_buf())
        );
    }

    #[test]
    fn folders_without_a_record_are_swept() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        for id in ["sb-kept", "sb-left", "sb-held"] {
            std::fs::create_dir_all(store.sandbox_dir(id).join("x")).unwrap();
        }
        let released = std::sync::Mutex::new(Vec::new());
        let removed = store.sweep(&BTreeSet::from(["sb-kept".to_owned()]), |dir| {
            released.lock().unwrap().push(dir.to_path_buf());
            if dir.ends_with("sb-held") {
                Err("still mounted".into())
            } else {
                Ok(())
            }
        });
        assert_eq!(removed, vec!["sb-left".to_owned()]);
        let mut released = released.into_inner().unwrap();
        released.sort();
        assert_eq!(
            released,
            vec![store.sandbox_dir("sb-held"), store.sandbox_dir("sb-left")]
        );
        assert!(store.sandbox_dir("sb-kept").exists());
        assert!(!store.sandbox_dir("sb-left").exists());
        // What could not be let go is kept, not removed through it.
        assert!(store.sandbox_dir("sb-held").join("x").exists());
    }
}
