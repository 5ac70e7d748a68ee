//! Sandboxes with a lifetime: created from a profile, used by several executions that share a
//! workspace, destroyed on request or when they expire.
//!
//! Invariants: a sandbox is built with its profile's limits, lowered (never raised past the
//! profile's quota) at creation; its executions resolve the language and run the policies
//! exactly as one-shot executions do, and may only choose their own timeout; a sandbox is
//! visible only to the owner (API key) that created it; names are unique per owner among live
//! sandboxes; a sandbox leaves the registry before its backend is told to destroy it, so no
//! new execution can start on a sandbox being destroyed; expiry uses the monotonic clock. A
//! create may be answered with a warm sandbox from the profile's pool (see [`crate::pool`])
//! only when it would have built exactly that sandbox; it is then registered like any other.
//!
//! Durable sandboxes (a profile's `durable`, with a [`Store`]): the record of each is saved
//! before the sandbox is listed and after every change that a restart must see (its TTLs, its
//! contexts); a sandbox whose record could not be saved is not made; a destroyed sandbox's
//! record goes after its backend released it, then its folder; shutdown releases durable
//! sandboxes without removing them, and [`Sandboxes::restore`] takes them up again at the
//! next start (files as they were, contexts restarted on first use, the idle TTL counted
//! afresh, the lifetime from the original creation).

use crate::audit::{Decision, DestroyCause};
use crate::backend::{BackendError, BackendSandbox, EventSender, ExecPlan, SandboxSpec};
use crate::pool::{BuildKey, Pools};
use crate::store::{SandboxRecord, Store};
use crate::{Caller, Engine, EngineError, ExecRequest};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use warden_config::OnIdle;
use warden_types::{ExecResult, FileEntry, Limits, Paused, Resumed, SandboxState, WorkspacePath};

/// What a caller asks for when creating a sandbox.
#[derive(Debug, Clone, Default)]
pub struct CreateSandbox {
    pub profile: Option<String>,
    pub language: Option<String>,
    /// `[a-z0-9-]`, 1–48 characters, starting with a letter or digit; the id becomes
    /// `{name}-{unix seconds}`.
    pub name: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub idle_ttl_seconds: Option<u64>,
    pub max_lifetime_seconds: Option<u64>,
    pub memory_mb: Option<u64>,
    /// Environment variables of every execution and context (see [`SandboxSpec::env`]).
    pub env: BTreeMap<String, String>,
    /// Where the workspace is also mounted, the runs' HOME and working directory (see
    /// [`SandboxSpec::home`]).
    pub home: Option<String>,
    /// The name of one of the caller's snapshots: the sandbox starts with its workspace (and,
    /// unless named, its profile, language and memory; always its workspace size). The
    /// sandbox is durable: its profile must be.
    pub from_snapshot: Option<String>,
}

/// A workspace a new sandbox starts with: a snapshot's, or a fork's copy of its parent's.
#[derive(Debug, Clone)]
pub(crate) struct Seed {
    /// A folder in the backend's durable form ([`BackendSandbox::snapshot_to`]); copied, not
    /// moved.
    pub(crate) dir: std::path::PathBuf,
    pub(crate) profile: String,
    pub(crate) language: String,
    pub(crate) limits: Limits,
    /// The contexts the new sandbox lists (taken up with the state saved in the workspace).
    pub(crate) contexts: Vec<crate::store::ContextRecord>,
}

/// One execution in a sandbox.
#[derive(Debug, Clone, Default)]
pub struct SandboxExec {
    pub code: String,
    /// Default: the sandbox's language.
    pub language: Option<String>,
    pub timeout: Option<Duration>,
    pub stdin: Vec<u8>,
    pub args: Vec<String>,
    /// Run as a cell of this context (see [`crate::contexts`]); `default` is the sandbox's
    /// default Python context, made on first use. `None`: a fresh run, as always.
    pub context: Option<String>,
    /// This execution's own environment variables, after the sandbox's (see
    /// [`crate::exec_env::check_env`]); not in a context.
    pub env: BTreeMap<String, String>,
    /// This execution's working directory: inside the sandbox's workspace, its `home` or
    /// `/tmp` (see [`crate::exec_env::check_cwd`]); `None`: the sandbox's. Not in a context.
    pub cwd: Option<String>,
    /// Keep the program's stdin open while it runs (after `stdin`): the execution's
    /// [`crate::Execution::take_stdin`] writes to it, and dropping that writer closes it.
    /// Not in a context; refused by a backend that cannot.
    pub live_stdin: bool,
}

/// A sandbox as the API shows it (a wire type, shared with the SDK).
pub use warden_types::SandboxInfo;

#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) id: String,
    name: Option<String>,
    pub(crate) owner: Option<String>,
    pub(crate) profile: String,
    pub(crate) language: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) limits: Limits,
    backend: &'static str,
    /// Changed by [`Sandboxes::set_lifetime`].
    pub(crate) ttls: Mutex<Ttls>,
    on_idle: OnIdle,
    created_ms: u64,
    created: Instant,
    pub(crate) handle: Arc<dyn BackendSandbox>,
    usage: Mutex<Usage>,
    pub(crate) contexts: crate::contexts::Contexts,
    /// Kept across restarts of the daemon (see the module docs).
    pub(crate) durable: bool,
    /// What the sandbox was built with, for its record.
    pub(crate) env: BTreeMap<String, String>,
    /// Where the workspace is also seen (see [`SandboxSpec::home`]).
    pub(crate) home: Option<String>,
}

