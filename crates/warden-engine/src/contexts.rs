//! Contexts: persistent interpreters inside a sandbox with a lifetime (variables survive
//! between executions, like a notebook's kernel). The engine keeps their ids and counters; the
//! backend runs them ([`crate::BackendSandbox::create_context`] and the methods after it).
//!
//! Invariants: a context belongs to one sandbox and dies with it; its cells go through the
//! same resolution and policies as the sandbox's executions (only the timeout is the cell's
//! own); ids are unique within a sandbox; `default` is the id of the sandbox's default Python
//! context, created by the first execution that names it; at most [`MAX_CONTEXTS`] live per
//! sandbox; creation is serialized per sandbox, so two requests for the default context make
//! one; Python and JavaScript have a driver, other languages are refused with a clear error
//! (the `default` context is Python; a JavaScript context is created explicitly). The default
//! context, and only it, starts with the profile's `preload_modules` imported (Python modules,
//! so never into another language's context), whether made on first use or ahead of time in a
//! pooled sandbox (so both are the same context). A durable sandbox taken up after a restart
//! of the daemon, or made from a snapshot or by a fork, has its contexts listed with no
//! interpreter (`pending`): the first cell in one starts it and loads the state saved in the
//! workspace (an eviction's, a snapshot's or a fork's: the backend's
//! [`crate::BackendSandbox::adopt_context`]); with no saved state it starts fresh and answers
//! `context_restarted: true` (its variables are lost).

use crate::backend::{CellPlan, ContextSpec, EventSender};
use crate::sandboxes::{Entry, PreparedExec, Use};
use crate::{Caller, EngineError, ExecRequest, Sandboxes};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use warden_types::{
    EvictedContext, Eviction, ExecResult, KeptContext, Language, Restoration, RestoredContext,
    Unsaved,
};

/// The id of a sandbox's default context (`"context": "default"` in an execution).
pub const DEFAULT_CONTEXT: &str = "default";

/// Live contexts per sandbox, at most (each is an interpreter with the sandbox's memory limit).
pub const MAX_CONTEXTS: usize = 8;

/// After a cell's timeout interrupts it (KeyboardInterrupt), how long it has to stop before
/// the context is killed and restarted.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(2);

/// The languages that have a context driver.
/// The first is the language of a sandbox's `default` context.
const CONTEXT_LANGUAGES: &[&str] = &["python", "javascript"];

/// What a caller asks for when creating a context.
#[derive(Debug, Clone, Default)]
pub struct CreateContext {
    /// Default: the sandbox's language.
    pub language: Option<String>,
}

/// A context as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ContextInfo {
    pub id: String,
    pub sandbox_id: String,
    pub language: String,
    pub created_at: String,
    pub last_used_at: String,
    /// Cells run in it.
    pub executions: u64,
    /// Times its interpreter was replaced by a fresh one (after a kill, or on request).
    pub restarts: u64,
    /// Its interpreter was ended by a pause that evicted it; what could be saved of its state
    /// is loaded again by the resume or its next cell.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub evicted: bool,
}

/// The engine's record of a context.
#[derive(Debug, Clone)]
pub(crate) struct ContextMeta {
    id: String,
    language: Language,
    created_ms: u64,
    last_used_ms: u64,
    executions: u64,
    restarts: u64,
    evicted: bool,
    /// Listed, with no interpreter yet: taken up after a restart of the daemon.
    pending: bool,
}

impl ContextMeta {
    fn info(&self, sandbox_id: &str) -> ContextInfo {
        ContextInfo {
            id: self.id.clone(),
            sandbox_id: sandbox_id.to_owned(),
            language: self.language.to_string(),
            created_at: warden_types::rfc3339(self.created_ms),
            last_used_at: warden_types::rfc3339(self.last_used_ms),
            executions: self.executions,
            restarts: self.restarts,
            evicted: self.evicted,
        }
    }
}

/// A sandbox's contexts.
#[derive(Debug, Default)]
pub(crate) struct Contexts {
    live: std::sync::Mutex<BTreeMap<String, ContextMeta>>,
    /// Held while a context is created.
    creating: tokio::sync::Mutex<()>,
}

impl Contexts {
    /// How many contexts the sandbox has (live, evicted or pending).
    pub(crate) fn count(&self) -> usize {
        self.live.lock().expect("not poisoned").len()
    }

    /// The contexts of a sandbox taken from a warm pool: its default context, started (with
    /// the profile's preloaded modules) at `started_ms`.
    pub(crate) fn holding_default(language: Language, started_ms: u64) -> Contexts {
        let meta = ContextMeta {
            id: DEFAULT_CONTEXT.to_owned(),
            language,
            created_ms: started_ms,
            last_used_ms: started_ms,
            executions: 0,
            restarts: 0,
            evicted: false,
            pending: false,
        };
        let contexts = Contexts::default();
        contexts
            .live
            .lock()
            .expect("not poisoned")
            .insert(DEFAULT_CONTEXT.to_owned(), meta);
        contexts
    }

