//! The kube client against recorded API-server answers (tests/recorded/*.json, in the shapes
//! the API server sends: Pods, EventLists, Status errors, exec statuses), served by an
//! in-process tower service: how API errors and pod phases become Warden's errors.

use http::{Request, Response};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use warden_engine::{Backend, BackendError, SandboxSpec};
use warden_kube::cluster::{Cluster, ClusterError, ExitStatus, KubeCluster};
use warden_kube::readiness::{self, PodState, StartError};
use warden_kube::{KubeBackend, KubeSettings, StartupError};
use warden_types::Limits;

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/recorded/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// One answer: to requests whose "METHOD path" starts with `route`. Several answers for one
/// route are given in order; the last one repeats.
struct Answer {
    route: String,
    status: u16,
    body: String,
}

fn answer(route: &str, status: u16, fixture_name: &str) -> Answer {
    Answer {
        route: route.into(),
        status,
        body: fixture(fixture_name),
    }
}

type Log = Arc<Mutex<Vec<String>>>;

fn client(answers: Vec<Answer>) -> (kube::Client, Log) {
    let answers = Arc::new(Mutex::new(answers));
    let log: Log = Arc::default();
    let seen = log.clone();
    let service = tower::service_fn(move |req: Request<kube::client::Body>| {
        let key = format!("{} {}", req.method(), req.uri().path());
        seen.lock().unwrap().push(format!(
            "{key}{}",
            req.uri()
                .query()
                .filter(|q| !q.is_empty())
                .map(|q| format!("?{q}"))
                .unwrap_or_default()
        ));
        let mut answers = answers.lock().unwrap();
        let matching: Vec<usize> = answers
            .iter()
            .enumerate()
            .filter(|(_, a)| key.starts_with(&a.route))
            .map(|(i, _)| i)
            .collect();
        let (status, body) = match matching.first() {
            None => (404, fixture("status_not_found.json")),
            Some(&i) if matching.len() > 1 => {
                let a = answers.remove(i);
                (a.status, a.body)
            }
            Some(&i) => (answers[i].status, answers[i].body.clone()),
        };
        async move {
            Ok::<_, std::convert::Infallible>(
                Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(body.into_bytes()))
                    .unwrap(),
            )
        }
    });
    (kube::Client::new(service, "warden-sandboxes"), log)
}

const PODS: &str = "/api/v1/namespaces/warden-sandboxes/pods";
const POLICIES: &str = "/apis/networking.k8s.io/v1/namespaces/warden-sandboxes/networkpolicies";

fn cluster(answers: Vec<Answer>) -> (KubeCluster, Log) {
    let (c, log) = client(answers);
    (KubeCluster::new(c, "warden-sandboxes"), log)
}

fn settings() -> KubeSettings {
    KubeSettings {
        poll_interval: Duration::from_millis(5),
        ready_timeout: Duration::from_millis(200),
        ..KubeSettings::default()
    }
}

fn pod_json(name: &str) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_str(&fixture(name)).unwrap()
}

#[tokio::test]
async fn api_errors_map_to_cluster_errors_and_then_to_backend_errors() {
    let pod = pod_json("pod_ready.json");
    let cases = [
        ("status_forbidden.json", 403),
        ("status_invalid_runtime_class.json", 403),
        ("status_already_exists.json", 409),
        ("status_quota.json", 422),
        ("status_unavailable.json", 503),
    ];
    let mut seen = Vec::new();
    for (file, code) in cases {
        let (c, _) = cluster(vec![answer(&format!("POST {PODS}"), code, file)]);
        let err = c.create_pod(&pod).await.unwrap_err();
        let backend = warden_kube::backend::backend_error(err.clone());
        seen.push(format!("{code}: {err}\n  -> {backend:?}"));
    }
    insta::assert_snapshot!(seen.join("\n"));
}

