//! The Kubernetes objects Warden creates, as typed values: a sandbox's pod, the NetworkPolicies
//! that select sandbox pods, and what `deploy/kubernetes/` holds (namespaces, the service
//! account with its least RBAC, the Deployment, the Service, the settings ConfigMap).
//!
//! Invariants: these are pure functions (no client, no I/O), so the backend and the generated
//! manifests are the same objects; every sandbox pod carries [`SANDBOX_SELECTOR`]'s label,
//! which is what the deny-all policy selects, so no sandbox pod (fresh or from a warm pool)
//! can exist outside it; a pod's security settings do not depend on the profile, only its
//! resources, image and RuntimeClass do.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource,
    EnvVar, HTTPGetAction, Namespace, Pod, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, SeccompProfile, SecretVolumeSource, SecurityContext, Service,
    ServiceAccount, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;
use warden_types::Limits;

/// The label every sandbox pod has and the policies select on.
pub const SANDBOX_SELECTOR: (&str, &str) = ("app.kubernetes.io/name", "warden-sandbox");
/// Marks what Warden created.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "warden");
/// The sandbox id of a pod.
pub const SANDBOX_ID_LABEL: &str = "warden.dev/sandbox";
/// Which Warden instance owns a pod (`[sandbox.kubernetes].instance`).
pub const INSTANCE_LABEL: &str = "warden.dev/instance";
/// `none` or `egress`: which network policy applies beyond deny-all.
pub const NETWORK_LABEL: &str = "warden.dev/network";
/// The caller's labels of a sandbox, as JSON: annotations take any string, labels do not.
pub const USER_LABELS_ANNOTATION: &str = "warden.dev/labels";

/// The deny-all policy's name.
pub const DENY_ALL_POLICY: &str = "warden-sandbox-deny-all";
/// The egress policy's name (for profiles with `network_enabled`).
pub const EGRESS_POLICY: &str = "warden-sandbox-egress";

/// The sandbox container's name.
pub const CONTAINER: &str = "sandbox";
/// The working directory: a memory-backed emptyDir capped at the profile's `workspace_mb`;
/// `/tmp` is a folder of the same volume, so both share the cap, as in the jail.
pub const WORKSPACE: &str = "/workspace";
/// Where the code file is written before each run (its own small memory-backed volume).
pub const CODE_DIR: &str = "/code";
/// The cap of the code volume, MiB: the code and nothing else lives there.
const CODE_VOLUME_MB: u64 = 16;

/// What a sandbox pod is built from.
#[derive(Debug, Clone, PartialEq)]
pub struct PodParams {
    pub namespace: String,
    pub sandbox_id: String,
    pub instance: String,
    pub image: String,
    pub image_pull_policy: String,
    pub limits: Limits,
    pub network_enabled: bool,
    pub runtime_class: Option<String>,
    /// The uid and gid of every process of the pod (never 0).
    pub uid: i64,
    pub keepalive_command: Vec<String>,
    pub user_labels: BTreeMap<String, String>,
}

/// The pod name of a sandbox id.
pub fn pod_name(sandbox_id: &str) -> String {
    format!("warden-{sandbox_id}")
}

/// The labels that select one instance's sandbox pods (for listing and reaping).
pub fn instance_selector(instance: &str) -> String {
    format!(
        "{}={},{}={},{INSTANCE_LABEL}={instance}",
        SANDBOX_SELECTOR.0, SANDBOX_SELECTOR.1, MANAGED_BY.0, MANAGED_BY.1
    )
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn meta(name: &str, namespace: Option<&str>, labels_: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(Into::into),
        labels: Some(labels(labels_)),
        ..ObjectMeta::default()
    }
}

/// Memory in MiB as a quantity.
fn mebibytes(mb: u64) -> Quantity {
    Quantity(format!("{mb}Mi"))
}

/// CPUs as millicores (at least 1m: a zero quantity would mean "no limit" to some tools).
fn millicores(cpus: f64) -> Quantity {
    Quantity(format!("{}m", ((cpus * 1000.0).round() as u64).max(1)))
}

/// The seccomp profile every container runs with.
fn runtime_default_seccomp() -> Option<SeccompProfile> {
    Some(SeccompProfile {
        type_: "RuntimeDefault".into(),
        localhost_profile: None,
    })
}