    /// The contexts of a durable sandbox taken up after a restart: listed, none running.
    pub(crate) fn restored(records: &[crate::store::ContextRecord]) -> Contexts {
        let contexts = Contexts::default();
        {
            let mut live = contexts.live.lock().expect("not poisoned");
            for r in records {
                let Ok(language) = Language::new(&r.language) else {
                    continue;
                };
                live.insert(
                    r.id.clone(),
                    ContextMeta {
                        id: r.id.clone(),
                        language,
                        created_ms: r.created_ms,
                        last_used_ms: r.created_ms,
                        executions: 0,
                        restarts: 0,
                        evicted: false,
                        pending: true,
                    },
                );
            }
        }
        contexts
    }

    /// What a durable sandbox's record keeps of its contexts.
    pub(crate) fn records(&self) -> Vec<crate::store::ContextRecord> {
        self.live
            .lock()
            .expect("not poisoned")
            .values()
            .map(|m| crate::store::ContextRecord {
                id: m.id.clone(),
                language: m.language.to_string(),
                created_ms: m.created_ms,
            })
            .collect()
    }

    fn get(&self, id: &str) -> Option<ContextMeta> {
        self.live.lock().expect("not poisoned").get(id).cloned()
    }

    /// Every context, oldest first.
    fn all(&self) -> Vec<ContextMeta> {
        let mut all: Vec<_> = self
            .live
            .lock()
            .expect("not poisoned")
            .values()
            .cloned()
            .collect();
        all.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then(a.id.cmp(&b.id)));
        all
    }

    fn update(&self, id: &str, f: impl FnOnce(&mut ContextMeta)) {
        if let Some(meta) = self.live.lock().expect("not poisoned").get_mut(id) {
            f(meta);
        }
    }
}

impl Sandboxes {
    /// Resolves a context's language (default: the sandbox's) to its runtime command.
    fn context_runtime(
        &self,
        entry: &Entry,
        language: Option<String>,
    ) -> Result<(Language, Vec<String>), EngineError> {
        let (_, plan) = self.engine().prepare(&ExecRequest {
            code: String::new(),
            language: Some(language.unwrap_or_else(|| entry.language.clone())),
            profile: Some(entry.profile.clone()),
            ..ExecRequest::default()
        })?;
        if !CONTEXT_LANGUAGES.contains(&plan.language.as_str()) {
            return Err(EngineError::InvalidRequest {
                field: "language",
                message: format!(
                    "contexts support {} only, not {}",
                    CONTEXT_LANGUAGES.join(", "),
                    plan.language
                ),
            });
        }
        Ok((plan.language, plan.command))
    }

