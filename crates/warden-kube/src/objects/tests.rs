use super::*;
use std::time::Duration;

fn params() -> PodParams {
    PodParams {
        namespace: "warden-sandboxes".into(),
        sandbox_id: "sb-0001".into(),
        instance: "warden".into(),
        image: "python:3.11-slim".into(),
        image_pull_policy: "IfNotPresent".into(),
        limits: Limits {
            timeout: Duration::from_secs(30),
            memory_mb: 128,
            max_pids: 64,
            cpus: 1.0,
            max_output_bytes: 1 << 20,
            max_file_size_bytes: 16 << 20,
            workspace_mb: 64,
            max_artifacts: 32,
            max_artifact_bytes: 16 << 20,
        },
        network_enabled: false,
        runtime_class: None,
        uid: 200_123,
        keepalive_command: crate::backend::KubeSettings::default().keepalive_command,
        user_labels: BTreeMap::new(),
    }
}

#[test]
fn sandbox_pod_snapshot() {
    insta::assert_yaml_snapshot!(sandbox_pod(&params()));
}

#[test]
fn sandbox_pod_with_egress_runtime_class_and_labels_snapshot() {
    let mut p = params();
    p.network_enabled = true;
    p.runtime_class = Some("gvisor".into());
    p.limits.cpus = 0.5;
    p.limits.memory_mb = 512;
    p.user_labels = BTreeMap::from([("team".into(), "data science!".into())]);
    insta::assert_yaml_snapshot!(sandbox_pod(&p));
}

/// The hardening the issue lists, checked field by field (the snapshot shows it; this says
/// which fields must never change).
#[test]
fn the_pod_is_hardened_whatever_the_profile() {
    for network in [false, true] {
        let mut p = params();
        p.network_enabled = network;
        let pod = sandbox_pod(&p);
        let spec = pod.spec.unwrap();
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        let psc = spec.security_context.unwrap();
        assert_eq!(psc.run_as_non_root, Some(true));
        assert_ne!(psc.run_as_user, Some(0));
        assert_eq!(psc.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let c = &spec.containers[0];
        let sc = c.security_context.clone().unwrap();
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.privileged, Some(false));
        assert_eq!(sc.capabilities.unwrap().drop, Some(vec!["ALL".to_string()]));
        assert_eq!(sc.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let res = c.resources.clone().unwrap();
        assert_eq!(res.limits, res.requests, "Guaranteed QoS");
        assert_eq!(res.limits.unwrap()["memory"].0, "128Mi");
        let workspace = spec.volumes.unwrap()[0].empty_dir.clone().unwrap();
        assert_eq!(workspace.medium.as_deref(), Some("Memory"));
        assert_eq!(workspace.size_limit.unwrap().0, "64Mi");
        let labels = pod.metadata.labels.unwrap();
        assert_eq!(labels[SANDBOX_SELECTOR.0], SANDBOX_SELECTOR.1);
    }
}

#[test]
fn every_sandbox_pod_is_selected_by_the_deny_all_policy() {
    let policy = deny_all_policy("ns").spec.unwrap();
    let selector = policy.pod_selector.unwrap().match_labels.unwrap();
    for network in [false, true] {
        let mut p = params();
        p.network_enabled = network;
        let labels = sandbox_pod(&p).metadata.labels.unwrap();
        assert!(selector.iter().all(|(k, v)| labels.get(k) == Some(v)));
    }
    assert_eq!(policy.ingress, Some(vec![]));
    assert_eq!(policy.egress, Some(vec![]));
    assert_eq!(
        policy.policy_types.unwrap(),
        ["Ingress".to_string(), "Egress".to_string()]
    );
}

#[test]
fn the_egress_policy_selects_only_egress_pods_and_blocks_metadata_and_cluster_ranges() {
    let blocked = crate::backend::KubeSettings::default().egress_blocked_cidrs;
    let policy = egress_policy("ns", &blocked).spec.unwrap();
    let selector = policy.pod_selector.unwrap().match_labels.unwrap();
    let labels_of = |network| {
        let mut p = params();
        p.network_enabled = network;
        sandbox_pod(&p).metadata.labels.unwrap()
    };
    let selects = |l: &BTreeMap<String, String>| selector.iter().all(|(k, v)| l.get(k) == Some(v));
    assert!(selects(&labels_of(true)));
    assert!(!selects(&labels_of(false)));
    let rule = &policy.egress.unwrap()[0];
    let blocks: Vec<_> = rule
        .to
        .as_ref()
        .unwrap()
        .iter()
        .map(|peer| peer.ip_block.clone().unwrap())
        .collect();
    let v4 = &blocks[0];
    assert_eq!(v4.cidr, "0.0.0.0/0");
    let except = v4.except.clone().unwrap();
    // 169.254.169.254 (the metadata service) and the cluster ranges are inside an except.
    for cidr in [
        "169.254.0.0/16",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
    ] {
        assert!(except.contains(&cidr.to_string()), "{cidr} not blocked");
    }
    // An except must lie within its cidr: IPv6 ranges go with ::/0.
    assert!(except.iter().all(|c| !c.contains(':')));
    assert_eq!(blocks[1].cidr, "::/0");
    assert!(
        blocks[1]
            .except
            .clone()
            .unwrap()
            .iter()
            .all(|c| c.contains(':'))
    );
    assert_eq!(policy.policy_types.unwrap(), ["Egress".to_string()]);
}

fn deploy() -> DeployParams {
    DeployParams::defaults("warden:test")
}

#[test]
fn network_policies_snapshot() {
    let blocked = crate::backend::KubeSettings::default().egress_blocked_cidrs;
    insta::assert_yaml_snapshot!("deny_all", deny_all_policy("warden-sandboxes"));
    insta::assert_yaml_snapshot!("egress", egress_policy("warden-sandboxes", &blocked));
}

#[test]
fn rbac_snapshot() {
    let d = deploy();
    insta::assert_yaml_snapshot!("service_account", service_account(&d));
    insta::assert_yaml_snapshot!("role", role(&d));
    insta::assert_yaml_snapshot!("role_binding", role_binding(&d));
}

#[test]
fn the_role_is_least_privilege() {
    let rules = role(&deploy()).rules.unwrap();
    let mut granted: Vec<String> = rules
        .iter()
        .flat_map(|r| {
            r.resources
                .clone()
                .unwrap()
                .into_iter()
                .flat_map(move |res| {
                    r.verbs
                        .iter()
                        .map(move |v| format!("{res}:{v}"))
                        .collect::<Vec<_>>()
                })
        })
        .collect();
    granted.sort();
    assert_eq!(
        granted,
        [
            "events:list",
            "networkpolicies:create",
            "networkpolicies:get",
            "pods/exec:create",
            "pods/exec:get",
            "pods:create",
            "pods:delete",
            "pods:get",
            "pods:list",
        ]
    );
    assert!(rules.iter().all(|r| !r.verbs.contains(&"*".to_string())));
}

#[test]
fn deployment_and_service_snapshot() {
    let d = deploy();
    insta::assert_yaml_snapshot!("namespace", namespace("warden"));
    insta::assert_yaml_snapshot!("config_map", settings_config_map(&d));
    insta::assert_yaml_snapshot!("deployment", deployment(&d));
    insta::assert_yaml_snapshot!("service", service(&d));
}
