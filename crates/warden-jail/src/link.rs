//! A networked sandbox's link to the host, made by its helper once the sandbox's network
//! namespace exists: a leased slot, the veth pair with its sandbox end in that namespace, the
//! firewall and the per-sandbox resolver (warden-net), for one-shot runs ([`crate::helper`])
//! and sessions ([`crate::session`]) alike.
//!
//! Invariants: a host that cannot give the sandbox a controlled network refuses the run,
//! never runs it on the host's network; the link lives as long as the returned
//! `warden_net::Attached` (torn down after the sandbox).

use crate::plan::JailPlan;
use crate::supervisor::{self, JailError};

/// Gives a networked plan its link (the sandbox end into the sandbox's network namespace) and
/// its resolver, and tells the sandbox's init how to configure its side.
pub(crate) fn attach_network(
    plan: &mut JailPlan,
    started: &mut supervisor::Started,
) -> Result<Option<warden_net::Attached>, JailError> {
    let Some(network) = plan.network.as_mut() else {
        return Ok(None);
    };
    let attached = warden_net::attach(
        &network.request,
        started.network_namespace_path()?,
        std::path::Path::new(warden_net::RUN_DIR),
        Box::new(warden_net::sys::RealSys),
    )
    .map_err(network_error)?;
    network.interface = Some(attached.interface());
    plan.mounts.push(crate::plan::MountOp::File {
        dest: "/etc/resolv.conf".into(),
        contents: attached.plan().resolv_conf(),
        mode: 0o644,
    });
    Ok(Some(attached))
}

pub(crate) fn network_error(e: warden_net::HostError) -> JailError {
    match e {
        warden_net::HostError::Unavailable(_) | warden_net::HostError::Plan(_) => {
            JailError::Refused(e.to_string())
        }
        _ => JailError::Setup {
            step: "network".into(),
            message: e.to_string(),
        },
    }
}