    /// What a context of a sandbox of `profile` is started with. The default context, and
    /// only it, gets the profile's preloaded modules, whether it is made on first use or ahead
    /// of time in a pooled sandbox (see [`crate::pool`]): both are the same context.
    pub(crate) fn context_spec(
        &self,
        profile: &str,
        id: String,
        language: Language,
        command: Vec<String>,
        limits: warden_types::Limits,
    ) -> ContextSpec {
        let preload = if id == DEFAULT_CONTEXT && language.as_str() == "python" {
            self.engine()
                .settings()
                .profile(profile)
                .map(|p| p.preload_modules.clone())
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let import_guard = self
            .engine()
            .settings()
            .profile(profile)
            .and_then(|p| crate::import_guard::for_profile(p, &language));
        ContextSpec {
            id,
            language,
            command,
            limits,
            preload,
            import_guard,
        }
    }

    /// Creates a context with `id` (the caller holds `entry.contexts.creating`).
    async fn start_context(
        &self,
        entry: &Entry,
        id: String,
        language: Language,
        command: Vec<String>,
    ) -> Result<ContextMeta, EngineError> {
        if entry.contexts.live.lock().expect("not poisoned").len() >= MAX_CONTEXTS {
            return Err(EngineError::TooManyContexts { max: MAX_CONTEXTS });
        }
        let _claim = self.claim_context()?;
        entry
            .handle
            .create_context(self.context_spec(
                &entry.profile,
                id.clone(),
                language.clone(),
                command,
                entry.limits.clone(),
            ))
            .await?;
        let now = warden_types::now_ms();
        let meta = ContextMeta {
            id: id.clone(),
            language,
            created_ms: now,
            last_used_ms: now,
            executions: 0,
            restarts: 0,
            evicted: false,
            pending: false,
        };
        entry
            .contexts
            .live
            .lock()
            .expect("not poisoned")
            .insert(id.clone(), meta.clone());
        // A durable sandbox's record lists it, or it is not made.
        if let Err(e) = self.save(entry) {
            entry
                .contexts
                .live
                .lock()
                .expect("not poisoned")
                .remove(&id);
            let _ = entry.handle.destroy_context(&id).await;
            return Err(e);
        }
        Ok(meta)
    }

    /// Starts a new context in a sandbox; returns once its interpreter is ready. Starting an
    /// interpreter costs as much as an execution: it takes a slot.
    pub async fn create_context(
        &self,
        caller: &Caller,
        sandbox: &str,
        req: CreateContext,
    ) -> Result<ContextInfo, EngineError> {
        let entry = self.find(caller.owner(), sandbox)?;
        let (language, command) = self.context_runtime(&entry, req.language)?;
        let _slot = self.engine().admit(caller).await?;
        entry.touch(Use::Files);
        let _creating = entry.contexts.creating.lock().await;
        let id = format!("ctx-{}", &uuid::Uuid::now_v7().simple().to_string()[20..32]);
        let meta = self.start_context(&entry, id, language, command).await?;
        Ok(meta.info(&entry.id))
    }

    /// The sandbox's contexts, oldest first.
    pub fn list_contexts(
        &self,
        owner: Option<&str>,
        sandbox: &str,
    ) -> Result<Vec<ContextInfo>, EngineError> {
        let entry = self.find(owner, sandbox)?;
        let live = entry.contexts.live.lock().expect("not poisoned");
        let mut out: Vec<_> = live.values().map(|m| m.info(&entry.id)).collect();
        out.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        Ok(out)
    }

    pub fn get_context(
        &self,
        owner: Option<&str>,
        sandbox: &str,
        id: &str,
    ) -> Result<ContextInfo, EngineError> {
        let entry = self.find(owner, sandbox)?;
        let meta = entry
            .contexts
            .get(id)
            .ok_or_else(|| EngineError::ContextNotFound(id.to_owned()))?;
        Ok(meta.info(&entry.id))
    }

    /// Ends a context (its state is lost); returns its id.
    pub async fn destroy_context(
        &self,
        owner: Option<&str>,
        sandbox: &str,
        id: &str,
    ) -> Result<String, EngineError> {
        let entry = self.find(owner, sandbox)?;
        let removed = entry.contexts.live.lock().expect("not poisoned").remove(id);
        if removed.is_none() {
            return Err(EngineError::ContextNotFound(id.to_owned()));
        }
        entry.handle.destroy_context(id).await?;
        self.save(&entry)?;
        Ok(id.to_owned())
    }

    /// Replaces a context's interpreter with a fresh one (its state is lost); takes a slot,
    /// as a create does.
    pub async fn restart_context(
        &self,
        caller: &Caller,
        sandbox: &str,
        id: &str,
    ) -> Result<ContextInfo, EngineError> {
        let entry = self.find(caller.owner(), sandbox)?;
        let Some(meta) = entry.contexts.get(id) else {
            return Err(EngineError::ContextNotFound(id.to_owned()));
        };
        let _slot = self.engine().admit(caller).await?;
        entry.touch(Use::Files);
        // A pending context with a saved state is taken up evicted: the restart drops it.
        if !meta.pending || !self.start_pending(&entry, id).await? {
            entry.handle.restart_context(id).await?;
        }
        entry.contexts.update(id, |m| {
            m.evicted = false;
            m.restarts += 1;
            m.last_used_ms = warden_types::now_ms();
        });
        let meta = entry
            .contexts
            .get(id)
            .ok_or_else(|| EngineError::ContextNotFound(id.to_owned()))?;
        Ok(meta.info(&entry.id))
    }

    /// Checks an execution that names a context, before it is admitted: the context exists
    /// (or is the default one, made on first use) and there is no stdin or args. Returns the
    /// context's language, the one its cells run in.
    pub(crate) fn check_context_exec(
        entry: &Entry,
        context: &str,
        req: &crate::SandboxExec,
    ) -> Result<String, EngineError> {
        for (field, set) in [
            ("stdin", !req.stdin.is_empty() || req.live_stdin),
            ("args", !req.args.is_empty()),
            ("env", !req.env.is_empty()),
            ("cwd", req.cwd.is_some()),
        ] {
            if set {
                return Err(EngineError::InvalidRequest {
                    field,
                    message: "not available in a context (the interpreter is already running)"
                        .into(),
                });
            }
        }
        match entry.contexts.get(context) {
            Some(meta) => Ok(meta.language.to_string()),
            None if context == DEFAULT_CONTEXT => Ok(CONTEXT_LANGUAGES[0].to_owned()),
            None => Err(EngineError::ContextNotFound(context.to_owned())),
        }
    }

    /// Refuses a cell whose language (resolved: aliases are the same language) is not its
    /// context's.
    pub(crate) fn check_context_language(
        entry: &Entry,
        context: &str,
        language: &Language,
    ) -> Result<(), EngineError> {
        let runs = entry
            .contexts
            .get(context)
            .map(|m| m.language)
            .unwrap_or_else(|| Language::new(CONTEXT_LANGUAGES[0]).expect("a valid name"));
        if &runs != language {
            return Err(EngineError::InvalidRequest {
                field: "language",
                message: format!("context {context:?} runs {runs}, not {language}"),
            });
        }
        Ok(())
    }

    /// Takes up a pending context (see the module docs): evicted if the workspace holds its
    /// saved state (its next cell loads it), else with a fresh interpreter. Returns whether
    /// this call started a fresh one (not when another did meanwhile, nor when evicted).
    async fn start_pending(&self, entry: &Entry, id: &str) -> Result<bool, EngineError> {
        let _creating = entry.contexts.creating.lock().await;
        let Some(meta) = entry.contexts.get(id) else {
            return Err(EngineError::ContextNotFound(id.to_owned()));
        };
        if !meta.pending {
            return Ok(false);
        }
        let (language, command) = self.context_runtime(entry, Some(meta.language.to_string()))?;
        let spec = self.context_spec(
            &entry.profile,
            id.to_owned(),
            language,
            command,
            entry.limits.clone(),
        );
        if entry.handle.adopt_context(spec.clone()).await? {
            entry.contexts.update(id, |m| {
                m.pending = false;
                m.evicted = true;
            });
            return Ok(false);
        }
        entry.handle.create_context(spec).await?;
        entry.contexts.update(id, |m| m.pending = false);
        Ok(true)
    }

    /// Runs a prepared cell in its context, creating the default context on first use.
    pub(crate) async fn run_in_context(
        &self,
        prepared: PreparedExec,
        context: String,
        events: Option<EventSender>,
    ) -> Result<ExecResult, EngineError> {
        let entry: Arc<Entry> = prepared.entry;
        let plan = prepared.plan;
        if entry.contexts.get(&context).is_none() {
            if context != DEFAULT_CONTEXT {
                return Err(EngineError::ContextNotFound(context));
            }
            let _creating = entry.contexts.creating.lock().await;
            if entry.contexts.get(&context).is_none() {
                let (language, command) = (plan.language.clone(), plan.command.clone());
                self.start_context(&entry, context.clone(), language, command)
                    .await?;
            }
        }
        // A context taken up after a restart of the daemon starts fresh here, and says so.
        let started_fresh = entry.contexts.get(&context).is_some_and(|m| m.pending)
            && self.start_pending(&entry, &context).await?;
        entry.touch(Use::ExecStart);
        let result = entry
            .handle
            .exec_in_context(
                &context,
                CellPlan {
                    code: plan.code,
                    timeout: plan.limits.timeout,
                    interrupt_grace: INTERRUPT_GRACE,
                },
                events,
            )
            .await;
        entry.touch(Use::ExecEnd);
        let mut result = result?;
        if started_fresh {
            result.cell.context_restarted = Some(true);
        }
        let restarted = result.cell.context_restarted == Some(true);
        entry.contexts.update(&context, |m| {
            m.executions += 1;
            m.last_used_ms = warden_types::now_ms();
            // An evicted context's interpreter was started, and its state loaded, for it.
            m.evicted = false;
            if restarted {
                m.restarts += 1;
            }
        });
        Ok(result)
    }

    /// Evicts the sandbox's Python contexts (saves what can be saved of each, ends its
    /// interpreter); the others stay in memory. The caller then freezes the sandbox.
    pub(crate) async fn evict_contexts(
        &self,
        entry: &Entry,
    ) -> Result<(Vec<EvictedContext>, Vec<KeptContext>), EngineError> {
        let (mut evicted, mut kept) = (Vec::new(), Vec::new());
        for meta in entry.contexts.all() {
            // Evicted already, or taken up after a restart with no interpreter yet: nothing
            // is held in memory.
            if meta.evicted || meta.pending {
                continue;
            }
            if meta.language.as_str() != CONTEXT_LANGUAGES[0] {
                kept.push(KeptContext {
                    context: meta.id,
                    why: format!("{} contexts cannot be saved: kept in memory", meta.language),
                });
                continue;
            }
            let eviction = entry
                .handle
                .evict_context(&meta.id, entry.limits.timeout)
                .await?;
            entry.contexts.update(&meta.id, |m| m.evicted = true);
            evicted.push(EvictedContext {
                context: meta.id,
                eviction,
            });
        }
        Ok((evicted, kept))
    }

    /// Saves the state of the sandbox's running Python contexts in its workspace, for a copy
    /// of it (a snapshot, a fork) to carry; the interpreters go on. Returns what each context
    /// of the copy will have: saved and unsaved names (a context whose state is not saved —
    /// another language's, or a failed save — is named with `*`: it starts afresh in the
    /// copy), and the ids saved now, which [`Sandboxes::discard_saved_contexts`] removes
    /// from this sandbox after the copy. An evicted context's state is in the workspace
    /// already, and goes as it is.
    pub(crate) async fn save_contexts(&self, entry: &Entry) -> (Vec<EvictedContext>, Vec<String>) {
        let (mut report, mut saved_now) = (Vec::new(), Vec::new());
        for meta in entry.contexts.all() {
            let unsaved = |why: String| Eviction {
                saved: Vec::new(),
                unsaved: vec![Unsaved {
                    name: "*".into(),
                    why,
                }],
                bytes: 0,
            };
            let eviction = if meta.evicted || meta.pending {
                // Its state (if any) is a file of the workspace already.
                continue;
            } else if meta.language.as_str() != CONTEXT_LANGUAGES[0] {
                unsaved(format!(
                    "{} contexts cannot be saved: the copy's starts afresh",
                    meta.language
                ))
            } else {
                match entry
                    .handle
                    .save_context(&meta.id, entry.limits.timeout)
                    .await
                {
                    Ok(eviction) => {
                        saved_now.push(meta.id.clone());
                        eviction
                    }
                    Err(e) => unsaved(format!(
                        "the state could not be saved: {e}; the copy's starts afresh"
                    )),
                }
            };
            report.push(EvictedContext {
                context: meta.id,
                eviction,
            });
        }
        (report, saved_now)
    }

    /// Removes from the sandbox the states [`Sandboxes::save_contexts`] saved for a copy.
    pub(crate) async fn discard_saved_contexts(&self, entry: &Entry, ids: &[String]) {
        for id in ids {
            if let Err(e) = entry.handle.discard_saved_context(id).await {
                eprintln!(
                    "warden: removing the saved state of context {id} of {}: {e}",
                    entry.id
                );
            }
        }
    }

    /// Loads the state of the sandbox's evicted contexts into fresh interpreters. A context
    /// whose load failed is no longer evicted either (its next cell starts afresh); the
    /// failure is its entry's `unsaved`.
    pub(crate) async fn restore_contexts(&self, entry: &Entry) -> Vec<RestoredContext> {
        let mut restored = Vec::new();
        for meta in entry.contexts.all().into_iter().filter(|m| m.evicted) {
            let outcome = entry
                .handle
                .restore_context(&meta.id, entry.limits.timeout)
                .await;
            entry.contexts.update(&meta.id, |m| m.evicted = false);
            let restoration = match outcome {
                Ok(Some(r)) => r,
                Ok(None) => continue,
                Err(e) => Restoration {
                    restored: Vec::new(),
                    unsaved: vec![Unsaved {
                        name: "*".into(),
                        why: format!("the state could not be loaded: {e}"),
                    }],
                },
            };
            restored.push(RestoredContext {
                context: meta.id,
                restoration,
            });
        }
        restored
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Backend, BackendError, BackendSandbox, ExecPlan, SandboxSpec};
    use crate::sandboxes::{CreateSandbox, SandboxExec};
    use crate::{Engine, Sandboxes};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};
    use warden_config::{BackendKind, Settings};
    use warden_types::{CellOutput, Reason};