/// The container security context of sandboxes and of Warden itself: non-root, read-only
/// root, no capabilities, no privilege escalation, RuntimeDefault seccomp.
fn hardened_container(uid: Option<i64>) -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        run_as_user: uid,
        run_as_group: uid,
        read_only_root_filesystem: Some(true),
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        seccomp_profile: runtime_default_seccomp(),
        ..SecurityContext::default()
    }
}

/// A sandbox's pod.
pub fn sandbox_pod(p: &PodParams) -> Pod {
    let network = if p.network_enabled { "egress" } else { "none" };
    let mut metadata = meta(
        &pod_name(&p.sandbox_id),
        Some(&p.namespace),
        &[
            SANDBOX_SELECTOR,
            MANAGED_BY,
            (SANDBOX_ID_LABEL, &p.sandbox_id),
            (INSTANCE_LABEL, &p.instance),
            (NETWORK_LABEL, network),
        ],
    );
    if !p.user_labels.is_empty() {
        metadata.annotations = Some(BTreeMap::from([(
            USER_LABELS_ANNOTATION.to_string(),
            serde_json::to_string(&p.user_labels).expect("a string map serializes"),
        )]));
    }
    // Requests equal limits: the pod is in the Guaranteed QoS class, so it is the last to be
    // evicted under node pressure and its CPU share is what the profile says.
    let resources: BTreeMap<String, Quantity> = BTreeMap::from([
        ("cpu".to_string(), millicores(p.limits.cpus)),
        ("memory".to_string(), mebibytes(p.limits.memory_mb)),
    ]);
    let memory_volume = |name: &str, mb: u64| Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            size_limit: Some(mebibytes(mb)),
        }),
        ..Volume::default()
    };
    let mount = |name: &str, path: &str, sub_path: Option<&str>| VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        sub_path: sub_path.map(Into::into),
        ..VolumeMount::default()
    };
    Pod {
        metadata,
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            // No service environment variables: they would tell the code the cluster's
            // addresses.
            enable_service_links: Some(false),
            host_network: Some(false),
            host_pid: Some(false),
            host_ipc: Some(false),
            runtime_class_name: p.runtime_class.clone(),
            // Destroy means gone now: the keep-alive process has nothing to save.
            termination_grace_period_seconds: Some(0),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(p.uid),
                run_as_group: Some(p.uid),
                seccomp_profile: runtime_default_seccomp(),
                ..PodSecurityContext::default()
            }),
            containers: vec![Container {
                name: CONTAINER.into(),
                image: Some(p.image.clone()),
                image_pull_policy: Some(p.image_pull_policy.clone()),
                command: Some(p.keepalive_command.clone()),
                working_dir: Some(WORKSPACE.into()),
                env: Some(vec![
                    EnvVar {
                        name: "HOME".into(),
                        value: Some(WORKSPACE.into()),
                        ..EnvVar::default()
                    },
                    EnvVar {
                        name: "TMPDIR".into(),
                        value: Some("/tmp".into()),
                        ..EnvVar::default()
                    },
                ]),
                security_context: Some(hardened_container(Some(p.uid))),
                resources: Some(ResourceRequirements {
                    requests: Some(resources.clone()),
                    limits: Some(resources),
                    ..ResourceRequirements::default()
                }),
                volume_mounts: Some(vec![
                    mount("workspace", WORKSPACE, None),
                    mount("workspace", "/tmp", Some(".tmp")),
                    mount("code", CODE_DIR, None),
                ]),
                ..Container::default()
            }],
            volumes: Some(vec![
                memory_volume("workspace", p.limits.workspace_mb),
                memory_volume("code", CODE_VOLUME_MB),
            ]),
            ..PodSpec::default()
        }),
        status: None,
    }
}

fn sandbox_pods_selector(extra: &[(&str, &str)]) -> LabelSelector {
    let mut pairs = vec![SANDBOX_SELECTOR];
    pairs.extend_from_slice(extra);
    LabelSelector {
        match_labels: Some(labels(&pairs)),
        match_expressions: None,
    }
}

/// Denies all ingress and egress of every sandbox pod in the namespace. Policies only add
/// allowed traffic, so this holds for every pod unless another policy allows something.
pub fn deny_all_policy(namespace: &str) -> NetworkPolicy {
    NetworkPolicy {
        metadata: meta(DENY_ALL_POLICY, Some(namespace), &[MANAGED_BY]),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(sandbox_pods_selector(&[])),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![]),
            egress: Some(vec![]),
        }),
    }
}

