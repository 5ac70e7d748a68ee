//! Pooled one-shots: per profile (`oneshot_pool_size`) and per language of its
//! `oneshot_pool_languages` (Python and JavaScript by default), one-shot sandboxes built ahead
//! of their code with their interpreter started and waiting ([`Backend::hold`]), so that a
//! one-shot pays neither the sandbox's nor the interpreter's start-up. Started by
//! `warden serve` ([`Engine::start_oneshot_pools`]); the CLI never pools.
//!
//! Invariants:
//! - Each pool ([`OneShotPoolId`]: a profile and a language) is filled on its own, to its
//!   profile's `oneshot_pool_size`, by its own refill task; one language's pool failing or
//!   refused leaves the others as they are.
//! - A held sandbox is built from the profile's defaults and the pool's language by the same
//!   resolution as a request naming them ([`Engine::prepare`]) and by the backend's same steps
//!   as a cold run; a request gets one only when its plan equals the held one's but for the
//!   code, stdin and timeout ([`RunKey`]) and the backend says it fits; else the request runs
//!   cold, as without a pool.
//! - Every one-shot still gets a fresh sandbox: a held one leaves the pool (under its lock)
//!   before it is checked or run, runs one program and is destroyed; one that is not alive
//!   when taken is dropped (destroyed), and the refill replaces dead ones while they wait.
//! - Held sandboxes run nothing of anyone's and count against no limit; the refill builds
//!   up to [`PARALLEL_BUILDS`] at a time per pool, woken by a take, and backs off after a
//!   failed build; a pool whose runs its backend refuses to hold (e.g. Python not under the
//!   import guard, a JavaScript runtime that is not node) is disabled, said once in a log
//!   line.
//! - After [`Engine::close_oneshot_pools`] nothing is added and every held sandbox is
//!   dropped.

use crate::backend::{BackendError, ExecPlan, HeldRun};
use crate::{Engine, EngineError, ExecRequest};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;
use warden_types::Language;

/// How often a refill task looks at its pool when nothing wakes it.
const CHECK_EVERY: Duration = Duration::from_secs(1);
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// How long a refill waits after a take before it builds: the taken sandbox's run (a few
/// milliseconds) goes first.
const REFILL_AFTER_TAKE: Duration = Duration::from_millis(10);

/// Sandboxes a refill builds at once: a burst of takes is made good in parallel, within what
/// a small host's cores can start without slowing the runs they serve.
const PARALLEL_BUILDS: usize = 2;

/// What a one-shot's sandbox is built from: its plan without the code, stdin and timeout.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunKey(ExecPlan);

impl RunKey {
    pub(crate) fn of(plan: &ExecPlan) -> RunKey {
        let mut key = plan.clone();
        key.code = String::new();
        key.stdin = Vec::new();
        key.limits.timeout = Duration::ZERO;
        RunKey(key)
    }
}

/// One one-shot pool: a profile's sandboxes held for one language.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OneShotPoolId {
    pub profile: String,
    pub language: Language,
}

impl OneShotPoolId {
    fn of(plan: &ExecPlan) -> OneShotPoolId {
        OneShotPoolId {
            profile: plan.profile.clone(),
            language: plan.language.clone(),
        }
    }
}

impl std::fmt::Display for OneShotPoolId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "profile {:?} ({})", self.profile, self.language)
    }
}

#[derive(Debug)]
pub(crate) struct Held {
    key: RunKey,
    run: Box<dyn HeldRun>,
}

/// A one-shot pool as `/metrics` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OneShotPoolStatus {
    pub size: u32,
    pub ready: usize,
    /// Runs that got a held sandbox.
    pub taken: u64,
    /// Held sandboxes found dead and dropped.
    pub discarded: u64,
    pub failed: u64,
    /// One-shots of this profile and language that found no fitting held sandbox and ran
    /// cold.
    pub missed: u64,
}

impl crate::pool::Misses for OneShotPoolStatus {
    fn miss(&mut self) {
        if self.size > 0 {
            self.missed += 1;
        }
    }
}

