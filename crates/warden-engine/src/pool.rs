//! Warm pools: per profile, sandboxes built ahead of time with their default Python context
//! already started (and the profile's `preload_modules` imported), so that creating a sandbox
//! and running its first cell pay no sandbox or interpreter start-up.
//!
//! Invariants:
//! - A pooled sandbox is built from the same resolution as an on-demand one
//!   ([`Sandboxes::resolve_build`], [`sandbox_spec`], [`Sandboxes::context_spec`]) for the
//!   profile's defaults; a request gets one only when what it would be built from (language,
//!   limits, network, egress, image, container runtime: the [`BuildKey`]) is equal. The
//!   caller's labels are the engine's record only and do not take part.
//! - A pooled sandbox is handed to exactly one caller: it leaves the pool (under its lock)
//!   before it is checked or handed out, and never comes back; it is destroyed like any other.
//! - One that is not alive when taken (its interpreter died or was killed while waiting) is
//!   destroyed and never handed out; the refill also replaces dead ones while they wait.
//! - Pooled sandboxes are not in the registry of live sandboxes: they count against no
//!   owner's or the process's limit and no TTL ends them until they are taken; a taken one's
//!   TTLs start at the take.
//! - A profile whose backend has no contexts or is missing in this process gets no pool, and
//!   a build the backend refuses (a limit it cannot apply) ends the pool's refill; each says
//!   so in one log line, and creates are then built on demand, as without a pool. Other
//!   failures are retried with a backoff.
//! - After [`Sandboxes::close_pools`] no sandbox is added, every pooled one is destroyed and
//!   the refill tasks have ended (a build in progress finishes and is destroyed).

use crate::backend::{BackendError, BackendSandbox, ExecPlan, SandboxSpec};
use crate::contexts::DEFAULT_CONTEXT;
use crate::sandboxes::{new_sandbox_id, sandbox_spec};
use crate::{EngineError, Sandboxes};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use warden_types::Language;

/// How often a refill task looks at its pool when nothing wakes it: dead sandboxes are
/// replaced within this.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// After a failed build, the refill waits this long, doubled per further failure up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// What a sandbox is built from, apart from its id and labels: two sandboxes with equal keys
/// are interchangeable before their first use.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BuildKey {
    language: Language,
    /// With an empty id and no labels.
    spec: SandboxSpec,
}

impl BuildKey {
    pub(crate) fn of(plan: &ExecPlan, spec: &SandboxSpec) -> BuildKey {
        BuildKey {
            language: plan.language.clone(),
            spec: SandboxSpec {
                id: String::new(),
                labels: BTreeMap::new(),
                ..spec.clone()
            },
        }
    }
}

/// A sandbox waiting in a pool.
#[derive(Debug)]
pub(crate) struct Pooled {
    /// The id it was built with.
    pub(crate) id: String,
    key: BuildKey,
    pub(crate) handle: Arc<dyn BackendSandbox>,
    /// When its default context became ready (unix ms).
    pub(crate) context_started_ms: u64,
}

/// A profile's pool as `/metrics` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStatus {
    pub profile: String,
    /// The configured size (`pool_size`).
    pub size: u32,
    /// Sandboxes ready now.
    pub ready: usize,
    /// Handed to callers since the start.
    pub taken: u64,
    /// Found dead while waiting and destroyed.
    pub discarded: u64,
    /// Builds that failed.
    pub failed: u64,
    /// Creates of this profile that found no fitting sandbox ready and were built then.
    pub missed: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    size: u32,
    taken: u64,
    discarded: u64,
    failed: u64,
    missed: u64,
}

/// A pool's counters that count a take which found nothing fitting.
pub(crate) trait Misses {
    /// Counts one, if the pool has a size (it keeps anything at all).
    fn miss(&mut self);
}

impl Misses for Counters {
    fn miss(&mut self) {
        if self.size > 0 {
            self.missed += 1;
        }
    }
}

