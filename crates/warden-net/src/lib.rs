//! Controlled egress for networked sandboxes (`network_enabled = true`): each sandbox gets its
//! own network namespace (made by the jail), a veth pair to the host with a /30 and an IPv6
//! /126 from two address pools, NAT (and NAT66) to the outside, and nftables rules in Warden's own table `inet warden`
//! that drop anything to the host itself, loopback, private, shared and link-local ranges
//! (`data/blocked.toml`) unless the profile allows them, refuse inbound connections, and
//! follow the profile's allow- and deny-lists; allowed names are resolved by a per-sandbox
//! resolver that pins its answers into the firewall.
//!
//! The path: [`plan::NetRequest`] (in the jail's plan) → [`host::check`] (refuse what this
//! host cannot enforce) → [`host::attach`] (lease a slot, build the [`plan::NetPlan`], run its
//! batches, start the resolver) → the sandbox's init runs [`inside::configure`] → the program
//! starts after [`host::Attached::wait_firewall`] → dropping the `Attached` removes it all.
//!
//! Backends that do not start their sandboxes through Warden's own single-threaded helper
//! (docker) run the same steps in a [`keeper`] process per sandbox, which holds them until
//! the sandbox is destroyed.
//!
//! Besides the network, the host resources the jail and docker backends lease per sandbox
//! across processes live here: [`lease`] (numbered leases by lock files, the address slots'
//! mechanism), [`uids`] (each live sandbox's own host uid) and [`disk`] (a durable sandbox's
//! workspace: a preallocated ext4 image on a loop device, with the filesystem calls of [`fsys`]).
//!
//! Invariants: the host's other tables are never changed (the one exception, Docker's
//! DOCKER-USER chain, is documented on [`host`]); every object is named after its slot so a
//! crash's leftovers are found by name; a missing per-sandbox chain means "drop".

pub mod blocked;
pub mod disk;
pub mod dns;
pub mod fsys;
pub mod gateway;
pub mod host;
pub mod inside;
pub mod keeper;
pub mod lease;
pub mod plan;
pub mod pool;
pub mod secrets;
pub mod sys;
pub mod uids;

pub use host::{Attached, HostError, RUN_DIR, attach, check, sweep};
pub use plan::{Interface, NetPlan, NetRequest};
pub use pool::{DEFAULT_POOL, DEFAULT_POOL6};
