//! Pooled one-shots: per profile (`oneshot_pool_size`), one-shot sandboxes built ahead of
//! their code with their interpreter started and waiting ([`Backend::hold`]), so that a
//! one-shot pays neither the sandbox's nor the interpreter's start-up. Started by
//! `warden serve` ([`Engine::start_oneshot_pools`]); the CLI never pools.
//!
//! Invariants:
//! - A held sandbox is built from the profile's defaults by the same resolution as a request
//!   ([`Engine::prepare`]) and by the backend's same steps as a cold run; a request gets one
//!   only when its plan equals the held one's but for the code, stdin and timeout
//!   ([`RunKey`]) and the backend says it fits; else the request runs cold, as without a
//!   pool.
//! - Every one-shot still gets a fresh sandbox: a held one leaves the pool (under its lock)
//!   before it is checked or run, runs one program and is destroyed; one that is not alive
//!   when taken is dropped (destroyed), and the refill replaces dead ones while they wait.
//! - Held sandboxes run nothing of anyone's and count against no limit; the refill builds
//!   up to [`PARALLEL_BUILDS`] at a time per profile, woken by a take, and backs off after a failed build; a
//!   profile its backend refuses to hold (e.g. not under the import guard) gets no pool, said
//!   once in a log line.
//! - After [`Engine::close_oneshot_pools`] nothing is added and every held sandbox is
//!   dropped.

use crate::backend::{BackendError, ExecPlan, HeldRun};
use crate::{Engine, EngineError, ExecRequest};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

/// How often a refill task looks at its pool when nothing wakes it.
const CHECK_EVERY: Duration = Duration::from_secs(1);
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

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

#[derive(Debug)]
struct Held {
    key: RunKey,
    run: Box<dyn HeldRun>,
}

/// A profile's one-shot pool as `/metrics` could show it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OneShotPoolStatus {
    pub size: u32,
    pub ready: usize,
    /// Runs that got a held sandbox.
    pub taken: u64,
    /// Held sandboxes found dead and dropped.
    pub discarded: u64,
    pub failed: u64,
}

/// The one-shot pools of one engine (shared by its clones).
#[derive(Debug)]
pub(crate) struct OneShotPools {
    ready: Mutex<BTreeMap<String, VecDeque<Held>>>,
    status: Mutex<BTreeMap<String, OneShotPoolStatus>>,
    wake: tokio::sync::Notify,
    closed: tokio::sync::watch::Sender<bool>,
    fillers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Default for OneShotPools {
    fn default() -> Self {
        OneShotPools {
            ready: Mutex::default(),
            status: Mutex::default(),
            wake: tokio::sync::Notify::new(),
            closed: tokio::sync::watch::Sender::new(false),
            fillers: Mutex::default(),
        }
    }
}

impl OneShotPools {
    fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    fn count(&self, profile: &str, f: impl FnOnce(&mut OneShotPoolStatus)) {
        f(self
            .status
            .lock()
            .expect("not poisoned")
            .entry(profile.to_owned())
            .or_default());
    }

    fn ready_count(&self, profile: &str) -> usize {
        self.ready
            .lock()
            .expect("not poisoned")
            .get(profile)
            .map_or(0, VecDeque::len)
    }

    /// Takes the oldest live held sandbox that `plan` fits, dropping dead ones on the way.
    pub(crate) fn take(&self, plan: &ExecPlan) -> Option<Box<dyn HeldRun>> {
        let key = RunKey::of(plan);
        let mut dead = Vec::new();
        let found = {
            let mut ready = self.ready.lock().expect("not poisoned");
            let queue = ready.get_mut(&plan.profile)?;
            loop {
                let Some(at) = queue
                    .iter()
                    .position(|h| h.key == key && h.run.fits(plan))
                else {
                    break None;
                };
                let held = queue.remove(at)?;
                if held.run.alive() {
                    break Some(held.run);
                }
                dead.push(held);
            }
        };
        if found.is_some() || !dead.is_empty() {
            self.wake.notify_waiters();
        }
        let discarded = dead.len() as u64;
        let taken = u64::from(found.is_some());
        if discarded + taken > 0 {
            self.count(&plan.profile, |c| {
                c.discarded += discarded;
                c.taken += taken;
            });
        }
        drop(dead);
        found
    }

