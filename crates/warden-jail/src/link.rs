//! A networked sandbox's link to the host, made by its helper once the sandbox's network
//! namespace exists: a leased slot, the veth pair with its sandbox end in that namespace, the
//! firewall and the per-sandbox resolver (warden-net), for one-shot runs ([`crate::helper`])
//! and sessions ([`crate::session`]) alike.
//!
//! Invariants: a host that cannot give the sandbox a controlled network refuses the run,
//! never runs it on the host's network; the link lives as long as the returned
//! `warden_net::Attached` (torn down after the sandbox).

use crate::plan::{JailPlan, NetAttachment};
use crate::supervisor::{self, JailError};

/// Gives a networked plan its link (the sandbox end into the sandbox's network namespace) and
/// its resolver; returns them with what the sandbox's init needs of them (how to configure its
/// side, the resolv.conf the plan places). The plan itself is not changed.
pub(crate) fn attach_network(
    plan: &JailPlan,
    started: &mut supervisor::Started,
) -> Result<Option<(warden_net::Attached, NetAttachment)>, JailError> {
    let Some(network) = plan.network.as_ref() else {
        return Ok(None);
    };
    let attached = warden_net::attach(
        &network.request,
        started.network_namespace_path(plan)?,
        std::path::Path::new(warden_net::RUN_DIR),
        Box::new(warden_net::sys::RealSys),
    )
    .map_err(network_error)?;
    let attachment = NetAttachment {
        interface: attached.interface(),
        resolv_conf: attached.plan().resolv_conf(),
        ca_bundle: attached.ca_bundle(),
    };
    Ok(Some((attached, attachment)))
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