/// What every pool keeps, per pool (`K`: a profile's name, or a one-shot pool's profile and
/// language): the ready items and the counters; and the refill tasks with what wakes and
/// stops them. The sandbox pools below and the one-shot pools ([`crate::oneshot_pool`]) are
/// each one of these.
#[derive(Debug)]
pub(crate) struct Shelves<K, T, C> {
    pub(crate) ready: Mutex<BTreeMap<K, VecDeque<T>>>,
    pub(crate) counters: Mutex<BTreeMap<K, C>>,
    /// Wakes the refill tasks after a take.
    pub(crate) wake: tokio::sync::Notify,
    /// Set once, at shutdown.
    pub(crate) closed: tokio::sync::watch::Sender<bool>,
    pub(crate) fillers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl<K, T, C> Default for Shelves<K, T, C> {
    fn default() -> Self {
        Shelves {
            ready: Mutex::default(),
            counters: Mutex::default(),
            wake: tokio::sync::Notify::new(),
            closed: tokio::sync::watch::Sender::new(false),
            fillers: Mutex::default(),
        }
    }
}

impl<K: Ord, T, C: Default> Shelves<K, T, C> {
    pub(crate) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    pub(crate) fn count<Q>(&self, pool: &Q, f: impl FnOnce(&mut C))
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ToOwned<Owned = K> + ?Sized,
    {
        let mut counters = self.counters.lock().expect("not poisoned");
        if !counters.contains_key(pool) {
            counters.insert(pool.to_owned(), C::default());
        }
        f(counters.get_mut(pool).expect("inserted"));
    }

    /// Counts a take that found nothing fitting, for a pool that exists: a request of a
    /// profile (and language) without a pool adds no entry to the counters.
    pub(crate) fn count_miss<Q>(&self, pool: &Q)
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
        C: Misses,
    {
        if let Some(c) = self.counters.lock().expect("not poisoned").get_mut(pool) {
            c.miss();
        }
    }

    pub(crate) fn ready_count<Q>(&self, pool: &Q) -> usize
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.ready
            .lock()
            .expect("not poisoned")
            .get(pool)
            .map_or(0, VecDeque::len)
    }

    /// Stops the refill tasks (waiting for them) and hands back everything still ready, for
    /// the caller to destroy. Idempotent.
    pub(crate) async fn close(&self) -> Vec<T> {
        self.closed.send_replace(true);
        self.wake.notify_waiters();
        let fillers = std::mem::take(&mut *self.fillers.lock().expect("not poisoned"));
        for filler in fillers {
            let _ = filler.await;
        }
        std::mem::take(&mut *self.ready.lock().expect("not poisoned"))
            .into_values()
            .flatten()
            .collect()
    }
}

/// The pools of one [`Sandboxes`].
pub(crate) type Pools = Shelves<String, Pooled, Counters>;

impl Pools {
    /// Takes the oldest live pooled sandbox built from `key`, destroying dead ones on the way.
    pub(crate) async fn take(&self, key: &BuildKey) -> Option<Pooled> {
        let profile = &key.spec.profile;
        loop {
            let candidate = {
                let mut ready = self.ready.lock().expect("not poisoned");
                ready.get_mut(profile).and_then(|queue| {
                    let at = queue.iter().position(|p| &p.key == key)?;
                    queue.remove(at)
                })
            };
            let Some(candidate) = candidate else {
                self.count_miss(profile);
                return None;
            };
            // Whatever happens next, the pool is one short.
            self.wake.notify_waiters();
            if candidate.handle.context_alive(DEFAULT_CONTEXT).await {
                self.count(profile, |c| c.taken += 1);
                return Some(candidate);
            }
            self.count(profile, |c| c.discarded += 1);
            discard(candidate).await;
        }
    }