#[tokio::test]
async fn a_missing_pod_is_gone_and_deleting_it_again_is_fine() {
    let (c, _) = cluster(vec![]);
    let err = c.get_pod("warden-sb-1").await.unwrap_err();
    assert!(matches!(err, ClusterError::NotFound { .. }), "{err:?}");
    assert!(matches!(
        warden_kube::backend::backend_error(err),
        BackendError::Gone(_)
    ));
    assert!(!c.delete_pod("warden-sb-1").await.unwrap());
    let (c, log) = cluster(vec![answer(
        &format!("DELETE {PODS}/warden-sb-1"),
        200,
        "pod_ready.json",
    )]);
    assert!(c.delete_pod("warden-sb-1").await.unwrap());
    assert_eq!(log.lock().unwrap()[0], format!("DELETE {PODS}/warden-sb-1"));
    assert!(c.get_network_policy("x").await.unwrap().is_none());
}

#[tokio::test]
async fn pod_phases_classify_into_ready_waiting_or_clear_errors() {
    let events = |f: &str| -> Vec<k8s_openapi::api::core::v1::Event> {
        let list: k8s_openapi::List<k8s_openapi::api::core::v1::Event> =
            serde_json::from_str(&fixture(f)).unwrap();
        list.items
    };
    let mut lines = Vec::new();
    for (pod, ev) in [
        ("pod_ready.json", None),
        ("pod_pending_container_creating.json", None),
        (
            "pod_image_pull_backoff.json",
            Some("events_image_pull.json"),
        ),
        (
            "pod_unschedulable.json",
            Some("events_failed_scheduling.json"),
        ),
        ("pod_evicted.json", None),
        ("pod_oom_killed.json", None),
        ("pod_create_config_error.json", None),
    ] {
        let ev = ev.map(events).unwrap_or_default();
        let state = readiness::classify(&pod_json(pod), &ev);
        let shown = match &state {
            PodState::Failed(e) => format!("failed: {e}"),
            other => format!("{other:?}"),
        };
        lines.push(format!("{pod}: {shown}"));
    }
    insta::assert_snapshot!(lines.join("\n"));
    // An unschedulable pod is waited for; at the deadline it is reported as unschedulable.
    let state = readiness::classify(&pod_json("pod_unschedulable.json"), &[]);
    assert!(matches!(
        readiness::deadline_error(&state, 120),
        StartError::Unschedulable { .. }
    ));
    assert_eq!(
        readiness::termination_reason(&pod_json("pod_oom_killed.json")).as_deref(),
        Some("OOMKilled")
    );
    assert_eq!(
        readiness::termination_reason(&pod_json("pod_evicted.json")).as_deref(),
        Some("Evicted")
    );
    assert_eq!(
        readiness::termination_reason(&pod_json("pod_ready.json")),
        None
    );
}

