//! Warden's Kubernetes backend: every sandbox is a hardened pod in a namespace of an existing
//! cluster, code runs through the API server's exec subresource, and the objects it creates
//! (pods, NetworkPolicies) and the ones an operator applies (`deploy/kubernetes/`) come from the
//! same typed builders.
//!
//! Modules, in the order of one request: [`objects`] (typed Kubernetes objects, no I/O) →
//! [`cluster`] (the API calls behind a trait) → [`readiness`] (pod status → ready or a clear
//! error) → [`commands`] (what runs in the pod) → [`run`] (one execution over exec; its output and artifacts
//! shaped by the engine's [`warden_engine::shape`]) — tied together by [`backend`]. [`manifests`] renders `deploy/kubernetes/`.
//!
//! Invariants: no sandbox pod is created before the deny-all NetworkPolicy is in place; every
//! pod is labelled so that a restarted Warden finds (and adopts or deletes) what it created.

pub mod backend;
pub mod cluster;
pub mod commands;
pub mod manifests;
pub mod objects;
pub mod readiness;
pub mod run;

pub use backend::{KubeBackend, KubeSandbox, KubeSettings, StartupError};
pub use cluster::{Cluster, ClusterError, ExecSession, ExitStatus, KubeCluster};