    /// Removes the dead sandboxes of a profile's pool and destroys them. The live ones stay
    /// where they are, available to takes all along.
    async fn discard_dead(&self, profile: &str) {
        let waiting: Vec<(String, Arc<dyn BackendSandbox>)> = {
            let ready = self.ready.lock().expect("not poisoned");
            ready
                .get(profile)
                .map(|q| q.iter().map(|p| (p.id.clone(), p.handle.clone())).collect())
                .unwrap_or_default()
        };
        for (id, handle) in waiting {
            if handle.context_alive(DEFAULT_CONTEXT).await {
                continue;
            }
            // Unless a take got it first (and checks it itself).
            let dead = {
                let mut ready = self.ready.lock().expect("not poisoned");
                ready.get_mut(profile).and_then(|q| {
                    let at = q.iter().position(|p| p.id == id)?;
                    q.remove(at)
                })
            };
            if let Some(dead) = dead {
                self.count(profile, |c| c.discarded += 1);
                discard(dead).await;
            }
        }
    }
}

async fn discard(pooled: Pooled) {
    if let Err(e) = pooled.handle.destroy().await {
        eprintln!("warden: destroying pooled sandbox {}: {e}", pooled.id);
    }
}

impl Sandboxes {
    /// Starts a refill task for each profile with a `pool_size` (needs a tokio runtime). The
    /// pools fill in the background; until then creates build sandboxes on demand.
    pub fn start_pools(&self) {
        if self.pools.is_closed() {
            return;
        }
        let sized: Vec<(String, u32)> = self
            .engine()
            .settings()
            .sandbox
            .profiles
            .iter()
            .filter(|(_, p)| p.pool_size > 0)
            .map(|(name, p)| (name.clone(), p.pool_size))
            .collect();
        let mut fillers = self.pools.fillers.lock().expect("not poisoned");
        for (profile, size) in sized {
            self.pools.count(&profile, |c| c.size = size);
            match self.engine().backend_for(&profile) {
                Ok(backend) if backend.supports_contexts() => {}
                Ok(backend) => {
                    eprintln!(
                        "warden: pool of profile {profile:?} disabled: the {} backend has no contexts",
                        backend.name()
                    );
                    continue;
                }
                Err(e) => {
                    eprintln!("warden: pool of profile {profile:?} disabled: {e}");
                    continue;
                }
            }
            let sandboxes = self.clone();
            fillers.push(tokio::spawn(async move {
                sandboxes.refill(profile, size as usize).await;
            }));
        }
    }

    /// The pools' sizes and counters, by profile.
    pub fn pool_status(&self) -> Vec<PoolStatus> {
        let counters = self.pools.counters.lock().expect("not poisoned");
        counters
            .iter()
            .map(|(profile, c)| PoolStatus {
                profile: profile.clone(),
                size: c.size,
                ready: self.pools.ready_count(profile),
                taken: c.taken,
                discarded: c.discarded,
                failed: c.failed,
                missed: c.missed,
            })
            .collect()
    }

    /// Stops the refills and destroys every pooled sandbox. Idempotent.
    pub(crate) async fn close_pools(&self) {
        for p in self.pools.close().await {
            discard(p).await;
        }
    }