#[test]
fn exec_statuses_give_exit_codes_or_a_start_failure() {
    let status = |f: &str| -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Status {
        serde_json::from_str(&fixture(f)).unwrap()
    };
    assert_eq!(
        ExitStatus::from_status(Some(&status("exec_status_success.json"))),
        ExitStatus::Code(0)
    );
    assert_eq!(
        ExitStatus::from_status(Some(&status("exec_status_exit_code.json"))),
        ExitStatus::Code(3)
    );
    match ExitStatus::from_status(Some(&status("exec_status_not_found.json"))) {
        ExitStatus::NotStarted(m) => assert!(m.contains("executable file not found"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(ExitStatus::from_status(None), ExitStatus::Lost);
}

/// Policy answers for a start-up that finds both policies missing and creates them.
fn policies_created() -> Vec<Answer> {
    vec![
        answer(&format!("GET {POLICIES}/"), 404, "status_not_found.json"),
        answer(
            &format!("POST {POLICIES}"),
            201,
            "network_policy_deny_all_as_served.json",
        ),
    ]
}

fn spec(id: &str) -> SandboxSpec {
    SandboxSpec {
        id: id.into(),
        profile: "standard".into(),
        // The built-in `standard` profile's.
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
        egress: Default::default(),
        container_runtime: None,
        image: Some("python:3.11-slim".into()),
        labels: BTreeMap::new(),
        env: Default::default(),
        home: None,
    }
}

async fn backend(mut answers: Vec<Answer>, s: KubeSettings) -> (KubeBackend, Log) {
    answers.extend(policies_created());
    let (c, log) = cluster(answers);
    let b = KubeBackend::start(Arc::new(c), s).await.unwrap();
    (b, log)
}

#[tokio::test]
async fn start_up_creates_missing_policies_before_any_pod() {
    let (_, log) = backend(vec![], settings()).await;
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            format!("GET {POLICIES}/warden-sandbox-deny-all"),
            format!("POST {POLICIES}"),
            format!("GET {POLICIES}/warden-sandbox-egress"),
            format!("POST {POLICIES}"),
        ]
    );
}

#[tokio::test]
async fn start_up_refuses_a_weakened_or_missing_policy() {
    let (c, _) = cluster(vec![answer(
        &format!("GET {POLICIES}/warden-sandbox-deny-all"),
        200,
        "network_policy_deny_all_weakened.json",
    )]);
    let err = KubeBackend::start(Arc::new(c), settings())
        .await
        .unwrap_err();
    assert!(matches!(err, StartupError::PolicyDiffers { .. }), "{err}");

    let mut s = settings();
    s.manage_network_policy = false;
    let (c, _) = cluster(vec![]);
    let err = KubeBackend::start(Arc::new(c), s).await.unwrap_err();
    assert!(matches!(err, StartupError::PolicyMissing { .. }), "{err}");

    // The policy as the API server serves it back (empty rule lists omitted) is Warden's.
    let (c, _) = cluster(vec![
        answer(
            &format!("GET {POLICIES}/warden-sandbox-deny-all"),
            200,
            "network_policy_deny_all_as_served.json",
        ),
        answer(
            &format!("GET {POLICIES}/warden-sandbox-egress"),
            404,
            "status_not_found.json",
        ),
        answer(
            &format!("POST {POLICIES}"),
            201,
            "network_policy_deny_all_as_served.json",
        ),
    ]);
    KubeBackend::start(Arc::new(c), settings()).await.unwrap();
}

#[tokio::test]
async fn a_sandbox_waits_for_its_pod_to_be_ready() {
    let (b, log) = backend(
        vec![
            answer(
                &format!("POST {PODS}"),
                201,
                "pod_pending_container_creating.json",
            ),
            answer(
                &format!("GET {PODS}/warden-sb-1"),
                200,
                "pod_pending_container_creating.json",
            ),
            answer(
                &format!("GET {PODS}/warden-sb-1"),
                200,
                "pod_pending_container_creating.json",
            ),
            answer(&format!("GET {PODS}/warden-sb-1"), 200, "pod_ready.json"),
        ],
        settings(),
    )
    .await;
    b.create_sandbox(spec("sb-1")).await.unwrap();
    let gets = log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.starts_with(&format!("GET {PODS}/")))
        .count();
    assert_eq!(gets, 3);
}

/// Creates a sandbox whose pod stays in `pod_fixture`; returns the error and the requests.
async fn failing_start(pod_fixture: &str, events_fixture: &str) -> (BackendError, Vec<String>) {
    let (b, log) = backend(
        vec![
            answer(
                &format!("POST {PODS}"),
                201,
                "pod_pending_container_creating.json",
            ),
            answer(&format!("GET {PODS}/warden-sb-1"), 200, pod_fixture),
            answer(
                "GET /api/v1/namespaces/warden-sandboxes/events",
                200,
                events_fixture,
            ),
            answer(&format!("DELETE {PODS}/warden-sb-1"), 200, pod_fixture),
        ],
        settings(),
    )
    .await;
    let err = b.create_sandbox(spec("sb-1")).await.unwrap_err();
    let log = log.lock().unwrap().clone();
    (err, log)
}

#[tokio::test]
async fn pods_that_will_not_start_are_clear_errors_and_are_deleted() {
    let mut lines = Vec::new();
    for (pod, events) in [
        ("pod_image_pull_backoff.json", "events_image_pull.json"),
        ("pod_unschedulable.json", "events_failed_scheduling.json"),
        ("pod_evicted.json", "events_failed_scheduling.json"),
        ("pod_create_config_error.json", "events_image_pull.json"),
    ] {
        let (err, log) = failing_start(pod, events).await;
        assert!(
            log.iter()
                .any(|l| l == &format!("DELETE {PODS}/warden-sb-1")),
            "{pod}: the pod was not deleted: {log:?}"
        );
        assert!(
            log.iter().any(|l| l.contains(
                "fieldSelector=involvedObject.kind%3DPod%2CinvolvedObject.name%3Dwarden-sb-1"
            )),
            "{pod}: events not read: {log:?}"
        );
        lines.push(format!("{pod}: {err:?}"));
    }
    insta::assert_snapshot!(lines.join("\n"));
}