/// Egress for the sandbox pods of profiles with `network_enabled`: anywhere except `blocked`
/// (cluster-internal ranges and link-local, so 169.254.169.254), plus DNS to the cluster's
/// resolver, without which no name resolves. Ingress stays denied.
pub fn egress_policy(namespace: &str, blocked: &[String]) -> NetworkPolicy {
    let (v6, v4): (Vec<String>, Vec<String>) =
        blocked.iter().cloned().partition(|c| c.contains(':'));
    let block = |cidr: &str, except: Vec<String>| NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: cidr.into(),
            except: Some(except),
        }),
        ..NetworkPolicyPeer::default()
    };
    let dns_port = |protocol: &str| NetworkPolicyPort {
        port: Some(IntOrString::Int(53)),
        protocol: Some(protocol.into()),
        end_port: None,
    };
    NetworkPolicy {
        metadata: meta(EGRESS_POLICY, Some(namespace), &[MANAGED_BY]),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(sandbox_pods_selector(&[(NETWORK_LABEL, "egress")])),
            policy_types: Some(vec!["Egress".into()]),
            ingress: None,
            egress: Some(vec![
                NetworkPolicyEgressRule {
                    to: Some(vec![block("0.0.0.0/0", v4), block("::/0", v6)]),
                    ports: None,
                },
                NetworkPolicyEgressRule {
                    to: Some(vec![NetworkPolicyPeer {
                        namespace_selector: Some(LabelSelector {
                            match_labels: Some(labels(&[(
                                "kubernetes.io/metadata.name",
                                "kube-system",
                            )])),
                            match_expressions: None,
                        }),
                        pod_selector: Some(LabelSelector {
                            match_labels: Some(labels(&[("k8s-app", "kube-dns")])),
                            match_expressions: None,
                        }),
                        ip_block: None,
                    }]),
                    ports: Some(vec![dns_port("UDP"), dns_port("TCP")]),
                },
            ]),
        }),
    }
}

/// What `deploy/kubernetes/` is generated from.
#[derive(Debug, Clone, PartialEq)]
pub struct DeployParams {
    /// Where Warden itself runs.
    pub warden_namespace: String,
    /// Where sandbox pods run (`[sandbox.kubernetes].namespace`).
    pub sandbox_namespace: String,
    /// Warden's own image.
    pub image: String,
    /// The settings file Warden reads (mounted from a ConfigMap).
    pub settings_toml: String,
    /// The egress policy's blocked ranges.
    pub egress_blocked_cidrs: Vec<String>,
}

/// The Secret holding `keys.toml` (`[[api_keys]]` with `name` and `key_sha256`), created by
/// the operator, never generated: Warden listens off loopback only with keys.
pub const API_KEYS_SECRET: &str = "warden-api-keys";
/// Where the Secret's `keys.toml` is mounted in Warden's pod.
pub const API_KEYS_PATH: &str = "/etc/warden-keys/keys.toml";

/// Warden's name in its namespace: the service account, Deployment, Service and ConfigMap.
pub const WARDEN_NAME: &str = "warden";
const WARDEN_APP: (&str, &str) = ("app.kubernetes.io/name", "warden");
const HTTP_PORT: i32 = 8080;

pub fn namespace(name: &str) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels(&[
                MANAGED_BY,
                // Sandbox pods are hardened beyond the restricted Pod Security Standard; let
                // the API server enforce at least that much on anything created here.
                ("pod-security.kubernetes.io/enforce", "restricted"),
            ])),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}

pub fn service_account(d: &DeployParams) -> ServiceAccount {
    ServiceAccount {
        metadata: meta(
            WARDEN_NAME,
            Some(&d.warden_namespace),
            &[WARDEN_APP, MANAGED_BY],
        ),
        ..ServiceAccount::default()
    }
}

/// The least the backend needs, in the sandbox namespace only: pods (create, read, list for
/// start-up reaping, delete), exec into them, read events (why a pod is not starting), and
/// read or create the NetworkPolicies. Nothing cluster-wide, no secrets, no update of pods.
pub fn role(d: &DeployParams) -> Role {
    let rule = |group: &str, resources: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..PolicyRule::default()
    };
    Role {
        metadata: meta(WARDEN_NAME, Some(&d.sandbox_namespace), &[MANAGED_BY]),
        rules: Some(vec![
            rule("", &["pods"], &["create", "get", "list", "delete"]),
            // The exec subresource is a websocket upgrade of a GET; older API servers check
            // `get`, newer ones `create`.
            rule("", &["pods/exec"], &["create", "get"]),
            rule("", &["events"], &["list"]),
            rule(
                "networking.k8s.io",
                &["networkpolicies"],
                &["get", "create"],
            ),
        ]),
    }
}