    /// A sandbox whose contexts are counters: each cell answers with the context's id and how
    /// many cells it ran; `supports: false` keeps the trait's refusing defaults.
    #[derive(Debug, Default)]
    struct FakeSandbox {
        supports: bool,
        created: Mutex<Vec<ContextSpec>>,
        cells: Mutex<Vec<(String, CellPlan)>>,
        destroyed: Mutex<Vec<String>>,
        die_next: AtomicBool,
    }

    fn result(cell: CellOutput) -> ExecResult {
        ExecResult {
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
            cell,
            egress: Default::default(),
        }
    }

    #[async_trait::async_trait]
    impl BackendSandbox for FakeSandbox {
        async fn exec(
            &self,
            _: ExecPlan,
            _: Option<EventSender>,
        ) -> Result<ExecResult, BackendError> {
            Ok(result(CellOutput::default()))
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
            Ok(())
        }
        async fn create_context(&self, spec: ContextSpec) -> Result<(), BackendError> {
            if !self.supports {
                return Err(BackendError::Refused(crate::NO_CONTEXTS.into()));
            }
            // Slow enough for two concurrent first uses of `default` to overlap.
            tokio::time::sleep(Duration::from_millis(20)).await;
            self.created.lock().unwrap().push(spec);
            Ok(())
        }
        async fn exec_in_context(
            &self,
            id: &str,
            cell: CellPlan,
            _: Option<EventSender>,
        ) -> Result<ExecResult, BackendError> {
            let mut cells = self.cells.lock().unwrap();
            cells.push((id.to_owned(), cell));
            let n = cells.iter().filter(|(c, _)| c == id).count() as u64;
            let died = self.die_next.swap(false, Ordering::SeqCst);
            Ok(result(CellOutput {
                text: Some(id.to_owned()),
                execution_count: Some(n),
                context_restarted: Some(died),
                ..CellOutput::default()
            }))
        }
        async fn destroy_context(&self, id: &str) -> Result<(), BackendError> {
            self.destroyed.lock().unwrap().push(id.to_owned());
            Ok(())
        }
        async fn restart_context(&self, _: &str) -> Result<(), BackendError> {
            Ok(())
        }
    }