#[tokio::test]
async fn start_up_deletes_labelled_pods_of_dead_sandboxes_and_adopts_live_ones() {
    let (b, log) = backend(
        vec![
            answer(&format!("GET {PODS}"), 200, "pod_list.json"),
            answer(&format!("DELETE {PODS}/"), 200, "pod_ready.json"),
        ],
        settings(),
    )
    .await;
    log.lock().unwrap().clear();
    let removed = b.remove_orphans(&["sb-live".to_string()]).await.unwrap();
    assert_eq!(removed, 2);
    let log = log.lock().unwrap().clone();
    assert!(log.iter().any(|l| l.starts_with(&format!("GET {PODS}?"))
        && l.contains("labelSelector=app.kubernetes.io%2Fname%3Dwarden-sandbox%2Capp.kubernetes.io%2Fmanaged-by%3Dwarden%2Cwarden.dev%2Finstance%3Dwarden")), "{log:?}");
    let deleted: Vec<_> = log.iter().filter(|l| l.starts_with("DELETE")).collect();
    assert_eq!(
        deleted,
        [
            &format!("DELETE {PODS}/warden-sb-orphan"),
            &format!("DELETE {PODS}/warden-run-old")
        ]
    );
}

#[tokio::test]
async fn the_created_pod_is_the_typed_one() {
    let (b, _) = backend(vec![], settings()).await;
    let pod = b.pod_for(&spec("sb-1")).unwrap();
    assert_eq!(pod.metadata.name.as_deref(), Some("warden-sb-1"));
    let mut no_image = spec("sb-2");
    no_image.image = None;
    assert!(matches!(
        b.pod_for(&no_image),
        Err(BackendError::Refused(_))
    ));
    let long = spec(&"x".repeat(64));
    assert!(matches!(b.pod_for(&long), Err(BackendError::Refused(_))));
}

/// What RBAC asks of a logged request: (API group, resource with subresource, verbs any one
/// of which grants it), for requests in the sandbox namespace. A WebSocket exec is a GET
/// upgrade: older API servers check `get` on pods/exec, newer ones `create`, so both must be
/// granted.
fn rbac(request: &str) -> (String, String, Vec<&'static str>) {
    let (method, url) = request.split_once(' ').unwrap();
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => panic!("{request}: not a namespaced resource"),
    };
    let [namespace_word, namespace, resource, rest @ ..] = rest else {
        panic!("{request}: not a namespaced resource");
    };
    assert_eq!(
        (*namespace_word, *namespace),
        ("namespaces", "warden-sandboxes"),
        "{request}: outside the sandbox namespace (the Role grants nothing there)"
    );
    let (resource, named) = match rest {
        [] => (resource.to_string(), false),
        [_name] => (resource.to_string(), true),
        [_name, sub] => (format!("{resource}/{sub}"), true),
        _ => panic!("{request}: unexpected path"),
    };
    let verbs = match (method, named) {
        ("GET", _) if resource.ends_with("/exec") => vec!["get", "create"],
        ("GET", _) if query.contains("watch=") => vec!["watch"],
        ("GET", true) => vec!["get"],
        ("GET", false) => vec!["list"],
        ("POST", _) => vec!["create"],
        ("DELETE", true) => vec!["delete"],
        ("DELETE", false) => vec!["deletecollection"],
        ("PUT", _) => vec!["update"],
        ("PATCH", _) => vec!["patch"],
        other => panic!("{request}: method {other:?}"),
    };
    (group.to_owned(), resource, verbs)
}