pub fn role_binding(d: &DeployParams) -> RoleBinding {
    RoleBinding {
        metadata: meta(WARDEN_NAME, Some(&d.sandbox_namespace), &[MANAGED_BY]),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: WARDEN_NAME.into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: WARDEN_NAME.into(),
            namespace: Some(d.warden_namespace.clone()),
            api_group: None,
        }]),
    }
}

/// Warden's settings file, mounted into its pod.
pub fn settings_config_map(d: &DeployParams) -> ConfigMap {
    ConfigMap {
        metadata: meta(
            WARDEN_NAME,
            Some(&d.warden_namespace),
            &[WARDEN_APP, MANAGED_BY],
        ),
        data: Some(BTreeMap::from([(
            "settings.toml".to_string(),
            d.settings_toml.clone(),
        )])),
        ..ConfigMap::default()
    }
}

pub fn deployment(d: &DeployParams) -> Deployment {
    let probe = |path: &str| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("http".into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(10),
        ..Probe::default()
    };
    let pod_labels = labels(&[WARDEN_APP, MANAGED_BY]);
    Deployment {
        metadata: meta(
            WARDEN_NAME,
            Some(&d.warden_namespace),
            &[WARDEN_APP, MANAGED_BY],
        ),
        spec: Some(DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(labels(&[WARDEN_APP])),
                match_expressions: None,
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(WARDEN_NAME.into()),
                    // Warden talks to the API server with this token; sandboxes never get one.
                    automount_service_account_token: Some(true),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(65532),
                        run_as_group: Some(65532),
                        seccomp_profile: runtime_default_seccomp(),
                        ..PodSecurityContext::default()
                    }),
                    containers: vec![Container {
                        name: WARDEN_NAME.into(),
                        image: Some(d.image.clone()),
                        args: Some(
                            ["serve", "--listen", "0.0.0.0:8080"]
                                .map(String::from)
                                .to_vec(),
                        ),
                        env: Some(vec![EnvVar {
                            name: "WARDEN_CONFIG".into(),
                            value: Some("/etc/warden/settings.toml".into()),
                            ..EnvVar::default()
                        }]),
                        ports: Some(vec![ContainerPort {
                            name: Some("http".into()),
                            container_port: HTTP_PORT,
                            protocol: Some("TCP".into()),
                            ..ContainerPort::default()
                        }]),
                        readiness_probe: Some(probe("/readyz")),
                        liveness_probe: Some(probe("/healthz")),
                        security_context: Some(hardened_container(None)),
                        resources: Some(ResourceRequirements {
                            requests: Some(BTreeMap::from([
                                ("cpu".to_string(), Quantity("100m".into())),
                                ("memory".to_string(), Quantity("64Mi".into())),
                            ])),
                            limits: Some(BTreeMap::from([(
                                "memory".to_string(),
                                Quantity("256Mi".into()),
                            )])),
                            ..ResourceRequirements::default()
                        }),
                        volume_mounts: Some(vec![
                            VolumeMount {
                                name: "settings".into(),
                                mount_path: "/etc/warden".into(),
                                read_only: Some(true),
                                ..VolumeMount::default()
                            },
                            VolumeMount {
                                name: "api-keys".into(),
                                mount_path: "/etc/warden-keys".into(),
                                read_only: Some(true),
                                ..VolumeMount::default()
                            },
                        ]),
                        ..Container::default()
                    }],
                    volumes: Some(vec![
                        Volume {
                            name: "settings".into(),
                            config_map: Some(ConfigMapVolumeSource {
                                name: WARDEN_NAME.into(),
                                ..ConfigMapVolumeSource::default()
                            }),
                            ..Volume::default()
                        },
                        // Not optional: without keys the pod must not start listening.
                        Volume {
                            name: "api-keys".into(),
                            secret: Some(SecretVolumeSource {
                                secret_name: Some(API_KEYS_SECRET.into()),
                                optional: Some(false),
                                ..SecretVolumeSource::default()
                            }),
                            ..Volume::default()
                        },
                    ]),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

pub fn service(d: &DeployParams) -> Service {
    Service {
        metadata: meta(
            WARDEN_NAME,
            Some(&d.warden_namespace),
            &[WARDEN_APP, MANAGED_BY],
        ),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(labels(&[WARDEN_APP])),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                target_port: Some(IntOrString::String("http".into())),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests;
