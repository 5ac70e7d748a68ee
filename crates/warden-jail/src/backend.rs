//! The jail as an engine [`Backend`]: builds the [`JailPlan`], starts the helper process with
//! it (forked early by a single-threaded caller, see [`crate::prestart`], else started by its
//! [`crate::launcher::Launcher`]: forked by a fork server, or exec'd), and hands out sandboxes
//! with a lifetime ([`crate::sandbox`]).
//!
//! Invariants: the helper is single-threaded — launched with an empty environment but for its
//! mode and host ids (the daemon's variables never reach a sandbox), or forked by the caller
//! only when the caller has exactly one thread;
//! a caller that goes away before the result ends the sandbox (its processes killed through
//! its cgroup, the helper then tears down; killed outright after a grace period), and a helper
//! that outlives the plan's timeout by a safety margin is killed — a stuck helper becomes an
//! error, never a hang; `check` refuses what this host cannot enforce (a networked sandbox
//! without Warden's link and firewall, a part of Landlock the profile requires, a missing
//! cgroup controller), and `create_sandbox` refuses the same; every plan carries the Landlock
//! ABI the check found for its profile, which init enforces as a hard requirement.

use crate::cgroup::Hierarchy;
use crate::client::{KillHelperOnDrop, blocking, converse, encode_plan, exec_helper};
use crate::contain::landlock::{LandlockKernel, RealKernel};
use crate::held::HeldJailRun;
use crate::launcher::Launcher;
use crate::plan::{CODE_DIR, JailPlan, PlanInput};
use crate::prestart::{HelperParts, Prestarted};
use crate::sandbox::{JailSandbox, SandboxPart};
use crate::settings::{HelperStart, JailSettings, net_request};
use crate::workspace::Workspace;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use warden_engine::{
    Backend, BackendError, BackendSandbox, EventSender, ExecPlan, HeldRun, SandboxSpec,
};
use warden_types::ExecResult;
use warden_types::landlock::LandlockRequirement;

#[derive(Debug)]
pub struct JailBackend {
    settings: JailSettings,
    hierarchy: Result<Hierarchy, String>,
    /// Forked helpers not yet reaped (reaped without blocking at the next run).
    forked: std::sync::Mutex<Vec<libc::pid_t>>,
    /// A helper forked early by the caller, already creating its sandbox.
    prestarted: std::sync::Mutex<Option<Prestarted>>,
    /// What each profile requires of Landlock (a profile not named here: "available").
    landlock: BTreeMap<String, LandlockRequirement>,
    /// The kernel's Landlock, asked once per process.
    landlock_kernel: Arc<dyn LandlockKernel>,
    /// How helpers other than the one forked early are started.
    launcher: Launcher,
}

impl JailBackend {
    pub fn new(settings: JailSettings) -> JailBackend {
        let launcher = match settings.helper_start {
            HelperStart::ForkServer => Launcher::fork_server(settings.helper_exe.clone()),
            HelperStart::Exec | HelperStart::ForkWhenSingleThreaded => {
                Launcher::exec(settings.helper_exe.clone())
            }
        };
        JailBackend {
            launcher,
            settings,
            hierarchy: Hierarchy::detect().map_err(|e| format!("cannot read cgroup layout: {e}")),
            forked: std::sync::Mutex::new(Vec::new()),
            prestarted: std::sync::Mutex::new(None),
            landlock: BTreeMap::new(),
            landlock_kernel: Arc::new(RealKernel),
        }
    }

    /// What each profile requires of Landlock (the profiles' `landlock` settings); a profile
    /// not named requires what the kernel offers.
    pub fn with_landlock(mut self, per_profile: BTreeMap<String, LandlockRequirement>) -> Self {
        self.landlock = per_profile;
        self
    }

    /// Another view of the kernel's Landlock (tests: a [`crate::contain::landlock::FakeKernel`]).
    pub fn with_landlock_kernel(mut self, kernel: Arc<dyn LandlockKernel>) -> Self {
        self.landlock_kernel = kernel;
        self
    }

    /// The Landlock ABI a profile's sandboxes enforce on this kernel, or why the profile
    /// cannot run here.
    pub fn landlock_abi(&self, profile: &str) -> Result<u32, BackendError> {
        let requirement = self.landlock.get(profile).cloned().unwrap_or_default();
        requirement
            .enforce_on(self.landlock_kernel.abi())
            .map_err(|shortfall| BackendError::Refused(shortfall.to_string()))
    }

