//! Admission: who may run now. Every execution, and every start of a context's interpreter
//! (it costs as much), takes an execution slot; more requests than slots wait in a bounded
//! queue, past which they are refused at once with a time to retry — never an unbounded pile-up.
//!
//! Invariants: running plus waiting never exceeds `max_concurrent + max_queued`, for every
//! front-end together (REST, MCP over HTTP and stdio, the CLI share the engine's one
//! [`Admission`]); a caller with a limit of its own (an API key's `max_concurrent`) is checked
//! first, so it never takes a global place it cannot use; permits are released when the
//! [`Admitted`] is dropped, whichever way the execution ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The daemon's bounds on executions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionLimits {
    /// Executions running at once (at least 1).
    pub max_concurrent: usize,
    /// Executions waiting for a slot; past this, refused with [`crate::EngineError::Busy`].
    pub max_queued: usize,
    /// The time to retry that a refusal carries, seconds.
    pub retry_after_secs: u64,
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        AdmissionLimits {
            max_concurrent: warden_config::default_max_concurrent(),
            max_queued: 64,
            retry_after_secs: 1,
        }
    }
}

/// Who is asking, as the front-end authenticated them. The default caller (no API keys, the
/// CLI, MCP over stdio) owns what is made without a key.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The API key's name: the owner of what it creates, and the only sandboxes it sees.
    pub owner: Option<String>,
    /// The key's own limit on live sandboxes.
    pub max_sandboxes: Option<usize>,
    /// The key's own execution slots, when it has a limit of its own.
    pub slots: Option<KeySlots>,
}

impl Caller {
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }
}

/// An API key's own execution slots (shared by every request made with the key).
#[derive(Debug, Clone)]
pub struct KeySlots {
    semaphore: Arc<Semaphore>,
    max: usize,
}

impl KeySlots {
    pub fn new(max: usize) -> KeySlots {
        KeySlots {
            semaphore: Arc::new(Semaphore::new(max)),
            max,
        }
    }
}

/// The engine's slots and queue places. Cheap to clone: clones share them.
#[derive(Debug, Clone)]
pub struct Admission {
    limits: AdmissionLimits,
    slots: Arc<Semaphore>,
    /// Slots plus queue places.
    places: Arc<Semaphore>,
    counts: Arc<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    running: AtomicUsize,
    queued: AtomicUsize,
}

/// Why a request was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Every slot is busy and the queue is full.
    Busy,
    /// The caller's own limit is reached.
    KeyBusy { key: String, max: usize },
    /// The admission was closed (shutdown).
    Closed,
}

impl Admission {
    pub fn new(limits: AdmissionLimits) -> Admission {
        let limits = AdmissionLimits {
            max_concurrent: limits.max_concurrent.max(1),
            ..limits
        };
        Admission {
            slots: Arc::new(Semaphore::new(limits.max_concurrent)),
            places: Arc::new(Semaphore::new(limits.max_concurrent + limits.max_queued)),
            counts: Arc::default(),
            limits,
        }
    }

    pub fn limits(&self) -> AdmissionLimits {
        self.limits
    }

    /// Executions holding a slot now.
    pub fn running(&self) -> usize {
        self.counts.running.load(Ordering::Relaxed)
    }

    /// Executions waiting for a slot now.
    pub fn queued(&self) -> usize {
        self.counts.queued.load(Ordering::Relaxed)
    }

    /// Free execution slots.
    pub fn free_slots(&self) -> usize {
        self.slots.available_permits()
    }

    /// Waits for a slot, or refuses at once when the caller's own limit is reached or the
    /// queue is full.
    pub async fn admit(&self, caller: &Caller) -> Result<Admitted, Refusal> {
        let own =
            match &caller.slots {
                Some(key) => Some(key.semaphore.clone().try_acquire_owned().map_err(|_| {
                    Refusal::KeyBusy {
                        key: caller.owner.clone().unwrap_or_default(),
                        max: key.max,
                    }
                })?),
                None => None,
            };
        let place = self
            .places
            .clone()
            .try_acquire_owned()
            .map_err(|_| Refusal::Busy)?;
        let slot = {
            // Counted as waiting until the wait ends, also when the caller goes away mid-wait
            // (the future dropped): the guard's drop takes it off.
            let _waiting = Waiting::new(&self.counts);
            self.slots.clone().acquire_owned().await
        };
        let slot = slot.map_err(|_| Refusal::Closed)?;
        self.counts.running.fetch_add(1, Ordering::Relaxed);
        Ok(Admitted {
            _own: own,
            _place: place,
            _slot: slot,
            counts: self.counts.clone(),
        })
    }
}

/// One request waiting for a slot, counted while it lives.
struct Waiting<'a>(&'a Counts);

impl<'a> Waiting<'a> {
    fn new(counts: &'a Counts) -> Waiting<'a> {
        counts.queued.fetch_add(1, Ordering::Relaxed);
        Waiting(counts)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An admitted request: its queue place and execution slot, until dropped.
#[derive(Debug)]
pub struct Admitted {
    _own: Option<OwnedSemaphorePermit>,
    _place: OwnedSemaphorePermit,
    _slot: OwnedSemaphorePermit,
    counts: Arc<Counts>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.counts.running.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_concurrent: usize, max_queued: usize) -> AdmissionLimits {
        AdmissionLimits {
            max_concurrent,
            max_queued,
            retry_after_secs: 1,
        }
    }

    #[tokio::test]
    async fn a_full_queue_refuses_at_once_and_a_release_lets_the_next_in() {
        let admission = Admission::new(limits(1, 1));
        let first = admission.admit(&Caller::default()).await.unwrap();
        assert_eq!((admission.running(), admission.queued()), (1, 0));
        let waiting = tokio::spawn({
            let admission = admission.clone();
            async move { admission.admit(&Caller::default()).await.map(drop) }
        });
        while admission.queued() == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            admission.admit(&Caller::default()).await.unwrap_err(),
            Refusal::Busy
        );
        drop(first);
        waiting.await.unwrap().unwrap();
        assert_eq!((admission.running(), admission.queued()), (0, 0));
    }

    #[tokio::test]
    async fn a_caller_that_goes_away_while_waiting_is_no_longer_counted() {
        let admission = Admission::new(limits(1, 4));
        let held = admission.admit(&Caller::default()).await.unwrap();
        let waiting = tokio::spawn({
            let admission = admission.clone();
            async move { admission.admit(&Caller::default()).await.map(drop) }
        });
        while admission.queued() == 0 {
            tokio::task::yield_now().await;
        }
        waiting.abort();
        let _ = waiting.await;
        assert_eq!((admission.running(), admission.queued()), (1, 0));
        drop(held);
        // Its queue place was given back too: four may wait again.
        assert_eq!(admission.free_slots(), 1);
    }

    #[tokio::test]
    async fn a_key_at_its_own_limit_takes_no_global_place() {
        let admission = Admission::new(limits(4, 0));
        let key = Caller {
            owner: Some("team".into()),
            max_sandboxes: None,
            slots: Some(KeySlots::new(1)),
        };
        let held = admission.admit(&key).await.unwrap();
        assert_eq!(
            admission.admit(&key).await.unwrap_err(),
            Refusal::KeyBusy {
                key: "team".into(),
                max: 1
            }
        );
        // The refusal left the three other global slots free.
        assert_eq!(admission.free_slots(), 3);
        drop(held);
        admission.admit(&key).await.unwrap();
    }
}