/// How long a sandbox may live: unused, and in all.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ttls {
    pub(crate) idle: Duration,
    lifetime: Duration,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Use {
    ExecStart,
    ExecEnd,
    Files,
}

#[derive(Debug, Clone, Copy)]
struct Usage {
    last_used: Instant,
    last_used_ms: u64,
    executions: u64,
    /// Executions running now: an idle TTL never ends a sandbox in use.
    running: u32,
    /// Its processes are frozen (see [`Sandboxes::pause`]); any use resumes it.
    paused: bool,
    /// Uses so far (executions, their ends, files): a pause sees whether one came meanwhile.
    uses: u64,
}

/// Why a sandbox's time is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expiry {
    Lifetime,
    Idle,
}

impl Entry {
    fn info(&self) -> SandboxInfo {
        let usage = *self.usage.lock().expect("not poisoned");
        let ttls = *self.ttls.lock().expect("not poisoned");
        let by_lifetime = self.created_ms + ttls.lifetime.as_millis() as u64;
        let by_idle = usage.last_used_ms + ttls.idle.as_millis() as u64;
        SandboxInfo {
            id: self.id.clone(),
            name: self.name.clone(),
            profile: self.profile.clone(),
            language: self.language.clone(),
            labels: self.labels.clone(),
            created_at: warden_types::rfc3339(self.created_ms),
            last_used_at: warden_types::rfc3339(usage.last_used_ms),
            expires_at: warden_types::rfc3339(by_lifetime.min(by_idle)),
            idle_ttl_seconds: ttls.idle.as_secs(),
            max_lifetime_seconds: ttls.lifetime.as_secs(),
            limits: self.limits.clone(),
            executions: usage.executions,
            backend: self.backend.to_owned(),
            state: if usage.paused {
                SandboxState::Paused
            } else {
                SandboxState::Running
            },
        }
    }

    /// Whether its time is up: its lifetime, or its idle TTL (a paused sandbox's idle TTL has
    /// done its work already).
    fn expired(&self, now: Instant) -> Option<Expiry> {
        let usage = self.usage.lock().expect("not poisoned");
        let ttls = *self.ttls.lock().expect("not poisoned");
        if now.duration_since(self.created) >= ttls.lifetime {
            Some(Expiry::Lifetime)
        } else if usage.running == 0
            && !usage.paused
            && now.duration_since(usage.last_used) >= ttls.idle
        {
            Some(Expiry::Idle)
        } else {
            None
        }
    }

    pub(crate) fn touch(&self, use_: Use) {
        let mut usage = self.usage.lock().expect("not poisoned");
        usage.last_used = Instant::now();
        usage.last_used_ms = warden_types::now_ms();
        // Every use resumes a paused sandbox (its backend thaws it on the way).
        usage.paused = false;
        usage.uses += 1;
        match use_ {
            Use::ExecStart => {
                usage.executions += 1;
                usage.running += 1;
            }
            Use::ExecEnd => usage.running = usage.running.saturating_sub(1),
            Use::Files => {}
        }
    }
}

/// The live sandboxes of this process. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Sandboxes {
    engine: Engine,
    live: Arc<Mutex<BTreeMap<String, Arc<Entry>>>>,
    max_live: usize,
    /// Contexts alive at once in all sandboxes together (see [`Sandboxes::with_max_contexts`]),
    /// and how many are being started now.
    pub(crate) max_contexts: usize,
    pub(crate) starting_contexts: Arc<Mutex<usize>>,
    /// Warm sandboxes waiting for a caller; not in `live` (see [`crate::pool`]).
    pub(crate) pools: Arc<Pools>,
    /// Where durable sandboxes are kept; `None`: no sandbox outlives this process.
    pub(crate) store: Option<Arc<Store>>,
    /// Held while a snapshot is made or deleted (names and the quota are checked under it).
    pub(crate) snapshotting: Arc<tokio::sync::Mutex<()>>,
}

/// A context being started within the host's budget (see [`Sandboxes::claim_context`]).
pub(crate) struct ContextClaim(Option<Arc<Mutex<usize>>>);

impl Drop for ContextClaim {
    fn drop(&mut self) {
        if let Some(starting) = &self.0 {
            *starting.lock().expect("not poisoned") -= 1;
        }
    }
}

/// What [`Sandboxes::restore`] found.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Restored {
    /// Taken up again, with their files.
    pub restored: Vec<String>,
    /// Past their lifetime: removed.
    pub expired: Vec<String>,
    /// Not taken up, and why; their records and files are kept for the next start.
    pub failed: Vec<(String, String)>,
    /// Folders without a record (a crash while one was made or removed): removed.
    pub swept: Vec<String>,
}

/// An execution resolved against its sandbox, ready to run (see [`Sandboxes::prepare_in`]).
#[derive(Debug)]
pub(crate) struct PreparedExec {
    pub(crate) entry: Arc<Entry>,
    pub(crate) plan: ExecPlan,
    /// The context the cell runs in, if any.
    pub(crate) context: Option<String>,
    /// The live stdin's reading end, for the backend (see [`SandboxExec::live_stdin`]).
    pub(crate) stdin: Option<crate::backend::StdinReceiver>,
    /// Its writing end, for the caller (taken by the execution).
    pub(crate) stdin_writer: Option<crate::backend::StdinWriter>,
}

/// A fresh sandbox id, `sb-` and 12 hex digits.
pub(crate) fn new_sandbox_id() -> String {
    format!("sb-{}", &uuid::Uuid::now_v7().simple().to_string()[20..32])
}

