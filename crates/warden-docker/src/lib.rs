//! Warden's docker backend: sandboxes as containers on a Docker Engine, through its API
//! (bollard), behind the same [`warden_engine::Backend`] trait as the native jail.
//!
//! The pieces, in the order a run takes them: [`plan`] decides every setting of the container
//! (typed, before any call); [`wrapper`] is the shell script that receives the code over the
//! attached stdin, runs the program, kills what it left and reports counters and the output
//! folder; [`relay`] reads the attached stream with the output cap and the timeout;
//! the engine's shared [`warden_engine::shape`] turns the output folder's tar into artifacts and
//! the kept output into text; [`network`] attaches Warden's
//! controlled egress to a networked container; [`backend`] makes the engine calls, each under
//! a deadline.
//!
//! A durable sandbox (a profile's `durable`; by default every sandbox with a lifetime, where
//! the engine shares the daemon's mount namespace) keeps its workspace in the jail's workspace
//! image under the daemon's data directory, bound into its container ([`durable`]); after a
//! restart its container is made again on the same workspace.
//!
//! Invariants: no host path is mounted (but a networked container's resolv.conf, read-only, a
//! file Warden writes with its resolver's address, and a durable sandbox's own workspace
//! filesystem) and nothing of a run is written to the host's disk outside that workspace (the
//! code and a sandbox's workspace live in tmpfs mounts inside the container); the root
//! is read-only, the network mode is `none` and the network disabled (a networked sandbox gets
//! Warden's own link and firewall in that namespace, never Docker's bridge), capabilities are dropped, no-new-privileges is set and the user is
//! not root; every container Warden creates carries the `dev.warden.sandbox` label and is
//! removed on every path; images are never pulled.

pub mod backend;
pub mod durable;
pub mod error;
pub mod network;
pub mod plan;
pub mod relay;
pub mod wrapper;

pub use backend::{DockerBackend, DockerSandbox, DockerSettings, EngineProbe};
pub use error::DockerError;
pub use network::NetSettings;