    /// Hands over a helper forked early; the next run uses it.
    pub fn adopt(self, prestarted: Option<Prestarted>) -> JailBackend {
        *self.prestarted.lock().expect("not poisoned") = prestarted;
        self
    }

    /// Builds the helper's plan for an engine plan, its network included: final before any
    /// side effect.
    pub fn plan(&self, plan: &ExecPlan) -> Result<JailPlan, BackendError> {
        let network = net_request(&self.settings.network, plan.network_enabled, &plan.egress)?;
        let code_file = PathBuf::from(CODE_DIR).join(&plan.file_name);
        let mut argv = plan.command.clone();
        argv.push(code_file.display().to_string());
        argv.extend(plan.args.iter().cloned());
        JailPlan::build(PlanInput {
            argv,
            code: plan.code.clone(),
            code_file_name: plan.file_name.clone(),
            stdin: plan.stdin.clone(),
            limits: plan.limits.clone(),
            host_paths: &self.settings.host_paths,
            ids: self.settings.ids,
            extra_env: vec![],
            shared_workspace_fd: None,
            network,
        })
        .map_err(|e| BackendError::Refused(e.to_string()))
        .and_then(|mut jail_plan| {
            jail_plan.landlock = Some(self.landlock_abi(&plan.profile)?);
            if let Some(guard) = &plan.import_guard {
                jail_plan.add_import_guard(guard, None);
            }
            // Node's one-shots wait at the same gate, cold or pooled alike.
            jail_plan.add_node_gate();
            Ok(jail_plan)
        })
    }
}

impl JailBackend {
    /// A sandbox's part of the backend: its runs map to `uid`, which its workspace holds.
    fn sandbox_part(&self, landlock: u32, uid: u32) -> SandboxPart {
        SandboxPart {
            launcher: self.launcher.clone(),
            host_paths: self.settings.host_paths.clone(),
            ids: crate::plan::IdMap {
                host: crate::plan::HostIds::Held { uid },
                ..self.settings.ids
            },
            fast_cgroup_attach: self.settings.fast_cgroup_attach,
            landlock,
        }
    }
}