/// What the backend builds a sandbox from: the resolved plan's limits, network and image,
/// labelled with the caller's labels and the profile.
pub(crate) fn sandbox_spec(
    id: String,
    profile: &str,
    plan: &ExecPlan,
    mut labels: BTreeMap<String, String>,
    env: BTreeMap<String, String>,
    home: Option<String>,
) -> SandboxSpec {
    labels.insert("warden.profile".into(), profile.to_owned());
    SandboxSpec {
        id,
        profile: profile.to_owned(),
        limits: plan.limits.clone(),
        network_enabled: plan.network_enabled,
        egress: plan.egress.clone(),
        image: plan.image.clone(),
        container_runtime: plan.container_runtime.clone(),
        labels,
        env,
        home,
    }
}

/// Copies the files of `from` (one level: a backend's durable form) into `to`, syncing each.
pub(crate) fn copy_folder(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            let target = to.join(entry.file_name());
            std::fs::copy(entry.path(), &target)?;
            std::fs::File::open(&target)?.sync_all()?;
        }
    }
    Ok(())
}

/// A sandbox's `home`: `/home/` and one or more plain names (no `.`, `..` or empty parts),
/// so it never hides a path of the root that the sandbox relies on.
fn valid_home(home: &str) -> bool {
    home.strip_prefix("/home/").is_some_and(|rest| {
        rest.len() <= 64
            && rest.split('/').all(|part| {
                !part.is_empty()
                    && part != "."
                    && part != ".."
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
            })
    })
}

pub(crate) fn valid_name(name: &str) -> bool {
    (1..=48).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
}