/// The one-shot pools of one engine (shared by its clones).
pub(crate) type OneShotPools = crate::pool::Shelves<OneShotPoolId, Held, OneShotPoolStatus>;

impl OneShotPools {
    /// Takes the oldest live held sandbox that `plan` fits, dropping dead ones on the way.
    pub(crate) fn take(&self, plan: &ExecPlan) -> Option<Box<dyn HeldRun>> {
        let pool = OneShotPoolId::of(plan);
        let key = RunKey::of(plan);
        let mut dead = Vec::new();
        let found = {
            let mut ready = self.ready.lock().expect("not poisoned");
            ready.get_mut(&pool).and_then(|queue| {
                loop {
                    let at = queue
                        .iter()
                        .position(|h| h.key == key && h.run.fits(plan))?;
                    let held = queue.remove(at)?;
                    if held.run.alive() {
                        break Some(held.run);
                    }
                    dead.push(held);
                }
            })
        };
        if found.is_some() || !dead.is_empty() {
            self.wake.notify_waiters();
        }
        let discarded = dead.len() as u64;
        let taken = u64::from(found.is_some());
        if discarded + taken > 0 {
            self.count(&pool, |c| {
                c.discarded += discarded;
                c.taken += taken;
            });
        }
        drop(dead);
        if found.is_none() {
            self.count_miss(&pool);
        }
        found
    }

    fn discard_dead(&self, pool: &OneShotPoolId) {
        let dead: VecDeque<Held> = {
            let mut ready = self.ready.lock().expect("not poisoned");
            let Some(queue) = ready.get_mut(pool) else {
                return;
            };
            let (live, dead) = std::mem::take(queue)
                .into_iter()
                .partition(|h| h.run.alive());
            *queue = live;
            dead
        };
        if !dead.is_empty() {
            self.count(pool, |c| c.discarded += dead.len() as u64);
        }
    }
}

impl Engine {
    /// Starts a refill task for each language of each profile with a `oneshot_pool_size`
    /// (needs a tokio runtime); until they have filled, one-shots run cold.
    pub fn start_oneshot_pools(&self) {
        let pools = &self.oneshots;
        if pools.is_closed() {
            return;
        }
        let settings = self.settings();
        let sized: Vec<(OneShotPoolId, u32)> = settings
            .sandbox
            .profiles
            .iter()
            .flat_map(|(name, p)| {
                settings
                    .oneshot_pool_languages(p)
                    .into_iter()
                    .map(move |language| {
                        let pool = OneShotPoolId {
                            profile: name.clone(),
                            language,
                        };
                        (pool, p.oneshot_pool_size)
                    })
            })
            .collect();
        let mut fillers = pools.fillers.lock().expect("not poisoned");
        for (pool, size) in sized {
            pools.count(&pool, |c| c.size = size);
            let engine = self.clone();
            fillers.push(tokio::spawn(async move {
                engine.refill_oneshots(pool, size as usize).await;
            }));
        }
    }

    /// The one-shot pools' sizes and counters.
    pub fn oneshot_pool_status(&self) -> BTreeMap<OneShotPoolId, OneShotPoolStatus> {
        let mut status = self.oneshots.counters.lock().expect("not poisoned").clone();
        for (pool, s) in status.iter_mut() {
            s.ready = self.oneshots.ready_count(pool);
        }
        status
    }

    /// Stops the refills and drops (destroys) every held sandbox. Idempotent.
    pub async fn close_oneshot_pools(&self) {
        drop(self.oneshots.close().await);
    }

    /// A held sandbox for a one-shot `plan`, if its pool has one that fits.
    pub(crate) fn take_held(&self, plan: &ExecPlan) -> Option<Box<dyn HeldRun>> {
        self.oneshots.take(plan)
    }