#[async_trait::async_trait]
impl Backend for JailBackend {
    fn name(&self) -> &'static str {
        "jail"
    }

    fn supports_contexts(&self) -> bool {
        true
    }

    fn unsupported(&self) -> Vec<warden_engine::Unsupported> {
        vec![warden_engine::Unsupported {
            promise: "orphans",
            check: None,
            why: "a jail sandbox cannot outlive the daemon that holds its workspace, so remove_orphans has nothing to find and does not remove sandboxes the caller forgot".into(),
        }]
    }

    fn check(&self, plan: &ExecPlan) -> Result<(), BackendError> {
        // A networked sandbox runs only behind Warden's own link and firewall; a host that
        // cannot provide them refuses the profile rather than run it on the host's network.
        // Without the secrets' values: this process may fork a helper later, which would copy
        // them (see `exec`).
        if let Some(request) = crate::settings::net_request_without_values(
            &self.settings.network,
            plan.network_enabled,
            &plan.egress,
        )? {
            warden_net::check(&request)
                .map_err(|e| BackendError::Refused(format!("network_enabled = true: {e}")))?;
        }
        if let Some(runtime) = &plan.container_runtime {
            return Err(BackendError::Refused(format!(
                "container_runtime = {runtime:?}: the jail backend is not a container runtime; use backend = \"docker\" for it"
            )));
        }
        self.landlock_abi(&plan.profile)?;
        let hierarchy = self
            .hierarchy
            .as_ref()
            .map_err(|e| BackendError::Refused(e.clone()))?;
        let have = hierarchy.controllers();
        for (controller, limit) in [("memory", "memory"), ("pids", "process"), ("cpu", "cpu")] {
            if !have.contains(&controller) {
                return Err(BackendError::Refused(format!(
                    "the {limit} limit cannot be applied: no cgroup {controller} controller on this host ({})",
                    hierarchy.describe()
                )));
            }
        }
        Ok(())
    }

    async fn exec(
        &self,
        plan: ExecPlan,
        events: Option<EventSender>,
    ) -> Result<ExecResult, BackendError> {
        let timeout = plan.limits.timeout;
        let trace = std::env::var_os("WARDEN_TRACE_TIMING").is_some();
        if trace {
            eprintln!("warden-trace: {:.3} backend exec", crate::monotonic_ms());
        }
        // A helper forked from this process is forked before the plan is built: the plan
        // holds brokered secrets' values, which the helper's copy of this process's memory
        // (and the sandbox's init, cloned from it) must never hold.
        let prestarted = self.prestarted.lock().expect("not poisoned").take();
        let prestarted = prestarted.or_else(|| {
            (self.settings.helper_start == HelperStart::ForkWhenSingleThreaded)
                .then(Prestarted::fork_if_single_threaded)
                .flatten()
        });
        let mut jail_plan = self.plan(&plan)?;
        jail_plan.trace_timing = trace;
        jail_plan.quiet_output = events.is_none();
        if trace {
            eprintln!(
                "warden-trace: {:.3} backend plan built",
                crate::monotonic_ms()
            );
        }
        jail_plan.fast_cgroup_attach = self.settings.fast_cgroup_attach;
        jail_plan.cgroups = self.hierarchy.as_ref().ok().cloned();
        self.reap_forked();
        let margin = timeout + Duration::from_secs(10);
        if let Some(HelperParts {
            pid,
            plan_w,
            plan_bell,
            frames_r,
        }) = prestarted.and_then(|mut p| p.parts.take())
        {
            let guard = KillHelperOnDrop::of_own_child(pid);
            // The one-shot CLI's own helper: its whole run is waited for (see the field).
            jail_plan.init_exits_on_status = true;
            let internal = |e: std::io::Error| BackendError::Internal(format!("helper pipe: {e}"));
            let frames =
                tokio::net::unix::pipe::Receiver::from_owned_fd(frames_r).map_err(internal)?;
            // The plan fits the pipe (or the helper reads it as it comes): a blocking write.
            let send = async {
                let payload = encode_plan(&jail_plan)?;
                crate::supervisor::send_plan(plan_w, std::os::fd::AsFd::as_fd(&plan_bell), &payload)
                    .map_err(|e| std::io::Error::other(e.to_string()))
            };
            let result = converse(&jail_plan, send, frames, events, margin).await;
            guard.disarm();
            if result.is_err() {
                // SAFETY: kill and waitpid on our own child.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, std::ptr::null_mut(), 0);
                }
            } else if self.settings.wait_for_teardown {
                // SAFETY: waitpid on our own child, which exits after its clean-up.
                unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            } else {
                self.forked.lock().expect("not poisoned").push(pid);
                self.reap_forked();
            }
            return result;
        }
        exec_helper(&self.launcher, &jail_plan, events, margin, None, None, None).await
    }

    /// The same plan as [`JailBackend::exec`]'s (its code aside), run by a helper in `pooled`
    /// mode up to the interpreter's gate (see [`crate::gate`], [`crate::pooled`]).
    async fn hold(&self, plan: &ExecPlan) -> Result<Box<dyn HeldRun>, BackendError> {
        let mut jail_plan = self.plan(plan)?;
        jail_plan.code = String::new();
        jail_plan.stdin = Vec::new();
        jail_plan.trace_timing = std::env::var_os("WARDEN_TRACE_TIMING").is_some();
        jail_plan.fast_cgroup_attach = self.settings.fast_cgroup_attach;
        jail_plan.cgroups = self.hierarchy.as_ref().ok().cloned();
        let ready_within = plan.limits.timeout + Duration::from_secs(10);
        let held = HeldJailRun::start(&self.launcher, &jail_plan, ready_within).await?;
        Ok(Box::new(held))
    }

    async fn create_sandbox(
        &self,
        spec: SandboxSpec,
    ) -> Result<Arc<dyn BackendSandbox>, BackendError> {
        self.build_sandbox(spec, WorkspaceAt::Memory).await
    }

    fn supports_durable(&self) -> bool {
        true
    }

    async fn create_durable_sandbox(
        &self,
        spec: SandboxSpec,
        dir: &std::path::Path,
    ) -> Result<Arc<dyn BackendSandbox>, BackendError> {
        self.build_sandbox(spec, WorkspaceAt::NewImage(dir.to_path_buf()))
            .await
    }

    async fn restore_sandbox(
        &self,
        spec: SandboxSpec,
        dir: &std::path::Path,
    ) -> Result<Arc<dyn BackendSandbox>, BackendError> {
        self.build_sandbox(spec, WorkspaceAt::Image(dir.to_path_buf()))
            .await
    }

    /// A sandbox's workspace is a detached tmpfs held only by the daemon's descriptor, so a
    /// crashed daemon leaves no mount or tmpfs; its helpers die with it (parent-death signal)
    /// and their sandboxes with them. What remains are the cgroups of the killed helpers,
    /// removed here (see [`crate::cgroup::Hierarchy::remove_stale`]), and what their
    /// networked runs left (a slot's rules and pinned addresses; the veth pair died with the
    /// namespace), emptied here as the next run on that slot would.
    async fn remove_orphans(&self, _live: &[String]) -> Result<usize, BackendError> {
        let pool = self.settings.network.pool;
        blocking(move || {
            let h = Hierarchy::detect()
                .map_err(|e| BackendError::Internal(format!("cgroup layout: {e}")))?;
            let mut removed = 0;
            // Processes of a sandbox whose helper was just killed may take a moment to go.
            for _ in 0..25 {
                removed += h.remove_stale();
                if !h.has_stale() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let mut sys = warden_net::sys::RealSys;
            removed += warden_net::sweep(pool, std::path::Path::new(warden_net::RUN_DIR), &mut sys);
            Ok(removed)
        })
        .await
    }
}