impl Sandboxes {
    pub fn new(engine: Engine, max_live: usize) -> Sandboxes {
        Sandboxes {
            engine,
            live: Arc::new(Mutex::new(BTreeMap::new())),
            max_live,
            max_contexts: usize::MAX,
            starting_contexts: Arc::new(Mutex::new(0)),
            pools: Arc::new(Pools::default()),
            store: None,
            snapshotting: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    /// Holds at most `max` contexts alive at once in all sandboxes together (each holds
    /// descriptors of the daemon: `warden serve` sets this from its descriptor limit); past it
    /// a new context is refused ([`EngineError::HostContextsFull`]) instead of failing half-way.
    pub fn with_max_contexts(mut self, max: usize) -> Sandboxes {
        self.max_contexts = max;
        self
    }

    /// Room for one more context in the host's budget ([`Sandboxes::with_max_contexts`]),
    /// held while it starts (its record then counts it). Every context of a live sandbox
    /// counts, evicted and pending ones too: each keeps its room, so a resumed sandbox's
    /// contexts always fit.
    pub(crate) fn claim_context(&self) -> Result<ContextClaim, EngineError> {
        if self.max_contexts == usize::MAX {
            return Ok(ContextClaim(None));
        }
        let mut starting = self.starting_contexts.lock().expect("not poisoned");
        let live: usize = self
            .live
            .lock()
            .expect("not poisoned")
            .values()
            .map(|entry| entry.contexts.count())
            .sum();
        if live + *starting >= self.max_contexts {
            return Err(EngineError::HostContextsFull {
                max: self.max_contexts,
            });
        }
        *starting += 1;
        Ok(ContextClaim(Some(self.starting_contexts.clone())))
    }

    /// Keeps the sandboxes of durable profiles in `store` (see the module docs).
    pub fn with_store(mut self, store: Store) -> Sandboxes {
        self.store = Some(Arc::new(store));
        self
    }

    /// The record a restart needs of a durable sandbox.
    fn record_of(entry: &Entry) -> SandboxRecord {
        let ttls = *entry.ttls.lock().expect("not poisoned");
        let executions = entry.usage.lock().expect("not poisoned").executions;
        SandboxRecord {
            id: entry.id.clone(),
            name: entry.name.clone(),
            owner: entry.owner.clone(),
            profile: entry.profile.clone(),
            language: entry.language.clone(),
            labels: entry.labels.clone(),
            limits: entry.limits.clone(),
            idle_ttl_seconds: ttls.idle.as_secs(),
            lifetime_ms: ttls.lifetime.as_millis() as u64,
            created_ms: entry.created_ms,
            env: entry.env.clone(),
            home: entry.home.clone(),
            contexts: entry.contexts.records(),
            executions,
        }
    }

    /// Saves a durable sandbox's record (nothing to do for another).
    pub(crate) fn save(&self, entry: &Entry) -> Result<(), EngineError> {
        match &self.store {
            Some(store) if entry.durable => store
                .put(&Self::record_of(entry))
                .map_err(EngineError::Storage),
            _ => Ok(()),
        }
    }

    /// Removes what a destroyed durable sandbox kept on disk: its record, then its folder. A
    /// record that cannot be removed keeps the folder too (the next start takes it up again
    /// rather than find a record without its files).
    fn forget(&self, entry: &Entry) -> Result<(), EngineError> {
        let Some(store) = self.store.as_ref().filter(|_| entry.durable) else {
            return Ok(());
        };
        store.remove(&entry.id).map_err(EngineError::Storage)?;
        let dir = store.sandbox_dir(&entry.id);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            // Swept at the next start (a folder without a record).
            Err(e) => Err(EngineError::Storage(crate::store::StoreError::io(
                format!("remove the workspace of sandbox {}", entry.id),
                &e,
            ))),
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn count(&self) -> usize {
        self.live.lock().expect("not poisoned").len()
    }

    /// Resolves what a sandbox is built with (profile, language, limits) exactly as an
    /// execution would be: on-demand sandboxes and pooled ones both come from here.
    pub(crate) fn resolve_build(
        &self,
        profile: Option<String>,
        language: Option<String>,
        memory_mb: Option<u64>,
    ) -> Result<(String, ExecPlan), EngineError> {
        self.engine.prepare(&ExecRequest {
            code: String::new(),
            language,
            profile,
            memory_mb,
            ..ExecRequest::default()
        })
    }

    /// Creates a sandbox owned by the caller (within the caller's own limit on live
    /// sandboxes, if it has one).
    pub async fn create(
        &self,
        caller: &Caller,
        req: CreateSandbox,
    ) -> Result<SandboxInfo, EngineError> {
        let seed = match &req.from_snapshot {
            Some(name) => Some(self.snapshot_seed(caller.owner(), name)?),
            None => None,
        };
        self.create_seeded(caller, req, seed).await
    }

    /// [`Sandboxes::create`], starting with `seed`'s workspace if given.
    pub(crate) async fn create_seeded(
        &self,
        caller: &Caller,
        mut req: CreateSandbox,
        seed: Option<Seed>,
    ) -> Result<SandboxInfo, EngineError> {
        if let Some(seed) = &seed {
            req.profile.get_or_insert_with(|| seed.profile.clone());
            req.language.get_or_insert_with(|| seed.language.clone());
            req.memory_mb.get_or_insert(seed.limits.memory_mb);
        }
        if let Some(max) = caller.max_sandboxes
            && self.count_of(caller.owner()) >= max
        {
            return Err(EngineError::TooManySandboxes { max });
        }
        let owner = caller.owner.clone();
        if let Some(name) = &req.name
            && !valid_name(name)
        {
            return Err(EngineError::InvalidRequest {
                field: "name",
                message: "1-48 characters of a-z, 0-9 and '-', not starting with '-'".into(),
            });
        }
        let (profile_name, mut plan) =
            self.resolve_build(req.profile.clone(), req.language.clone(), req.memory_mb)?;
        if let Some(seed) = &seed {
            // The image's size is the snapshot's.
            plan.limits.workspace_mb = seed.limits.workspace_mb;
        }
        let profile = self
            .engine
            .settings()
            .profile(&profile_name)
            .expect("prepare resolved it");
        let ttl = |asked: Option<u64>, max: u64, field: &'static str| match asked {
            Some(0) => Err(EngineError::InvalidRequest {
                field,
                message: "must be at least 1".into(),
            }),
            Some(s) if s > max => Err(EngineError::InvalidRequest {
                field,
                message: format!("at most {max} (the profile's)"),
            }),
            Some(s) => Ok(Duration::from_secs(s)),
            None => Ok(Duration::from_secs(max)),
        };
        let idle_ttl = ttl(
            req.idle_ttl_seconds,
            profile.idle_ttl_seconds,
            "idle_ttl_seconds",
        )?;
        let max_lifetime = ttl(
            req.max_lifetime_seconds,
            profile.max_lifetime_seconds,
            "max_lifetime_seconds",
        )?;
        let backend = self.engine.backend_for(&profile_name)?.clone();
        // Durable as the profile asks, or by default where the backend can keep it here.
        let durable = self.store.is_some()
            && self.engine.settings().durable(profile)
            && backend.supports_durable()
            && (profile.durable.is_some() || backend.durable_by_default());
        if seed.is_some() && !durable {
            return Err(EngineError::InvalidRequest {
                field: "from_snapshot",
                message: format!(
                    "a sandbox made from a snapshot is durable, and profile {profile_name:?} is not (see its `durable`)"
                ),
            });
        }
        let created_ms = warden_types::now_ms();
        let mut id = match &req.name {
            Some(name) => format!("{name}-{}", created_ms / 1000),
            None => new_sandbox_id(),
        };
        {
            let live = self.live.lock().expect("not poisoned");
            if live.len() >= self.max_live {
                return Err(EngineError::TooManySandboxes { max: self.max_live });
            }
            if let Some(name) = &req.name
                && live
                    .values()
                    .any(|e| e.owner == owner && e.name.as_deref() == Some(name))
            {
                return Err(EngineError::NameTaken(name.clone()));
            }
            if live.contains_key(&id) {
                // Another owner's sandbox of the same name, created the same second.
                id = format!(
                    "{id}-{}",
                    &uuid::Uuid::now_v7().simple().to_string()[26..32]
                );
            }
        }
        if let Some(home) = &req.home
            && !valid_home(home)
        {
            return Err(EngineError::InvalidRequest {
                field: "home",
                message: "an absolute, clean path under /home (e.g. /home/user)".into(),
            });
        }
        // Every run of the sandbox gets these, Python ones with the profile's import guard.
        let guarded = crate::import_guard::for_profile(
            profile,
            &warden_types::Language::new("python").expect("a valid name"),
        )
        .is_some();
        crate::exec_env::check_env(&req.env, "env", guarded)?;
        let (env, home) = (req.env.clone(), req.home.clone());
        let spec = sandbox_spec(
            id.clone(),
            &profile_name,
            &plan,
            req.labels.clone(),
            req.env,
            req.home,
        );
        // A warm sandbox built from exactly this spec (labels aside, which are the engine's
        // record only), if the pool has a live one; else one built now. A durable one is
        // built in its own folder (pooled sandboxes are not durable).
        let pooled = if durable {
            None
        } else {
            self.pools.take(&BuildKey::of(&plan, &spec)).await
        };
        let (handle, contexts) = match pooled {
            Some(pooled) => {
                if req.name.is_none() {
                    // The id it was built with, which its backend's messages name.
                    id = pooled.id.clone();
                }
                let contexts = crate::contexts::Contexts::holding_default(
                    plan.language.clone(),
                    pooled.context_started_ms,
                );
                (pooled.handle, contexts)
            }
            None if durable => {
                let store = self.store.as_ref().expect("durable only with a store");
                let dir = store.sandbox_dir(&id);
                std::fs::create_dir(&dir).map_err(|e| {
                    EngineError::Storage(crate::store::StoreError::io(
                        format!("make the folder of sandbox {id}"),
                        &e,
                    ))
                })?;
                let made = match &seed {
                    Some(seed) => match copy_folder(&seed.dir, &dir) {
                        Ok(()) => backend.restore_sandbox(spec, &dir).await,
                        Err(e) => {
                            let _ = std::fs::remove_dir_all(&dir);
                            return Err(EngineError::Storage(crate::store::StoreError::io(
                                format!("copy the workspace of sandbox {id}"),
                                &e,
                            )));
                        }
                    },
                    None => backend.create_durable_sandbox(spec, &dir).await,
                };
                let contexts = seed.as_ref().map(|s| s.contexts.as_slice()).unwrap_or(&[]);
                match made {
                    Ok(handle) => (handle, crate::contexts::Contexts::restored(contexts)),
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(&dir);
                        return Err(e.into());
                    }
                }
            }
            None => (backend.create_sandbox(spec).await?, Default::default()),
        };
        let now = Instant::now();
        let entry = Arc::new(Entry {
            id: id.clone(),
            name: req.name,
            owner,
            profile: profile_name,
            language: plan.language.to_string(),
            labels: req.labels,
            limits: plan.limits,
            backend: backend.name(),
            ttls: Mutex::new(Ttls {
                idle: idle_ttl,
                lifetime: max_lifetime,
            }),
            on_idle: profile.on_idle,
            created_ms,
            created: now,
            handle,
            usage: Mutex::new(Usage {
                last_used: now,
                last_used_ms: created_ms,
                executions: 0,
                running: 0,
                paused: false,
                uses: 0,
            }),
            contexts,
            durable,
            env,
            home,
        });
        let info = entry.info();
        // Saved before it is listed: a sandbox is durable from its first answer on.
        if let Err(e) = self.save(&entry) {
            // Never saved, so no record to remove (which a full disk could refuse): the folder.
            let _ = entry.handle.destroy().await;
            if let Some(store) = self.store.as_ref().filter(|_| entry.durable) {
                let _ = std::fs::remove_dir_all(store.sandbox_dir(&entry.id));
            }
            return Err(e);
        }
        let raced = {
            let mut live = self.live.lock().expect("not poisoned");
            if live.len() >= self.max_live || live.contains_key(&id) {
                true
            } else {
                live.insert(id, entry.clone());
                false
            }
        };
        if raced {
            let _ = entry.handle.destroy().await;
            let _ = self.forget(&entry);
            return Err(EngineError::TooManySandboxes { max: self.max_live });
        }
        self.engine
            .record(entry.owner.as_deref(), || Decision::SandboxCreated {
                sandbox: entry.id.clone(),
                profile: entry.profile.clone(),
                language: entry.language.clone(),
                backend: entry.backend.to_owned(),
            });
        Ok(info)
    }

    /// Finds a live sandbox of `owner` by id, or else by name.
    pub(crate) fn find(
        &self,
        owner: Option<&str>,
        id_or_name: &str,
    ) -> Result<Arc<Entry>, EngineError> {
        let live = self.live.lock().expect("not poisoned");
        live.get(id_or_name)
            .filter(|e| e.owner.as_deref() == owner)
            .or_else(|| {
                live.values()
                    .find(|e| e.owner.as_deref() == owner && e.name.as_deref() == Some(id_or_name))
            })
            .cloned()
            .ok_or_else(|| EngineError::SandboxNotFound(id_or_name.to_owned()))
    }

    pub fn get(&self, owner: Option<&str>, id: &str) -> Result<SandboxInfo, EngineError> {
        Ok(self.find(owner, id)?.info())
    }

    /// The owner's sandboxes carrying every label of `labels`, oldest first.
    pub fn list(&self, owner: Option<&str>, labels: &BTreeMap<String, String>) -> Vec<SandboxInfo> {
        let live = self.live.lock().expect("not poisoned");
        let mut out: Vec<_> = live
            .values()
            .filter(|e| e.owner.as_deref() == owner)
            .filter(|e| labels.iter().all(|(k, v)| e.labels.get(k) == Some(v)))
            .map(|e| e.info())
            .collect();
        out.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        out
    }

    /// How many live sandboxes `owner` has.
    pub fn count_of(&self, owner: Option<&str>) -> usize {
        let live = self.live.lock().expect("not poisoned");
        live.values()
            .filter(|e| e.owner.as_deref() == owner)
            .count()
    }

    /// Removes the sandbox and everything it holds; returns its id.
    pub async fn destroy(&self, owner: Option<&str>, id: &str) -> Result<String, EngineError> {
        let entry = self.find(owner, id)?;
        self.live.lock().expect("not poisoned").remove(&entry.id);
        self.record_destroyed(&entry, DestroyCause::Request);
        entry.handle.destroy().await?;
        self.forget(&entry)?;
        Ok(entry.id.clone())
    }

    /// Makes the sandbox end `from_now` from now, used or not (its lifetime becomes the time
    /// it has lived plus `from_now`, its idle TTL at most `from_now`), within its profile's
    /// maximum lifetime and idle TTL. Returns its new record.
    pub fn set_lifetime(
        &self,
        owner: Option<&str>,
        id: &str,
        from_now: Duration,
    ) -> Result<SandboxInfo, EngineError> {
        let entry = self.find(owner, id)?;
        let profile = self
            .engine
            .settings()
            .profile(&entry.profile)
            .expect("resolved when the sandbox was created");
        let lifetime = entry.created.elapsed() + from_now;
        let max = Duration::from_secs(profile.max_lifetime_seconds);
        if lifetime > max {
            return Err(EngineError::InvalidRequest {
                field: "timeout",
                message: format!(
                    "the sandbox would live {}s in all, more than its profile's max_lifetime_seconds ({})",
                    lifetime.as_secs(),
                    profile.max_lifetime_seconds
                ),
            });
        }
        let before = {
            let mut ttls = entry.ttls.lock().expect("not poisoned");
            let before = *ttls;
            *ttls = Ttls {
                idle: from_now.min(Duration::from_secs(profile.idle_ttl_seconds)),
                lifetime,
            };
            before
        };
        if let Err(e) = self.save(&entry) {
            // What a restart would find stays what the sandbox lives by.
            *entry.ttls.lock().expect("not poisoned") = before;
            return Err(e);
        }
        Ok(entry.info())
    }

    /// Destroys the sandboxes whose time is up, or pauses those idle past their TTL whose
    /// profile says `on_idle = "pause"`; returns the ids of those destroyed.
    pub async fn reap_expired(&self) -> Vec<String> {
        let now = Instant::now();
        let (expired, to_pause): (Vec<Arc<Entry>>, Vec<Arc<Entry>>) = {
            let mut live = self.live.lock().expect("not poisoned");
            let mut destroy = Vec::new();
            let mut pause = Vec::new();
            for entry in live.values() {
                match entry.expired(now) {
                    Some(Expiry::Idle) if entry.on_idle == OnIdle::Pause => {
                        pause.push(entry.clone())
                    }
                    Some(_) => destroy.push(entry.id.clone()),
                    None => {}
                }
            }
            (
                destroy.iter().filter_map(|id| live.remove(id)).collect(),
                pause,
            )
        };
        for entry in to_pause {
            if let Err(e) = self.pause_entry(&entry).await {
                eprintln!("warden: pausing idle sandbox {}: {e}", entry.id);
            }
        }
        let mut ids = Vec::new();
        for entry in expired {
            self.record_destroyed(&entry, DestroyCause::Expired);
            if let Err(e) = entry.handle.destroy().await {
                eprintln!("warden: reaping sandbox {}: {e}", entry.id);
            } else if let Err(e) = self.forget(&entry) {
                eprintln!("warden: reaping sandbox {}: {e}", entry.id);
            }
            ids.push(entry.id.clone());
        }
        ids
    }

    /// Destroys every sandbox, the pooled ones included, after stopping the pools' refills
    /// (shutdown). A durable sandbox is released (its processes end) and kept on disk for the
    /// next start.
    pub async fn destroy_all(&self) {
        self.close_pools().await;
        let all: Vec<Arc<Entry>> = std::mem::take(&mut *self.live.lock().expect("not poisoned"))
            .into_values()
            .collect();
        // The durable ones' counts of executions, up to date for the next start: one commit.
        let durable: Vec<SandboxRecord> = all
            .iter()
            .filter(|e| e.durable)
            .map(|e| Self::record_of(e))
            .collect();
        if let Some(store) = self.store.as_ref().filter(|_| !durable.is_empty())
            && let Err(e) = store.put_all(&durable)
        {
            eprintln!("warden: saving the durable sandboxes' records at shutdown: {e}");
        }
        for entry in all {
            if !entry.durable {
                self.record_destroyed(&entry, DestroyCause::Shutdown);
            }
            let _ = entry.handle.destroy().await;
        }
    }

    /// Takes up the durable sandboxes of an earlier process (at the daemon's start, before it
    /// listens): each with its files, owner, name, labels, TTLs and the list of its contexts,
    /// which start again (fresh) at their first use. A sandbox past its lifetime is removed;
    /// one that cannot be taken up (its profile gone from the settings, its backend failing)
    /// is named in the answer and kept on disk for the next start.
    pub async fn restore(&self) -> Result<Restored, EngineError> {
        let Some(store) = self.store.clone() else {
            return Ok(Restored::default());
        };
        let (records, unreadable) = store.all().map_err(EngineError::Storage)?;
        let mut out = Restored::default();
        let mut known: std::collections::BTreeSet<String> =
            unreadable.iter().map(|(id, _)| id.clone()).collect();
        for (id, why) in unreadable {
            out.failed
                .push((id, format!("its record cannot be read: {why}")));
        }
        let now_ms = warden_types::now_ms();
        for record in records {
            known.insert(record.id.clone());
            let id = record.id.clone();
            if now_ms >= record.created_ms.saturating_add(record.lifetime_ms) {
                match store.remove(&id) {
                    Ok(()) => {
                        let _ = std::fs::remove_dir_all(store.sandbox_dir(&id));
                        known.remove(&id);
                        out.expired.push(id);
                    }
                    Err(e) => out.failed.push((id, e.to_string())),
                }
                continue;
            }
            match self.restore_one(&store, record).await {
                Ok(()) => out.restored.push(id),
                Err(why) => out.failed.push((id, why)),
            }
        }
        out.swept = store.sweep(&known, |dir| self.engine.release_leftover(dir));
        // Snapshots cut off by a crash before their record: never listed, removed now.
        out.swept
            .extend(store.sweep_snapshots().map_err(EngineError::Storage)?);
        Ok(out)
    }

    async fn restore_one(&self, store: &Store, record: SandboxRecord) -> Result<(), String> {
        let settings = self.engine.settings();
        let Some(profile) = settings.profile(&record.profile) else {
            return Err(format!(
                "its profile {:?} is no longer in the settings",
                record.profile
            ));
        };
        let on_idle = profile.on_idle;
        let backend = self
            .engine
            .backend_for(&record.profile)
            .map_err(|e| e.to_string())?
            .clone();
        if !backend.supports_durable() {
            return Err(format!(
                "the {} backend of profile {:?} cannot take it up",
                backend.name(),
                record.profile
            ));
        }
        let (_, mut plan) = self
            .resolve_build(
                Some(record.profile.clone()),
                Some(record.language.clone()),
                None,
            )
            .map_err(|e| e.to_string())?;
        plan.limits = record.limits.clone();
        let spec = sandbox_spec(
            record.id.clone(),
            &record.profile,
            &plan,
            record.labels.clone(),
            record.env.clone(),
            record.home.clone(),
        );
        let handle = backend
            .restore_sandbox(spec, &store.sandbox_dir(&record.id))
            .await
            .map_err(|e| e.to_string())?;
        let now = Instant::now();
        let lived = Duration::from_millis(warden_types::now_ms().saturating_sub(record.created_ms));
        let entry = Arc::new(Entry {
            id: record.id.clone(),
            name: record.name,
            owner: record.owner,
            profile: record.profile,
            language: record.language,
            labels: record.labels,
            limits: record.limits,
            backend: backend.name(),
            ttls: Mutex::new(Ttls {
                idle: Duration::from_secs(record.idle_ttl_seconds),
                lifetime: Duration::from_millis(record.lifetime_ms),
            }),
            on_idle,
            created_ms: record.created_ms,
            created: now.checked_sub(lived).unwrap_or(now),
            handle,
            usage: Mutex::new(Usage {
                last_used: now,
                last_used_ms: warden_types::now_ms(),
                executions: record.executions,
                running: 0,
                paused: false,
                uses: 0,
            }),
            contexts: crate::contexts::Contexts::restored(&record.contexts),
            durable: true,
            env: record.env,
            home: record.home,
        });
        self.live
            .lock()
            .expect("not poisoned")
            .insert(record.id, entry);
        Ok(())
    }

    /// Freezes every process of the caller's sandbox (its contexts keep their state) until
    /// [`Sandboxes::resume`] or its next use; refused while an execution runs in it. With
    /// `evict`, its Python contexts are first saved (what can be) and their interpreters
    /// ended, to free their memory; the resume or their next cell loads them again.
    pub async fn pause(
        &self,
        owner: Option<&str>,
        id: &str,
        evict: bool,
    ) -> Result<Paused, EngineError> {
        let entry = self.find(owner, id)?;
        let (mut evicted, mut kept) = (Vec::new(), Vec::new());
        if evict {
            if entry.usage.lock().expect("not poisoned").running > 0 {
                return Err(EngineError::SandboxBusy(entry.id.clone()));
            }
            // Saving runs the interpreters: a paused sandbox is thawed for it (a use).
            entry.touch(Use::Files);
            (evicted, kept) = self.evict_contexts(&entry).await?;
        }
        self.pause_entry(&entry).await?;
        Ok(Paused {
            sandbox: entry.info(),
            evicted,
            kept_in_memory: kept,
        })
    }

    /// Replaces the egress gateway's rules of the caller's sandbox (refused for a sandbox
    /// whose profile has no gateway); executions started afterwards get them.
    pub async fn set_egress(
        &self,
        owner: Option<&str>,
        id: &str,
        rules: warden_types::egress::GatewayRules,
    ) -> Result<warden_types::egress::GatewayRules, EngineError> {
        let entry = self.find(owner, id)?;
        entry
            .handle
            .set_egress(rules.clone())
            .await
            .map_err(|e| match e {
                // The caller's mistake (a sandbox without a gateway), not the host's.
                BackendError::Refused(message) if message == crate::backend::NO_GATEWAY => {
                    EngineError::InvalidRequest {
                        field: "egress",
                        message,
                    }
                }
                e => e.into(),
            })?;
        entry.touch(Use::Files);
        self.engine
            .record(entry.owner.as_deref(), || Decision::EgressRulesChanged {
                sandbox: entry.id.clone(),
                allow: rules.allow.iter().map(|r| r.to_string()).collect(),
                deny: rules.deny.iter().map(|r| r.to_string()).collect(),
            });
        Ok(rules)
    }

    /// Lets a paused sandbox's processes run again (nothing to do for a running one), and
    /// loads the state of the contexts a pause evicted.
    pub async fn resume(&self, owner: Option<&str>, id: &str) -> Result<Resumed, EngineError> {
        let entry = self.find(owner, id)?;
        if entry.usage.lock().expect("not poisoned").paused {
            entry.handle.resume().await?;
            entry.touch(Use::Files);
            self.engine
                .record(entry.owner.as_deref(), || Decision::SandboxResumed {
                    sandbox: entry.id.clone(),
                });
        }
        let restored = self.restore_contexts(&entry).await;
        Ok(Resumed {
            sandbox: entry.info(),
            restored,
        })
    }

    /// Any use of a paused sandbox resumes it first (executions and contexts are thawed by
    /// their backend on the way; files are resumed here, so the state the API shows is true).
    pub(crate) async fn resume_for_use(&self, entry: &Entry) -> Result<(), EngineError> {
        if entry.usage.lock().expect("not poisoned").paused {
            entry.handle.resume().await?;
        }
        Ok(())
    }

    async fn pause_entry(&self, entry: &Entry) -> Result<(), EngineError> {
        let uses_before = {
            let usage = entry.usage.lock().expect("not poisoned");
            if usage.paused {
                return Ok(());
            }
            if usage.running > 0 {
                return Err(EngineError::SandboxBusy(entry.id.clone()));
            }
            usage.uses
        };
        // A backend's `Busy` (its turn held, a process that would not stop) is 409 as it is.
        entry.handle.pause().await?;
        {
            let mut usage = entry.usage.lock().expect("not poisoned");
            if usage.uses != uses_before || usage.running > 0 {
                // Used meanwhile: that use thaws it (the backend's turn comes after the pause).
                return Ok(());
            }
            usage.paused = true;
        }
        self.engine
            .record(entry.owner.as_deref(), || Decision::SandboxPaused {
                sandbox: entry.id.clone(),
            });
        Ok(())
    }

    /// A sandbox left the registry: from here on nobody can use it.
    fn record_destroyed(&self, entry: &Entry, cause: DestroyCause) {
        self.engine
            .record(entry.owner.as_deref(), || Decision::SandboxDestroyed {
                sandbox: entry.id.clone(),
                profile: entry.profile.clone(),
                cause,
            });
    }

    /// Resolves an execution against its sandbox and runs the profile's policies. CPU-bound
    /// (parsing): the pipeline runs it off the async threads.
    pub(crate) fn prepare_in(
        &self,
        entry: Arc<Entry>,
        req: SandboxExec,
    ) -> Result<PreparedExec, EngineError> {
        let language = match &req.context {
            Some(context) => {
                let runs = Self::check_context_exec(&entry, context, &req)?;
                req.language.unwrap_or(runs)
            }
            None => req.language.unwrap_or_else(|| entry.language.clone()),
        };
        let cwd = req
            .cwd
            .as_deref()
            .map(|cwd| crate::exec_env::check_cwd(cwd, entry.home.as_deref()))
            .transpose()?;
        let (_, mut plan) = self.engine.prepare(&ExecRequest {
            code: req.code,
            language: Some(language),
            profile: Some(entry.profile.clone()),
            timeout: req.timeout,
            memory_mb: None,
            stdin: req.stdin,
            args: req.args,
        })?;
        // The sandbox's limits, with this run's own timeout.
        let timeout = plan.limits.timeout;
        plan.limits = entry.limits.clone();
        plan.limits.timeout = timeout;
        if let Some(context) = &req.context {
            Self::check_context_language(&entry, context, &plan.language)?;
        }
        crate::exec_env::check_env(&req.env, "env", plan.import_guard.is_some())?;
        plan.env = req.env;
        plan.cwd = cwd;
        let (stdin_writer, stdin) = match req.live_stdin {
            true => {
                let (tx, rx) = tokio::sync::mpsc::channel(16);
                (Some(tx), Some(rx))
            }
            false => (None, None),
        };
        Ok(PreparedExec {
            entry,
            plan,
            context: req.context,
            stdin,
            stdin_writer,
        })
    }

    pub(crate) async fn run_exec(
        &self,
        mut prepared: PreparedExec,
        events: Option<EventSender>,
    ) -> Result<ExecResult, EngineError> {
        if let Some(context) = prepared.context.take() {
            return self.run_in_context(prepared, context, events).await;
        }
        let PreparedExec {
            entry, plan, stdin, ..
        } = prepared;
        entry.touch(Use::ExecStart);
        let result = match stdin {
            Some(stdin) => entry.handle.exec_with_stdin(plan, events, stdin).await,
            None => entry.handle.exec(plan, events).await,
        };
        entry.touch(Use::ExecEnd);
        Ok(result?)
    }

    pub async fn write_file(
        &self,
        owner: Option<&str>,
        id: &str,
        path: &WorkspacePath,
        bytes: Vec<u8>,
    ) -> Result<(), EngineError> {
        let entry = self.find(owner, id)?;
        self.resume_for_use(&entry).await?;
        entry.touch(Use::Files);
        let size = bytes.len() as u64;
        entry.handle.write_file(path, bytes).await?;
        self.engine.record(owner, || Decision::FileUploaded {
            sandbox: entry.id.clone(),
            path: path.as_str().to_owned(),
            bytes: size,
        });
        Ok(())
    }

    pub async fn read_file(
        &self,
        owner: Option<&str>,
        id: &str,
        path: &WorkspacePath,
        max_bytes: u64,
    ) -> Result<Vec<u8>, EngineError> {
        let entry = self.find(owner, id)?;
        self.resume_for_use(&entry).await?;
        entry.touch(Use::Files);
        let bytes = entry.handle.read_file(path, max_bytes).await?;
        self.engine.record(owner, || Decision::FileDownloaded {
            sandbox: entry.id.clone(),
            path: path.as_str().to_owned(),
            bytes: bytes.len() as u64,
        });
        Ok(bytes)
    }

    pub async fn list_files(
        &self,
        owner: Option<&str>,
        id: &str,
        max_entries: usize,
    ) -> Result<Vec<FileEntry>, EngineError> {
        let entry = self.find(owner, id)?;
        self.resume_for_use(&entry).await?;
        entry.touch(Use::Files);
        Ok(entry.handle.list_files(max_entries).await?)
    }
}