    fn discard_dead(&self, profile: &str) {
        let dead: VecDeque<Held> = {
            let mut ready = self.ready.lock().expect("not poisoned");
            let Some(queue) = ready.get_mut(profile) else {
                return;
            };
            let (live, dead) = std::mem::take(queue)
                .into_iter()
                .partition(|h| h.run.alive());
            *queue = live;
            dead
        };
        if !dead.is_empty() {
            self.count(profile, |c| c.discarded += dead.len() as u64);
        }
    }
}

impl Engine {
    /// Starts a refill task for each profile with a `oneshot_pool_size` (needs a tokio
    /// runtime); until they have filled, one-shots run cold.
    pub fn start_oneshot_pools(&self) {
        let pools = &self.oneshots;
        if pools.is_closed() {
            return;
        }
        let sized: Vec<(String, u32)> = self
            .settings()
            .sandbox
            .profiles
            .iter()
            .filter(|(_, p)| p.oneshot_pool_size > 0)
            .map(|(name, p)| (name.clone(), p.oneshot_pool_size))
            .collect();
        let mut fillers = pools.fillers.lock().expect("not poisoned");
        for (profile, size) in sized {
            pools.count(&profile, |c| c.size = size);
            let engine = self.clone();
            fillers.push(tokio::spawn(async move {
                engine.refill_oneshots(profile, size as usize).await;
            }));
        }
    }

    /// The one-shot pools' sizes and counters, by profile.
    pub fn oneshot_pool_status(&self) -> BTreeMap<String, OneShotPoolStatus> {
        let mut status = self.oneshots.status.lock().expect("not poisoned").clone();
        for (profile, s) in status.iter_mut() {
            s.ready = self.oneshots.ready_count(profile);
        }
        status
    }

    /// Stops the refills and drops (destroys) every held sandbox. Idempotent.
    pub async fn close_oneshot_pools(&self) {
        let pools = &self.oneshots;
        pools.closed.send_replace(true);
        pools.wake.notify_waiters();
        let fillers = std::mem::take(&mut *pools.fillers.lock().expect("not poisoned"));
        for filler in fillers {
            let _ = filler.await;
        }
        drop(std::mem::take(
            &mut *pools.ready.lock().expect("not poisoned"),
        ));
    }

    /// A held sandbox for a one-shot `plan`, if its profile's pool has one that fits.
    pub(crate) fn take_held(&self, plan: &ExecPlan) -> Option<Box<dyn HeldRun>> {
        self.oneshots.take(plan)
    }

    async fn refill_oneshots(&self, profile: String, size: usize) {
        let pools = &self.oneshots;
        let mut closed = pools.closed.subscribe();
        let mut backoff = FIRST_BACKOFF;
        loop {
            let woken = pools.wake.notified();
            if pools.is_closed() {
                return;
            }
            pools.discard_dead(&profile);
            let mut pause = CHECK_EVERY;
            let missing = size.saturating_sub(pools.ready_count(&profile));
            if missing > 0 {
                let mut builds = tokio::task::JoinSet::new();
                for _ in 0..missing.min(PARALLEL_BUILDS) {
                    let engine = self.clone();
                    let profile = profile.clone();
                    builds.spawn(async move { engine.build_held(&profile).await });
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
                            .entry(profile.clone())
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
                        // profile's runs): said once, not retried.
                        pools.count(&profile, |c| c.failed += 1);
                        eprintln!("warden: one-shot pool of profile {profile:?} disabled: {e}");
                        return;
                    }
                    Some(e) => {
                        pools.count(&profile, |c| c.failed += 1);
                        eprintln!(
                            "warden: one-shot pool of profile {profile:?}: holding a sandbox failed (next try in {}s): {e}",
                            backoff.as_secs()
                        );
                        pause = backoff;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                }
            }
            tokio::select! {
                () = woken => {}
                _ = closed.wait_for(|c| *c) => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Holds one sandbox of `profile`'s defaults: the plan of a request that names only the
    /// profile, checked by its backend as a request's is.
    async fn build_held(&self, profile: &str) -> Result<Held, EngineError> {
        let request = ExecRequest {
            profile: Some(profile.to_owned()),
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