    #[derive(Debug)]
    struct FakeBackend(Arc<FakeSandbox>);

    #[async_trait::async_trait]
    impl Backend for FakeBackend {
        fn name(&self) -> &'static str {
            "fake"
        }
        fn check(&self, _: &ExecPlan) -> Result<(), BackendError> {
            Ok(())
        }
        async fn exec(
            &self,
            _: ExecPlan,
            _: Option<EventSender>,
        ) -> Result<ExecResult, BackendError> {
            Ok(result(CellOutput::default()))
        }
        async fn create_sandbox(
            &self,
            _: SandboxSpec,
        ) -> Result<Arc<dyn BackendSandbox>, BackendError> {
            Ok(self.0.clone())
        }
        async fn remove_orphans(&self, _: &[String]) -> Result<usize, BackendError> {
            Ok(0)
        }
    }

    async fn setup(supports: bool) -> (Sandboxes, Arc<FakeSandbox>, String) {
        let sandbox = Arc::new(FakeSandbox {
            supports,
            ..FakeSandbox::default()
        });
        let engine = Engine::new(Arc::new(Settings::builtin()))
            .with_backend(BackendKind::Jail, Arc::new(FakeBackend(sandbox.clone())));
        let sandboxes = Sandboxes::new(engine, 4);
        let info = sandboxes
            .create(&Caller::default(), CreateSandbox::default())
            .await
            .unwrap();
        (sandboxes, sandbox, info.id)
    }

    fn cell(code: &str, context: &str) -> SandboxExec {
        SandboxExec {
            code: code.into(),
            context: Some(context.into()),
            ..SandboxExec::default()
        }
    }

    async fn exec(s: &Sandboxes, id: &str, req: SandboxExec) -> Result<ExecResult, EngineError> {
        s.start_exec(&Caller::default(), id, req)
            .await?
            .finish()
            .await
    }

    #[tokio::test]
    async fn the_default_context_is_made_once_on_first_use_and_counted() {
        let (s, fake, id) = setup(true).await;
        let (a, b) = tokio::join!(
            exec(&s, &id, cell("x = 1", DEFAULT_CONTEXT)),
            exec(&s, &id, cell("x", DEFAULT_CONTEXT))
        );
        a.unwrap();
        b.unwrap();
        let created = fake.created.lock().unwrap().clone();
        assert_eq!(created.len(), 1, "{created:?}");
        assert_eq!(created[0].id, DEFAULT_CONTEXT);
        assert_eq!(created[0].language.as_str(), "python");
        assert_eq!(created[0].command, ["python3"]);
        // The sandbox's limits (the standard profile's), and the cell's own timeout.
        assert_eq!(created[0].limits.memory_mb, 128);
        let (_, plan) = fake.cells.lock().unwrap()[0].clone();
        assert_eq!(plan.timeout, Duration::from_secs(30));
        assert_eq!(plan.interrupt_grace, INTERRUPT_GRACE);
        fake.die_next.store(true, Ordering::SeqCst);
        let r = exec(&s, &id, cell("1", DEFAULT_CONTEXT)).await.unwrap();
        assert_eq!(r.cell.context_restarted, Some(true));
        let info = s.get_context(None, &id, DEFAULT_CONTEXT).unwrap();
        assert_eq!((info.executions, info.restarts), (3, 1));
        assert_eq!(info.sandbox_id, id);
    }

    #[tokio::test]
    async fn cells_are_checked_like_executions() {
        let (s, fake, id) = setup(true).await;
        let ctx = s
            .create_context(&Caller::default(), &id, CreateContext::default())
            .await
            .unwrap();
        assert!(ctx.id.starts_with("ctx-"), "{ctx:?}");
        // The profile's policies apply to cells (standard: forbidden_imports).
        let err = exec(&s, &id, cell("import os", &ctx.id)).await.unwrap_err();
        assert!(matches!(err, EngineError::PolicyViolation(_)), "{err:?}");
        let err = exec(&s, &id, cell("1", "ctx-missing")).await.unwrap_err();
        assert_eq!(err, EngineError::ContextNotFound("ctx-missing".into()));
        let mut with_stdin = cell("1", &ctx.id);
        with_stdin.stdin = b"x".to_vec();
        let err = exec(&s, &id, with_stdin).await.unwrap_err();
        assert!(
            matches!(err, EngineError::InvalidRequest { field: "stdin", .. }),
            "{err:?}"
        );
        let mut bash = cell("echo", &ctx.id);
        bash.language = Some("bash".into());
        let err = exec(&s, &id, bash).await.unwrap_err();
        assert!(
            matches!(
                err,
                EngineError::InvalidRequest {
                    field: "language",
                    ..
                }
            ),
            "{err:?}"
        );
        // An alias of the context's language is the same language.
        let mut py = cell("1", &ctx.id);
        py.language = Some("py".into());
        exec(&s, &id, py).await.unwrap();
        let err = s
            .create_context(
                &Caller::default(),
                &id,
                CreateContext {
                    language: Some("bash".into()),
                },
            )
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                EngineError::InvalidRequest {
                    field: "language",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            fake.cells.lock().unwrap().len(),
            1,
            "only the accepted cell ran"
        );
        // A JavaScript context (an alias names it too): its cells are JavaScript, it gets no
        // (Python) preload, and a cell in another language is refused there.
        let js = s
            .create_context(
                &Caller::default(),
                &id,
                CreateContext {
                    language: Some("node".into()),
                },
            )
            .await
            .unwrap();
        assert_eq!(js.language, "javascript");
        {
            let created = fake.created.lock().unwrap();
            let spec = created.last().unwrap();
            assert_eq!(spec.language.as_str(), "javascript");
            assert_eq!(spec.command, ["node"]);
            assert!(spec.preload.is_empty());
        }
        let mut js_cell = cell("1 + 1", &js.id);
        js_cell.language = Some("javascript".into());
        exec(&s, &id, js_cell).await.unwrap();
        // A cell that names no language runs in its context's.
        exec(&s, &id, cell("2", &js.id)).await.unwrap();
        let mut py_cell = cell("1", &js.id);
        py_cell.language = Some("python".into());
        let err = exec(&s, &id, py_cell).await.unwrap_err();
        assert!(
            matches!(
                err,
                EngineError::InvalidRequest {
                    field: "language",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(fake.cells.lock().unwrap().len(), 3);
        // Plain executions still run as fresh runs.
        let plain = exec(
            &s,
            &id,
            SandboxExec {
                code: "print(1)".into(),
                ..SandboxExec::default()
            },
        )
        .await
        .unwrap();
        assert_eq!(plain.cell, CellOutput::default());
    }

    /// The daemon's room for contexts in all sandboxes (its descriptors): one past it is
    /// refused with a code and a message naming what to raise, whichever way it is started,
    /// and the room comes back when a context or its sandbox goes.
    #[tokio::test]
    async fn contexts_past_the_hosts_room_are_refused_cleanly() {
        let (s, _fake, first) = setup(true).await;
        let s = s.with_max_contexts(2);
        let second = s
            .create(&Caller::default(), CreateSandbox::default())
            .await
            .unwrap()
            .id;
        let third = s
            .create(&Caller::default(), CreateSandbox::default())
            .await
            .unwrap()
            .id;
        let made = s
            .create_context(&Caller::default(), &first, CreateContext::default())
            .await
            .unwrap();
        exec(&s, &second, cell("x = 1", DEFAULT_CONTEXT))
            .await
            .unwrap();
        let full = EngineError::HostContextsFull { max: 2 };
        let err = s
            .create_context(&Caller::default(), &third, CreateContext::default())
            .await
            .unwrap_err();
        assert_eq!(err, full);
        assert_eq!(err.code(), "host_contexts_full");
        let message = err.to_string();
        assert!(
            message.contains("max_sandboxes") && message.contains("LimitNOFILE"),
            "{message}"
        );
        // The default context, made by the first cell that names it, too.
        let err = exec(&s, &third, cell("x = 1", DEFAULT_CONTEXT))
            .await
            .unwrap_err();
        assert_eq!(err, full);
        assert!(s.list_contexts(None, &third).unwrap().is_empty());
        // A context that goes gives its room back; so does a sandbox with its contexts.
        s.destroy_context(None, &first, &made.id).await.unwrap();
        s.create_context(&Caller::default(), &third, CreateContext::default())
            .await
            .unwrap();
        assert_eq!(
            s.create_context(&Caller::default(), &first, CreateContext::default())
                .await
                .unwrap_err(),
            full
        );
        s.destroy(None, &second).await.unwrap();
        s.create_context(&Caller::default(), &first, CreateContext::default())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn contexts_are_bounded_listed_and_destroyed() {
        let (s, fake, id) = setup(true).await;
        for _ in 0..MAX_CONTEXTS {
            s.create_context(&Caller::default(), &id, CreateContext::default())
                .await
                .unwrap();
        }
        let err = s
            .create_context(&Caller::default(), &id, CreateContext::default())
            .await
            .unwrap_err();
        assert_eq!(err, EngineError::TooManyContexts { max: MAX_CONTEXTS });
        let list = s.list_contexts(None, &id).unwrap();
        assert_eq!(list.len(), MAX_CONTEXTS);
        let victim = list[0].id.clone();
        assert_eq!(s.destroy_context(None, &id, &victim).await.unwrap(), victim);
        assert_eq!(
            *fake.destroyed.lock().unwrap(),
            std::slice::from_ref(&victim)
        );
        assert_eq!(
            s.get_context(None, &id, &victim).unwrap_err(),
            EngineError::ContextNotFound(victim.clone())
        );
        assert!(s.destroy_context(None, &id, &victim).await.is_err());
        let restarted = s
            .restart_context(&Caller::default(), &id, &list[1].id)
            .await
            .unwrap();
        assert_eq!(restarted.restarts, 1);
        assert!(matches!(
            s.list_contexts(None, "sb-none"),
            Err(EngineError::SandboxNotFound(_))
        ));
    }

    #[tokio::test]
    async fn a_backend_without_contexts_refuses() {
        let (s, _, id) = setup(false).await;
        let err = exec(&s, &id, cell("1", DEFAULT_CONTEXT)).await.unwrap_err();
        assert_eq!(
            err,
            EngineError::Backend(BackendError::Refused(crate::NO_CONTEXTS.into()))
        );
        assert!(s.list_contexts(None, &id).unwrap().is_empty());
    }

    /// A backend whose sandboxes are durable: each restore gives the shared fake (no context
    /// running: the engine must start them again).
    #[derive(Debug)]
    struct DurableFake(Arc<FakeSandbox>);

    #[async_trait::async_trait]
    impl Backend for DurableFake {
        fn name(&self) -> &'static str {
            "fake"
        }
        fn check(&self, _: &ExecPlan) -> Result<(), BackendError> {
            Ok(())
        }
        async fn exec(
            &self,
            _: ExecPlan,
            _: Option<EventSender>,
        ) -> Result<ExecResult, BackendError> {
            Ok(result(CellOutput::default()))
        }
        async fn create_sandbox(
            &self,
            _: SandboxSpec,
        ) -> Result<Arc<dyn BackendSandbox>, BackendError> {
            Ok(self.0.clone())
        }
        fn supports_durable(&self) -> bool {
            true
        }
        async fn create_durable_sandbox(
            &self,
            _: SandboxSpec,
            dir: &std::path::Path,
        ) -> Result<Arc<dyn BackendSandbox>, BackendError> {
            std::fs::write(dir.join("image"), b"files").unwrap();
            Ok(self.0.clone())
        }
        async fn restore_sandbox(
            &self,
            spec: SandboxSpec,
            dir: &std::path::Path,
        ) -> Result<Arc<dyn BackendSandbox>, BackendError> {
            assert_eq!(std::fs::read(dir.join("image")).unwrap(), b"files");
            assert_eq!(spec.limits.memory_mb, 100, "the sandbox's own limits");
            Ok(self.0.clone())
        }
        async fn remove_orphans(&self, _: &[String]) -> Result<usize, BackendError> {
            Ok(0)
        }
    }

    fn durable_sandboxes(dir: &std::path::Path, fake: &Arc<FakeSandbox>) -> Sandboxes {
        let engine = Engine::new(Arc::new(Settings::builtin()))
            .with_backend(BackendKind::Jail, Arc::new(DurableFake(fake.clone())));
        Sandboxes::new(engine, 4).with_store(crate::Store::open(dir).unwrap())
    }

    #[tokio::test]
    async fn a_durable_sandbox_comes_back_with_its_contexts_restarted_and_destroy_forgets_it() {
        let dir = tempfile::tempdir().unwrap();
        let fake = Arc::new(FakeSandbox {
            supports: true,
            ..FakeSandbox::default()
        });
        let alice = Caller {
            owner: Some("alice".into()),
            ..Caller::default()
        };
        let (made, ctx) = {
            let s = durable_sandboxes(dir.path(), &fake);
            let made = s
                .create(
                    &alice,
                    CreateSandbox {
                        name: Some("nb".into()),
                        labels: [("team".to_owned(), "blue".to_owned())].into(),
                        memory_mb: Some(100),
                        ..CreateSandbox::default()
                    },
                )
                .await
                .unwrap();
            s.start_exec(&alice, &made.id, cell("x = 1", DEFAULT_CONTEXT))
                .await
                .unwrap()
                .finish()
                .await
                .unwrap();
            let ctx = s
                .create_context(&alice, &made.id, CreateContext::default())
                .await
                .unwrap();
            (made, ctx.id)
            // Dropped without a shutdown: a crash.
        };
        assert_eq!(fake.created.lock().unwrap().len(), 2);
        let s = durable_sandboxes(dir.path(), &fake);
        let restored = s.restore().await.unwrap();
        assert_eq!(restored.restored, vec![made.id.clone()], "{restored:?}");
        let back = s.get(Some("alice"), &made.id).unwrap();
        assert_eq!(
            (
                back.name,
                back.labels,
                back.created_at,
                back.limits.memory_mb
            ),
            (made.name, made.labels, made.created_at, 100)
        );
        assert!(s.get(None, &made.id).is_err(), "another owner sees it");
        // Its count as of the record's last writing (the context's creation, after the cell).
        assert_eq!(s.get(Some("alice"), &made.id).unwrap().executions, 1);
        let listed: Vec<String> = s
            .list_contexts(Some("alice"), &made.id)
            .unwrap()
            .into_iter()
            .map(|c| c.id)
            .collect();
        assert_eq!(listed.len(), 2, "{listed:?}");
        for context in [DEFAULT_CONTEXT, ctx.as_str()] {
            let first = s
                .start_exec(&alice, &made.id, cell("1", context))
                .await
                .unwrap()
                .finish()
                .await
                .unwrap();
            assert_eq!(first.cell.context_restarted, Some(true), "{context}");
            let next = s
                .start_exec(&alice, &made.id, cell("1", context))
                .await
                .unwrap()
                .finish()
                .await
                .unwrap();
            assert_eq!(next.cell.context_restarted, Some(false), "{context}");
        }
        // Started again once each, the default one with its preloads like any default.
        assert_eq!(fake.created.lock().unwrap().len(), 4);
        // A graceful stop writes the count: the next start has every execution.
        s.destroy_all().await;
        drop(s);
        let s = durable_sandboxes(dir.path(), &fake);
        assert_eq!(s.restore().await.unwrap().restored, vec![made.id.clone()]);
        assert_eq!(s.get(Some("alice"), &made.id).unwrap().executions, 5);
        s.destroy(Some("alice"), &made.id).await.unwrap();
        assert!(!dir.path().join("sandboxes").join(&made.id).exists());
        drop(s);
        let s = durable_sandboxes(dir.path(), &fake);
        assert_eq!(s.restore().await.unwrap(), crate::Restored::default());
    }
}