    async fn refill_oneshots(&self, pool: OneShotPoolId, size: usize) {
        let pools = &self.oneshots;
        let mut closed = pools.closed.subscribe();
        let mut backoff = FIRST_BACKOFF;
        let mut after_take = false;
        loop {
            let woken = pools.wake.notified();
            if pools.is_closed() {
                return;
            }
            pools.discard_dead(&pool);
            let mut pause = CHECK_EVERY;
            let missing = size.saturating_sub(pools.ready_count(&pool));
            if missing > 0 && std::mem::take(&mut after_take) {
                // Woken by a take: let its run have the CPUs first (a refill's sandbox and
                // interpreter start take a core for tens of milliseconds on a small host).
                tokio::time::sleep(REFILL_AFTER_TAKE).await;
            }
            if missing > 0 {
                let mut builds = tokio::task::JoinSet::new();
                for _ in 0..missing.min(PARALLEL_BUILDS) {
                    let engine = self.clone();
                    let pool = pool.clone();
                    builds.spawn(async move { engine.build_held(&pool).await });
                }
                let mut failure = None;
                while let Some(joined) = builds.join_next().await {
                    let built = joined.unwrap_or_else(|e| {
                        Err(EngineError::Internal(format!("one-shot pool build: {e}")))
                    });
                    match built {
                        // Dropped (destroyed) if the pools closed meanwhile.
                        Ok(held) if !pools.is_closed() => pools
                            .ready
                            .lock()
                            .expect("not poisoned")
                            .entry(pool.clone())
                            .or_default()
                            .push_back(held),
                        Ok(_) => {}
                        Err(e) => failure = Some(e),
                    }
                }
                match failure {
                    None => {
                        backoff = FIRST_BACKOFF;
                        continue;
                    }
                    Some(
                        e @ (EngineError::BackendUnavailable { .. }
                        | EngineError::Backend(BackendError::Refused(_))),
                    ) => {
                        // Never going to work here (no such backend, or it cannot hold this
                        // pool's runs): said once, not retried.
                        pools.count(&pool, |c| c.failed += 1);
                        eprintln!("warden: one-shot pool of {pool} disabled: {e}");
                        return;
                    }
                    Some(e) => {
                        pools.count(&pool, |c| c.failed += 1);
                        eprintln!(
                            "warden: one-shot pool of {pool}: holding a sandbox failed (next try in {}s): {e}",
                            backoff.as_secs()
                        );
                        pause = backoff;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                }
            }
            tokio::select! {
                () = woken => after_take = true,
                _ = closed.wait_for(|c| *c) => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Holds one sandbox of `pool`: the plan of a request that names only its profile and
    /// language, checked by its backend as a request's is.
    async fn build_held(&self, pool: &OneShotPoolId) -> Result<Held, EngineError> {
        let request = ExecRequest {
            profile: Some(pool.profile.clone()),
            language: Some(pool.language.to_string()),
            ..ExecRequest::default()
        };
        let (profile, plan) = self.prepare(&request)?;
        let backend = self.backend_for(&profile)?.clone();
        backend.check(&plan)?;
        let run = backend.hold(&plan).await?;
        Ok(Held {
            key: RunKey::of(&plan),
            run,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Backend, EventSender};
    use crate::{Caller, SandboxSpec};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use warden_config::{BackendKind, Settings};
    use warden_types::{ExecResult, Reason};

    fn result(stdout: &str) -> ExecResult {
        ExecResult {
            stdout: stdout.into(),
            stderr: String::new(),
            exit_code: Some(0),
            signal: None,
            reason: Reason::Exited,
            duration_ms: 1,
            stdout_truncated: false,
            stderr_truncated: false,
            artifacts: vec![],
            skipped_artifacts: vec![],
            cell: Default::default(),
            egress: Default::default(),
        }
    }

    /// Holds sandboxes that remember the plan they were held for and whether they are alive.
    #[derive(Debug, Default)]
    struct HoldingBackend {
        held: AtomicUsize,
        cold: Mutex<Vec<ExecPlan>>,
        alive: Mutex<Vec<Arc<AtomicBool>>>,
        /// Refuses to hold the runs of these languages (as the jail does Python's without the
        /// import guard).
        refuse_holds: Vec<&'static str>,
    }

    #[derive(Debug)]
    struct FakeHeld {
        held_for: ExecPlan,
        alive: Arc<AtomicBool>,
    }

    #[async_trait::async_trait]
    impl HeldRun for FakeHeld {
        fn alive(&self) -> bool {
            self.alive.load(Ordering::SeqCst)
        }
        fn fits(&self, plan: &ExecPlan) -> bool {
            plan.code.len() <= 100
        }
        async fn run(
            self: Box<Self>,
            plan: ExecPlan,
            _: Option<EventSender>,
        ) -> Result<ExecResult, BackendError> {
            assert_eq!(RunKey::of(&plan), RunKey::of(&self.held_for));
            Ok(result(&format!(
                "held {} {:?}\n",
                plan.language, plan.limits.timeout
            )))
        }
    }

    #[async_trait::async_trait]
    impl Backend for HoldingBackend {
        fn name(&self) -> &'static str {
            "holding"
        }
        fn check(&self, _: &ExecPlan) -> Result<(), BackendError> {
            Ok(())
        }
        async fn exec(
            &self,
            plan: ExecPlan,
            _: Option<EventSender>,
        ) -> Result<ExecResult, BackendError> {
            self.cold.lock().unwrap().push(plan);
            Ok(result("cold\n"))
        }
        async fn hold(&self, plan: &ExecPlan) -> Result<Box<dyn HeldRun>, BackendError> {
            if self.refuse_holds.contains(&plan.language.as_str()) {
                return Err(BackendError::Refused("cannot hold".into()));
            }
            assert!(plan.code.is_empty() && plan.stdin.is_empty());
            self.held.fetch_add(1, Ordering::SeqCst);
            let alive = Arc::new(AtomicBool::new(true));
            self.alive.lock().unwrap().push(alive.clone());
            Ok(Box::new(FakeHeld {
                held_for: plan.clone(),
                alive,
            }))
        }
        async fn create_sandbox(
            &self,
            _: SandboxSpec,
        ) -> Result<Arc<dyn crate::BackendSandbox>, BackendError> {
            Err(BackendError::Refused("not in this fake".into()))
        }
        async fn remove_orphans(&self, _: &[String]) -> Result<usize, BackendError> {
            Ok(0)
        }
    }

    fn engine(backend: Arc<HoldingBackend>) -> Engine {
        Engine::new(Arc::new(Settings::builtin())).with_backend(BackendKind::Jail, backend)
    }

    fn pool(profile: &str, language: &str) -> OneShotPoolId {
        OneShotPoolId {
            profile: profile.into(),
            language: warden_types::Language::new(language).unwrap(),
        }
    }

    fn status(engine: &Engine, profile: &str, language: &str) -> OneShotPoolStatus {
        engine.oneshot_pool_status()[&pool(profile, language)].clone()
    }

    async fn ready(engine: &Engine, profile: &str, language: &str, n: usize) {
        for _ in 0..1000 {
            if engine
                .oneshot_pool_status()
                .get(&pool(profile, language))
                .is_some_and(|s| s.ready == n)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the {language} pool of {profile} never had {n} ready");
    }

    async fn run(engine: &Engine, req: ExecRequest) -> String {
        engine.execute(req, None).await.unwrap().stdout
    }

    fn print1() -> ExecRequest {
        ExecRequest {
            code: "print(1)".into(),
            ..ExecRequest::default()
        }
    }

    fn log1() -> ExecRequest {
        ExecRequest {
            language: Some("js".into()),
            code: "console.log(1)".into(),
            ..ExecRequest::default()
        }
    }

    #[tokio::test]
    async fn a_one_shot_takes_a_held_sandbox_of_its_plan_once_and_the_pool_refills() {
        let b = Arc::new(HoldingBackend::default());
        let engine = engine(b.clone());
        // Without the pools started (the CLI), every one-shot is cold.
        assert_eq!(run(&engine, print1()).await, "cold\n");
        assert_eq!(run(&engine, log1()).await, "cold\n");
        engine.start_oneshot_pools();
        // The built-in default profile keeps two of each of its languages.
        ready(&engine, "standard", "python", 2).await;
        ready(&engine, "standard", "javascript", 2).await;
        assert_eq!(b.held.load(Ordering::SeqCst), 4);
        assert_eq!(run(&engine, print1()).await, "held python 30s\n");
        assert_eq!(run(&engine, log1()).await, "held javascript 30s\n");
        // A request's own (lower) timeout comes with its code.
        let short = ExecRequest {
            timeout: Some(Duration::from_secs(5)),
            ..print1()
        };
        assert_eq!(run(&engine, short).await, "held python 5s\n");
        // Refilled: each held sandbox served one run only, from its own language's pool.
        ready(&engine, "standard", "python", 2).await;
        ready(&engine, "standard", "javascript", 2).await;
        assert_eq!(b.held.load(Ordering::SeqCst), 7);
        assert_eq!(status(&engine, "standard", "python").taken, 2);
        assert_eq!(status(&engine, "standard", "javascript").taken, 1);
        // A run built otherwise (arguments, other limits, a language without a pool) runs
        // cold.
        for other in [
            ExecRequest {
                args: vec!["x".into()],
                ..print1()
            },
            ExecRequest {
                memory_mb: Some(64),
                ..log1()
            },
            ExecRequest {
                language: Some("bash".into()),
                code: "echo 1".into(),
                ..ExecRequest::default()
            },
            ExecRequest {
                code: format!("print({})", "1".repeat(200)),
                ..ExecRequest::default()
            },
        ] {
            assert_eq!(run(&engine, other).await, "cold\n");
        }
        assert_eq!(b.cold.lock().unwrap().len(), 6);
        // Each of those counts as a miss of its pool (a language without one has none); the
        // runs before the pools started do not.
        assert_eq!(status(&engine, "standard", "python").missed, 2);
        assert_eq!(status(&engine, "standard", "javascript").missed, 1);
        // One that died while it waited is never used, and is replaced.
        for alive in b.alive.lock().unwrap().iter() {
            alive.store(false, Ordering::SeqCst);
        }
        assert_eq!(run(&engine, print1()).await, "cold\n");
        ready(&engine, "standard", "python", 2).await;
        let python = status(&engine, "standard", "python");
        assert_eq!((python.size, python.taken, python.discarded), (2, 2, 2));
        assert_eq!(python.missed, 3);
        assert_eq!(run(&engine, print1()).await, "held python 30s\n");
        engine.close_oneshot_pools().await;
        assert_eq!(status(&engine, "standard", "python").ready, 0);
        assert_eq!(status(&engine, "standard", "javascript").ready, 0);
        assert_eq!(run(&engine, print1()).await, "cold\n");
        let caller = Caller::default();
        assert!(engine.start(&caller, print1()).await.is_ok());
    }

    #[tokio::test]
    async fn a_language_the_backend_cannot_hold_disables_its_pool_only() {
        let b = Arc::new(HoldingBackend {
            refuse_holds: vec!["python"],
            ..HoldingBackend::default()
        });
        let engine = engine(b.clone());
        engine.start_oneshot_pools();
        for _ in 0..1000 {
            if status(&engine, "standard", "python").failed > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(status(&engine, "standard", "python").failed, 1);
        assert_eq!(run(&engine, print1()).await, "cold\n");
        ready(&engine, "standard", "javascript", 2).await;
        assert_eq!(run(&engine, log1()).await, "held javascript 30s\n");
        engine.close_oneshot_pools().await;
    }

    #[tokio::test]
    async fn a_profile_holds_only_the_languages_it_names() {
        let settings = Settings::from_toml(
            "[sandbox.profiles.standard]\noneshot_pool_size = 1\noneshot_pool_languages = [\"node\"]\n",
            "t",
        )
        .unwrap();
        let b = Arc::new(HoldingBackend::default());
        let engine = Engine::new(Arc::new(settings)).with_backend(BackendKind::Jail, b.clone());
        engine.start_oneshot_pools();
        ready(&engine, "standard", "javascript", 1).await;
        assert_eq!(
            engine.oneshot_pool_status().keys().collect::<Vec<_>>(),
            [&pool("standard", "javascript")]
        );
        assert_eq!(run(&engine, print1()).await, "cold\n");
        assert_eq!(run(&engine, log1()).await, "held javascript 30s\n");
        engine.close_oneshot_pools().await;
    }
}