/// Every request Warden makes — each call of the cluster interface, and the backend's
/// start-up, sandbox life and orphan removal — is granted by `objects::role`, and every verb
/// the Role grants is used (nothing granted beyond what Warden needs).
#[tokio::test]
async fn methods_are_what_the_role_grants() {
    // Each call of the `Cluster` interface, against recorded answers.
    let policy: k8s_openapi::api::networking::v1::NetworkPolicy =
        serde_json::from_str(&fixture("network_policy_deny_all_as_served.json")).unwrap();
    let (c, log) = cluster(vec![
        answer(&format!("POST {PODS}"), 201, "pod_ready.json"),
        answer(&format!("GET {PODS}/warden-sb-1"), 200, "pod_ready.json"),
        answer(&format!("GET {PODS}"), 200, "pod_list.json"),
        answer(&format!("DELETE {PODS}/"), 200, "pod_ready.json"),
        answer(
            "GET /api/v1/namespaces/warden-sandboxes/events",
            200,
            "events_image_pull.json",
        ),
        answer(
            &format!("GET {POLICIES}/"),
            200,
            "network_policy_deny_all_as_served.json",
        ),
        answer(
            &format!("POST {POLICIES}"),
            201,
            "network_policy_deny_all_as_served.json",
        ),
    ]);
    c.create_pod(&pod_json("pod_ready.json")).await.unwrap();
    c.get_pod("warden-sb-1").await.unwrap();
    c.pod_events("warden-sb-1").await.unwrap();
    c.delete_pod("warden-sb-1").await.unwrap();
    c.list_pods("app.kubernetes.io/name=warden-sandbox")
        .await
        .unwrap();
    c.get_network_policy("warden-sandbox-deny-all")
        .await
        .unwrap();
    c.create_network_policy(&policy).await.unwrap();
    // No WebSocket peer here: the upgrade is refused, but the request was made.
    assert!(c.exec("warden-sb-1", vec!["true".into()]).await.is_err());
    // The API server's version is public discovery information (system:public-info-viewer),
    // outside any Role.
    let _ = c.version().await;
    let mut requests = log.lock().unwrap().clone();
    assert_eq!(requests.len(), 9, "one request per call: {requests:#?}");
    assert_eq!(requests.pop().as_deref(), Some("GET /version"));

    // The backend's own sequences: start-up, a sandbox that starts, one that does not,
    // orphan removal.
    let (b, log) = backend(
        vec![
            answer(&format!("POST {PODS}"), 201, "pod_ready.json"),
            answer(&format!("GET {PODS}/warden-sb-1"), 200, "pod_ready.json"),
            // Gone after its deletion.
            answer(
                &format!("GET {PODS}/warden-sb-1"),
                404,
                "status_not_found.json",
            ),
            answer(&format!("DELETE {PODS}/"), 200, "pod_ready.json"),
        ],
        settings(),
    )
    .await;
    let sb = b.create_sandbox(spec("sb-1")).await.unwrap();
    sb.destroy().await.unwrap();
    requests.extend(log.lock().unwrap().clone());
    let (b, log) = backend(
        vec![
            answer(&format!("GET {PODS}"), 200, "pod_list.json"),
            answer(&format!("DELETE {PODS}/"), 200, "pod_ready.json"),
        ],
        settings(),
    )
    .await;
    b.remove_orphans(&[]).await.unwrap();
    requests.extend(log.lock().unwrap().clone());
    let (_, failed) =
        failing_start("pod_unschedulable.json", "events_failed_scheduling.json").await;
    requests.extend(failed);

    let role = warden_kube::objects::role(&warden_kube::objects::DeployParams {
        warden_namespace: "warden".into(),
        sandbox_namespace: "warden-sandboxes".into(),
        image: "warden:test".into(),
        settings_toml: String::new(),
        egress_blocked_cidrs: vec![],
    });
    let mut granted: Vec<(String, String, String)> = Vec::new();
    for rule in role.rules.unwrap() {
        for group in rule.api_groups.unwrap_or_default() {
            for resource in rule.resources.clone().unwrap_or_default() {
                for verb in &rule.verbs {
                    granted.push((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    let mut used = std::collections::BTreeSet::new();
    for request in &requests {
        let (group, resource, verbs) = rbac(request);
        for verb in &verbs {
            let grant = (group.clone(), resource.clone(), verb.to_string());
            assert!(
                granted.contains(&grant),
                "{request} needs {verb} on {group}/{resource}, which the Role does not grant"
            );
            used.insert(grant);
        }
    }
    let unused: Vec<_> = granted.iter().filter(|g| !used.contains(*g)).collect();
    assert!(unused.is_empty(), "granted but never used: {unused:?}");
}