    /// Keeps `profile`'s pool at `size` live sandboxes until the pools close.
    async fn refill(&self, profile: String, size: usize) {
        let mut closed = self.pools.closed.subscribe();
        let mut backoff = FIRST_BACKOFF;
        loop {
            // Registered before the checks, so a take during them still wakes this task.
            let woken = self.pools.wake.notified();
            if self.pools.is_closed() {
                return;
            }
            self.pools.discard_dead(&profile).await;
            let mut pause = CHECK_EVERY;
            if self.pools.ready_count(&profile) < size {
                match self.build_pooled(&profile).await {
                    Ok(pooled) => {
                        backoff = FIRST_BACKOFF;
                        if self.pools.is_closed() {
                            discard(pooled).await;
                            return;
                        }
                        self.pools
                            .ready
                            .lock()
                            .expect("not poisoned")
                            .entry(profile.clone())
                            .or_default()
                            .push_back(pooled);
                        continue;
                    }
                    Err(
                        e @ (EngineError::BackendUnavailable { .. }
                        | EngineError::Backend(BackendError::Refused(_))),
                    ) => {
                        // Never going to work here (no such backend in this process, or it
                        // has no contexts, or refuses the profile): said once, not retried.
                        self.pools.count(&profile, |c| c.failed += 1);
                        eprintln!("warden: pool of profile {profile:?} disabled: {e}");
                        return;
                    }
                    Err(e) => {
                        self.pools.count(&profile, |c| c.failed += 1);
                        eprintln!(
                            "warden: pool of profile {profile:?}: building a sandbox failed (next try in {}s): {e}",
                            backoff.as_secs()
                        );
                        pause = backoff;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                }
            }
            // Woken by a take, by the close, or after the pause.
            tokio::select! {
                () = woken => {}
                _ = closed.wait_for(|c| *c) => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Builds one sandbox of `profile`'s defaults with its default context started, as a
    /// create and a first cell naming `default` would.
    async fn build_pooled(&self, profile: &str) -> Result<Pooled, EngineError> {
        let (profile, plan) = self.resolve_build(Some(profile.to_owned()), None, None)?;
        let backend = self.engine().backend_for(&profile)?.clone();
        let id = new_sandbox_id();
        let spec = sandbox_spec(
            id.clone(),
            &profile,
            &plan,
            BTreeMap::new(),
            BTreeMap::new(),
            None,
        );
        let key = BuildKey::of(&plan, &spec);
        let handle = backend.create_sandbox(spec).await?;
        let context = self.context_spec(
            &profile,
            DEFAULT_CONTEXT.to_owned(),
            plan.language.clone(),
            plan.command.clone(),
            plan.limits.clone(),
        );
        if let Err(e) = handle.create_context(context).await {
            if let Err(d) = handle.destroy().await {
                eprintln!("warden: destroying pooled sandbox {id}: {d}");
            }
            return Err(e.into());
        }
        Ok(Pooled {
            id,
            key,
            handle,
            context_started_ms: warden_types::now_ms(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Backend, BackendError, ContextSpec, EventSender};
    use crate::sandboxes::{CreateSandbox, SandboxExec};
    use crate::{Caller, CreateContext, Engine};
    use std::sync::atomic::{AtomicBool, Ordering};
    use warden_config::{BackendKind, Settings};
    use warden_types::{CellOutput, ExecResult, Reason};

    /// A sandbox that records how it was built and whether it is alive or destroyed.
    #[derive(Debug)]
    struct FakeSandbox {
        spec: SandboxSpec,
        /// Refuses contexts (the trait's default answer) instead of recording them.
        refuses_contexts: bool,
        contexts: Mutex<Vec<ContextSpec>>,
        alive: AtomicBool,
        destroyed: AtomicBool,
    }

    #[async_trait::async_trait]
    impl BackendSandbox for FakeSandbox {
        async fn exec(
            &self,
            _: ExecPlan,
            _: Option<EventSender>,
        ) -> Result<ExecResult, BackendError> {
            Err(BackendError::Internal("not in this fake".into()))
        }
        async fn write_file(
            &self,
            _: &warden_types::WorkspacePath,
            _: Vec<u8>,
        ) -> Result<(), BackendError> {
            Ok(())
        }
        async fn read_file(
            &self,
            _: &warden_types::WorkspacePath,
            _: u64,
        ) -> Result<Vec<u8>, BackendError> {
            Ok(vec![])
        }
        async fn list_files(&self, _: usize) -> Result<Vec<warden_types::FileEntry>, BackendError> {
            Ok(vec![])
        }
        async fn destroy(&self) -> Result<(), BackendError> {
            self.destroyed.store(true, Ordering::SeqCst);
            Ok(())
        }
        async fn create_context(&self, spec: ContextSpec) -> Result<(), BackendError> {
            if self.refuses_contexts {
                return Err(BackendError::Refused(crate::NO_CONTEXTS.into()));
            }
            self.contexts.lock().unwrap().push(spec);
            Ok(())
        }
        async fn exec_in_context(
            &self,
            _: &str,
            _: crate::CellPlan,
            _: Option<EventSender>,
        ) -> Result<ExecResult, BackendError> {
            Ok(ExecResult {
                stdout: String::new(),
                stderr: String::new(),
                exit_code: Some(0),
                signal: None,
                reason: Reason::Exited,
                duration_ms: 1,
                stdout_truncated: false,
                stderr_truncated: false,
                artifacts: vec![],
                skipped_artifacts: vec![],
                cell: CellOutput::default(),
                egress: Default::default(),
            })
        }
        async fn context_alive(&self, id: &str) -> bool {
            id == DEFAULT_CONTEXT
                && self.alive.load(Ordering::SeqCst)
                && !self.destroyed.load(Ordering::SeqCst)
                && !self.contexts.lock().unwrap().is_empty()
        }
    }

    /// Builds fake sandboxes and keeps every one it built.
    #[derive(Debug, Default)]
    struct FakeBackend {
        built: Mutex<Vec<Arc<FakeSandbox>>>,
        contexts: Contexts,
    }

    /// What the fake backend says of contexts, and what its sandboxes do with them.
    #[derive(Debug, Default, Clone, Copy, PartialEq)]
    enum Contexts {
        #[default]
        Supported,
        /// Claims them, but its sandboxes refuse them.
        ClaimedButRefused,
        /// Says it has none.
        Unsupported,
    }

    impl FakeBackend {
        fn with_contexts(contexts: Contexts) -> FakeBackend {
            FakeBackend {
                contexts,
                ..FakeBackend::default()
            }
        }
    }

    #[async_trait::async_trait]
    impl Backend for FakeBackend {
        fn name(&self) -> &'static str {
            "fake"
        }
        fn supports_contexts(&self) -> bool {
            self.contexts != Contexts::Unsupported
        }
        fn check(&self, _: &ExecPlan) -> Result<(), BackendError> {
            Ok(())
        }
        async fn exec(
            &self,
            _: ExecPlan,
            _: Option<EventSender>,
        ) -> Result<ExecResult, BackendError> {
            Err(BackendError::Internal("not in this fake".into()))
        }
        async fn create_sandbox(
            &self,
            spec: SandboxSpec,
        ) -> Result<Arc<dyn BackendSandbox>, BackendError> {
            let sandbox = Arc::new(FakeSandbox {
                spec,
                refuses_contexts: self.contexts != Contexts::Supported,
                contexts: Mutex::default(),
                alive: AtomicBool::new(true),
                destroyed: AtomicBool::new(false),
            });
            self.built.lock().unwrap().push(sandbox.clone());
            Ok(sandbox)
        }
        async fn remove_orphans(&self, _: &[String]) -> Result<usize, BackendError> {
            Ok(0)
        }
    }

    const SETTINGS: &str = r#"
        [sandbox]
        default_profile = "warm"
        [sandbox.profiles.warm]
        max_memory_mb = 200
        pool_size = 1
        preload_modules = ["json"]
    "#;

    fn sandboxes(backend: Arc<FakeBackend>) -> Sandboxes {
        let settings = Settings::from_toml(SETTINGS, "test").unwrap();
        let engine = Engine::new(Arc::new(settings)).with_backend(BackendKind::Jail, backend);
        Sandboxes::new(engine, 8)
    }

    fn status(s: &Sandboxes) -> PoolStatus {
        s.pool_status().pop().expect("the warm profile's pool")
    }

    async fn wait_ready(s: &Sandboxes, ready: usize) {
        for _ in 0..500 {
            if status(s).ready == ready {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the pool never held {ready}: {:?}", status(s));
    }

    fn create(profile_memory: Option<u64>) -> CreateSandbox {
        CreateSandbox {
            memory_mb: profile_memory,
            labels: [("team".to_owned(), "a".to_owned())].into(),
            ..CreateSandbox::default()
        }
    }

    /// Normalizes what differs between any two sandboxes: the id and the caller's labels.
    fn built_from(spec: &SandboxSpec) -> SandboxSpec {
        SandboxSpec {
            id: String::new(),
            labels: BTreeMap::new(),
            ..spec.clone()
        }
    }

    #[tokio::test]
    async fn a_pooled_sandbox_is_built_like_an_on_demand_one_and_taken_once() {
        // Without pools: the sandbox and its default context as a create and a first cell
        // make them.
        let cold = Arc::new(FakeBackend::default());
        let s = sandboxes(cold.clone());
        let id = s.create(&Caller::default(), create(None)).await.unwrap().id;
        let cell = SandboxExec {
            code: "1".into(),
            context: Some(DEFAULT_CONTEXT.into()),
            ..SandboxExec::default()
        };
        s.start_exec(&Caller::default(), &id, cell.clone())
            .await
            .unwrap()
            .finish()
            .await
            .unwrap();
        let on_demand = cold.built.lock().unwrap()[0].clone();

        let warm = Arc::new(FakeBackend::default());
        let s = sandboxes(warm.clone());
        s.start_pools();
        wait_ready(&s, 1).await;
        let first = s.create(&Caller::default(), create(None)).await.unwrap();
        // Taken out at once: the refill builds another.
        wait_ready(&s, 1).await;
        let second = s.create(&Caller::default(), create(None)).await.unwrap();
        assert_ne!(first.id, second.id);
        let built = warm.built.lock().unwrap().clone();
        assert!(built.len() >= 2, "{built:?}");
        let (a, b) = (&built[0], &built[1]);
        assert_eq!(
            (a.spec.id.as_str(), b.spec.id.as_str()),
            (first.id.as_str(), second.id.as_str())
        );
        for pooled in [a, b] {
            assert_eq!(built_from(&pooled.spec), built_from(&on_demand.spec));
            assert_eq!(
                *pooled.contexts.lock().unwrap(),
                *on_demand.contexts.lock().unwrap()
            );
        }
        let context = on_demand.contexts.lock().unwrap()[0].clone();
        assert_eq!(context.preload, ["json"]);
        assert_eq!(context.limits.memory_mb, 200);
        // The caller's labels are the engine's record, on both.
        assert_eq!(first.labels["team"], "a");
        // The taken sandbox's default context is there before any cell, its cells go to it
        // (no second context is created), and an explicit context has no preload.
        let listed = s.list_contexts(None, &first.id).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id, DEFAULT_CONTEXT);
        s.start_exec(&Caller::default(), &first.id, cell)
            .await
            .unwrap()
            .finish()
            .await
            .unwrap();
        assert_eq!(a.contexts.lock().unwrap().len(), 1);
        s.create_context(&Caller::default(), &first.id, CreateContext::default())
            .await
            .unwrap();
        assert!(a.contexts.lock().unwrap()[1].preload.is_empty());
        assert_eq!(status(&s).taken, 2);
        // The pooled sandboxes count for nobody until taken.
        assert_eq!(s.count(), 2);
        s.destroy_all().await;
        assert!(
            warm.built
                .lock()
                .unwrap()
                .iter()
                .all(|b| b.destroyed.load(Ordering::SeqCst))
        );
    }

    #[tokio::test]
    async fn other_limits_get_a_new_sandbox_and_the_pooled_one_waits() {
        let backend = Arc::new(FakeBackend::default());
        let s = sandboxes(backend.clone());
        s.start_pools();
        wait_ready(&s, 1).await;
        let other = s
            .create(&Caller::default(), create(Some(100)))
            .await
            .unwrap();
        assert_eq!(status(&s).taken, 0);
        assert_eq!(status(&s).ready, 1);
        // Built then, not taken: a miss of the pool.
        assert_eq!(status(&s).missed, 1);
        assert!(s.list_contexts(None, &other.id).unwrap().is_empty());
        let built = backend.built.lock().unwrap().clone();
        assert_eq!(built.len(), 2);
        assert_eq!(built[1].spec.limits.memory_mb, 100);
        assert!(built[1].contexts.lock().unwrap().is_empty());
        // The profile's own limit, asked explicitly, is the same build: pooled.
        s.create(&Caller::default(), create(Some(200)))
            .await
            .unwrap();
        assert_eq!((status(&s).taken, status(&s).missed), (1, 1));
        s.destroy_all().await;
    }

    #[tokio::test]
    async fn a_backend_without_contexts_gets_no_pool_and_a_refusal_stops_the_refill() {
        let settings = Arc::new(Settings::from_toml(SETTINGS, "test").unwrap());
        // Says so: no refill task at all, nothing built.
        let s = Sandboxes::new(
            Engine::new(settings.clone()).with_backend(
                BackendKind::Jail,
                Arc::new(FakeBackend::with_contexts(Contexts::Unsupported)),
            ),
            8,
        );
        s.start_pools();
        assert!(s.pools.fillers.lock().unwrap().is_empty());
        assert_eq!((status(&s).size, status(&s).ready), (1, 0));
        // Claims contexts but refuses them: one failed build, then the refill ends by itself.
        let s = Sandboxes::new(
            Engine::new(settings).with_backend(
                BackendKind::Jail,
                Arc::new(FakeBackend::with_contexts(Contexts::ClaimedButRefused)),
            ),
            8,
        );
        s.start_pools();
        let fillers = std::mem::take(&mut *s.pools.fillers.lock().unwrap());
        assert_eq!(fillers.len(), 1);
        for filler in fillers {
            tokio::time::timeout(Duration::from_secs(5), filler)
                .await
                .expect("the refill stops")
                .unwrap();
        }
        assert_eq!((status(&s).failed, status(&s).ready), (1, 0));
    }

    #[tokio::test]
    async fn a_sandbox_that_died_in_the_pool_is_discarded_and_replaced() {
        let backend = Arc::new(FakeBackend::default());
        let s = sandboxes(backend.clone());
        s.start_pools();
        wait_ready(&s, 1).await;
        let dead = backend.built.lock().unwrap()[0].clone();
        dead.alive.store(false, Ordering::SeqCst);
        // Taken or found by the refill's check first: never handed out either way.
        let info = s.create(&Caller::default(), create(None)).await.unwrap();
        assert_ne!(info.id, dead.spec.id);
        assert!(dead.destroyed.load(Ordering::SeqCst));
        assert_eq!(status(&s).discarded, 1);
        wait_ready(&s, 1).await;
        s.destroy_all().await;
        let built = backend.built.lock().unwrap().clone();
        assert!(built.iter().all(|b| b.destroyed.load(Ordering::SeqCst)));
        // Closed: nothing is built any more.
        tokio::time::sleep(CHECK_EVERY + Duration::from_millis(200)).await;
        assert_eq!(backend.built.lock().unwrap().len(), built.len());
        assert_eq!(status(&s).ready, 0);
    }

    /// Not the pool's, but its fakes serve: E2B's `set_timeout` and a sandbox's `home`.
    #[tokio::test]
    async fn a_lifetime_is_set_from_now_within_the_profile_and_a_home_is_checked() {
        let s = sandboxes(Arc::new(FakeBackend::default()));
        let caller = Caller::default();
        let info = s.create(&caller, create(None)).await.unwrap();
        let set = s
            .set_lifetime(None, &info.id, Duration::from_secs(5))
            .unwrap();
        assert!(set.max_lifetime_seconds <= 6, "{set:?}");
        assert_eq!(set.idle_ttl_seconds, 5);
        let err = s
            .set_lifetime(None, &info.id, Duration::from_secs(999_999))
            .unwrap_err();
        assert_eq!(err.code(), "invalid_request");
        assert!(
            s.set_lifetime(Some("other"), &info.id, Duration::from_secs(5))
                .is_err()
        );
        for home in ["/etc", "/home", "/home/../root", "/home/a b"] {
            let req = CreateSandbox {
                home: Some(home.into()),
                ..create(None)
            };
            let err = s.create(&caller, req).await.unwrap_err();
            assert_eq!(err.code(), "invalid_request", "{home}");
        }
        let req = CreateSandbox {
            home: Some("/home/user".into()),
            ..create(None)
        };
        s.create(&caller, req).await.unwrap();
    }
}