impl JailBackend {
    /// Reaps forked helpers that have finished their clean-up, without waiting.
    fn reap_forked(&self) {
        let mut forked = self.forked.lock().expect("not poisoned");
        // SAFETY: waitpid with WNOHANG on our own children.
        forked
            .retain(|&pid| unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) } == 0);
    }
}

/// Where a sandbox's workspace is: a tmpfs, or a durable image in the sandbox's folder
/// (made now, or taken up again).
enum WorkspaceAt {
    Memory,
    NewImage(PathBuf),
    Image(PathBuf),
}

/// A durable workspace's failure: a full host disk is the caller's to know (which operation,
/// why); the rest is a setup failure.
pub(crate) fn disk_error(e: crate::disk::DiskError) -> BackendError {
    match e {
        crate::disk::DiskError::NoSpace { .. } => {
            BackendError::NoSpace(format!("make the sandbox's workspace: {e}"))
        }
        e => BackendError::Setup(format!("the durable workspace: {e}")),
    }
}

impl JailBackend {
    /// A sandbox with its workspace `at` (see [`Backend::create_sandbox`] and
    /// [`Backend::create_durable_sandbox`]).
    async fn build_sandbox(
        &self,
        spec: SandboxSpec,
        at: WorkspaceAt,
    ) -> Result<Arc<dyn BackendSandbox>, BackendError> {
        let landlock = self.landlock_abi(&spec.profile)?;
        let network = net_request(&self.settings.network, spec.network_enabled, &spec.egress)?;
        if let Some(request) = &network {
            warden_net::check(request)
                .map_err(|e| BackendError::Refused(format!("network_enabled = true: {e}")))?;
        }
        // The sandbox's own host uid, for its whole life (every run, context and file).
        let range = match self.settings.ids.host {
            crate::plan::HostIds::Lease(range) => range,
            crate::plan::HostIds::Held { uid } => warden_net::uids::UidRange {
                base: uid,
                count: 1,
            },
        };
        let workspace_mb = spec.limits.workspace_mb;
        let workspace = blocking(move || {
            let lease = range
                .lease(
                    std::path::Path::new(warden_net::uids::RUN_DIR),
                    &warden_net::uids::ProcScan,
                )
                .map_err(|e| BackendError::Refused(format!("no host uid for the sandbox: {e}")))?;
            match at {
                WorkspaceAt::Memory => Workspace::create(workspace_mb, lease)
                    .map_err(|e| BackendError::Setup(format!("create the workspace tmpfs: {e}"))),
                WorkspaceAt::NewImage(dir) => {
                    Workspace::create_on_disk(&dir, workspace_mb, lease).map_err(disk_error)
                }
                WorkspaceAt::Image(dir) => Workspace::open_on_disk(&dir, lease).map_err(disk_error),
            }
        })
        .await?;
        let uid = workspace.uid_lease().uid();
        Ok(Arc::new(JailSandbox::new(
            spec.id,
            self.sandbox_part(landlock, uid),
            network,
            workspace,
            spec.env,
            spec.home,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend() -> JailBackend {
        let network = crate::settings::NetSettings {
            upstream_dns: Some("192.0.2.53:53".parse().unwrap()),
            ..Default::default()
        };
        JailBackend::new(JailSettings {
            host_paths: vec![],
            fast_cgroup_attach: false,
            ids: crate::plan::IdMap {
                inside_uid: 1000,
                inside_gid: 1000,
                host: crate::plan::HostIds::Lease(Default::default()),
            },
            helper_exe: "/nonexistent".into(),
            helper_start: HelperStart::Exec,
            wait_for_teardown: false,
            network,
        })
    }

    fn exec_plan(network_enabled: bool, deny: &[&str]) -> ExecPlan {
        ExecPlan {
            import_guard: None,
            profile: "p".into(),
            language: serde_json::from_value(serde_json::json!("python")).unwrap(),
            command: vec!["python3".into()],
            file_name: "main.py".into(),
            code: "print(1)".into(),
            args: vec![],
            stdin: vec![],
            env: Default::default(),
            cwd: None,
            limits: warden_types::Limits {
                timeout: Duration::from_secs(1),
                memory_mb: 64,
                max_pids: 16,
                cpus: 1.0,
                max_output_bytes: 1024,
                max_file_size_bytes: 1024,
                workspace_mb: 16,
                max_artifacts: 1,
                max_artifact_bytes: 1024,
            },
            network_enabled,
            egress: warden_types::egress::EgressPolicy {
                deny_cidrs: deny.iter().map(|c| c.parse().unwrap()).collect(),
                ..Default::default()
            },
            image: None,
            container_runtime: None,
        }
    }

    fn upstream(plan: &JailPlan) -> Option<std::net::SocketAddr> {
        plan.network.as_ref().map(|n| n.request.upstream_dns)
    }

    #[test]
    fn the_plan_holds_its_network_and_its_resolv_conf_when_built() {
        let b = backend();
        let offline = b.plan(&exec_plan(false, &[])).unwrap();
        assert_eq!(offline.network, None);
        assert!(
            !offline
                .mounts
                .iter()
                .any(|m| matches!(m, crate::plan::MountOp::ResolvConf { .. }))
        );
        let online = b.plan(&exec_plan(true, &[])).unwrap();
        assert_eq!(upstream(&online), Some("192.0.2.53:53".parse().unwrap()));
        assert_eq!(
            online.mounts.last(),
            Some(&crate::plan::MountOp::ResolvConf {
                dest: "/etc/resolv.conf".into()
            })
        );
    }

    fn on_kernel(abi: u32, requirement: &str) -> JailBackend {
        let requirement: LandlockRequirement = serde_json::from_str(requirement).unwrap();
        backend()
            .with_landlock([("p".to_owned(), requirement)].into())
            .with_landlock_kernel(Arc::new(crate::contain::landlock::FakeKernel(abi)))
    }

    #[test]
    fn a_kernel_without_a_required_part_of_landlock_refuses_the_profile_before_anything_runs() {
        let plan = exec_plan(false, &[]);
        let refused = |b: JailBackend| match b.check(&plan) {
            Err(BackendError::Refused(why)) => why,
            other => panic!("not refused: {other:?}"),
        };
        assert_eq!(
            refused(on_kernel(3, r#"["filesystem", "tcp"]"#)),
            "landlock = [\"filesystem\", \"tcp\"]: this kernel's Landlock ABI is 3, so it cannot enforce tcp (ABI 4: no TCP bind; TCP connect only when networked)"
        );
        assert!(refused(on_kernel(5, r#""all""#)).contains("cannot enforce scope (ABI 6"));
        assert!(
            refused(on_kernel(0, r#""available""#))
                .contains("this kernel does not enforce Landlock")
        );
        // A sandbox with a lifetime is refused the same way, before its workspace exists.
        let spec = SandboxSpec {
            id: "t".into(),
            profile: "p".into(),
            limits: plan.limits.clone(),
            network_enabled: false,
            egress: Default::default(),
            image: None,
            container_runtime: None,
            labels: Default::default(),
            env: Default::default(),
            home: None,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let created = runtime.block_on(on_kernel(5, r#""all""#).create_sandbox(spec));
        assert!(
            matches!(&created, Err(BackendError::Refused(why)) if why.contains("scope")),
            "{created:?}"
        );
    }

    #[test]
    fn the_plan_enforces_every_part_the_kernel_offers_up_to_the_newest_warden_uses() {
        let plan = exec_plan(false, &[]);
        for (abi, requirement, enforced) in [
            (7, r#""available""#, 6),
            (6, r#""all""#, 6),
            (5, r#""available""#, 5),
            (3, r#"["filesystem"]"#, 3),
            (1, r#""available""#, 1),
        ] {
            let b = on_kernel(abi, requirement);
            assert_eq!(b.plan(&plan).unwrap().landlock, Some(enforced), "ABI {abi}");
        }
        // A profile without a setting requires what the kernel offers.
        let b = backend().with_landlock_kernel(Arc::new(crate::contain::landlock::FakeKernel(4)));
        assert_eq!(b.plan(&plan).unwrap().landlock, Some(4));
        assert!(b.plan(&plan).is_ok() && on_kernel(3, r#""all""#).plan(&plan).is_err());
    }
}
