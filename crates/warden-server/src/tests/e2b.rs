use super::*;
use crate::e2b::{Target, target};
use axum::http::HeaderMap;

async fn raw(app: &Router, req: Request<Body>) -> (StatusCode, HeaderMap, Vec<u8>) {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers, bytes.to_vec())
}

fn json_of(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap_or(serde_json::Value::Null)
}

/// Creates a sandbox through the control plane; its id and access token.
async fn create(app: &Router, key: Option<&str>, body: &str) -> (StatusCode, serde_json::Value) {
    let mut req = Request::post("/v2/sandboxes").header("content-type", "application/json");
    if let Some(k) = key {
        req = req.header("x-api-key", k);
    }
    let (s, _, b) = raw(app, req.body(Body::from(body.to_owned())).unwrap()).await;
    (s, json_of(&b))
}

fn in_sandbox(
    method: &str,
    path: &str,
    id: &str,
    port: u16,
    token: Option<&str>,
) -> axum::http::request::Builder {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("e2b-sandbox-id", id)
        .header("e2b-sandbox-port", port.to_string());
    if let Some(t) = token {
        req = req.header("x-access-token", t);
    }
    req
}

#[test]
fn requests_are_routed_by_header_then_by_path() {
    let mut h = HeaderMap::new();
    assert_eq!(target(&h, "/v1/execute"), Target::Warden);
    assert_eq!(target(&h, "/healthz"), Target::Warden);
    assert_eq!(target(&h, "/api/v1/sandbox/create"), Target::Warden);
    assert_eq!(target(&h, "/sandboxes"), Target::Control);
    assert_eq!(target(&h, "/v2/sandboxes/x/connect"), Target::Control);
    assert_eq!(target(&h, "/sandboxesx"), Target::Warden);
    h.insert("e2b-sandbox-id", "sb-1".parse().unwrap());
    assert_eq!(target(&h, "/v1/execute"), Target::BadPort);
    h.insert("e2b-sandbox-port", "49983".parse().unwrap());
    assert_eq!(target(&h, "/v1/execute"), Target::Envd);
    h.insert("e2b-sandbox-port", "49999".parse().unwrap());
    assert_eq!(target(&h, "/execute"), Target::Interpreter);
    h.insert("e2b-sandbox-port", "80".parse().unwrap());
    assert_eq!(target(&h, "/health"), Target::BadPort);
}

#[tokio::test]
async fn a_sandbox_made_through_e2b_is_a_warden_sandbox_with_a_token() {
    let app = app();
    let (s, v) = create(
        &app,
        None,
        r#"{"templateID":"base","metadata":{"team":"a"},"timeout":60}"#,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let id = v["sandboxID"].as_str().unwrap().to_owned();
    let token = v["envdAccessToken"].as_str().unwrap().to_owned();
    assert_eq!(v["envdVersion"], "0.5.7");
    assert_eq!(v["templateID"], "base");
    // The same sandbox on Warden's own API, with its metadata as labels.
    let (s, listed, _) = send(
        app.clone(),
        Request::get("/v1/sandboxes?label=team=a")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(listed["sandboxes"][0]["id"], id.as_str());
    assert!(
        listed["sandboxes"][0]["max_lifetime_seconds"]
            .as_u64()
            .unwrap()
            <= 61
    );
    // envd's health, with and without the right token.
    let (s, _, _) = raw(
        &app,
        in_sandbox("GET", "/health", &id, 49983, Some(&token))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _, b) = raw(
        &app,
        in_sandbox("GET", "/health", &id, 49983, Some("nope"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        (s, json_of(&b)["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthenticated"))
    );
    let (s, _, b) = raw(
        &app,
        in_sandbox("GET", "/health", "sb-gone", 49983, None)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        (s, json_of(&b)["code"].as_u64()),
        (StatusCode::BAD_GATEWAY, Some(502))
    );
    // get_info and the list with a metadata filter (E2B's double encoding).
    let (s, _, b) = raw(
        &app,
        Request::get(format!("/sandboxes/{id}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(json_of(&b)["metadata"], serde_json::json!({"team": "a"}));
    let (s, _, b) = raw(
        &app,
        Request::get("/v2/sandboxes?metadata=team%3Da")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        (s, json_of(&b).as_array().map(Vec::len)),
        (StatusCode::OK, Some(1))
    );
    let (s, _, b) = raw(
        &app,
        Request::get("/v2/sandboxes?metadata=team%3Db")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        (s, json_of(&b).as_array().map(Vec::len)),
        (StatusCode::OK, Some(0))
    );
    // Timeout, then kill: 204, and a second kill is the SDK's 404.
    let (s, _, _) = raw(
        &app,
        Request::post(format!("/sandboxes/{id}/timeout"))
            .body(Body::from(r#"{"timeout":30}"#))
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _, _) = raw(
        &app,
        Request::delete(format!("/sandboxes/{id}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _, b) = raw(
        &app,
        Request::delete(format!("/sandboxes/{id}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        (s, json_of(&b)["code"].as_u64()),
        (StatusCode::NOT_FOUND, Some(404))
    );
}

#[tokio::test]
async fn control_plane_errors_are_e2b_shaped() {
    let app = app();
    for (body, status) in [
        ("[1]", StatusCode::BAD_REQUEST),
        ("{", StatusCode::BAD_REQUEST),
        (r#"{"templateID":"nope"}"#, StatusCode::NOT_FOUND),
        (r#"{"timeout":0}"#, StatusCode::BAD_REQUEST),
        (r#"{"timeout":999999}"#, StatusCode::BAD_REQUEST),
        (r#"{"metadata":{"a":1}}"#, StatusCode::BAD_REQUEST),
        (r#"{"autoPause":true}"#, StatusCode::NOT_IMPLEMENTED),
        (r#"{"allow_internet_access":true}"#, StatusCode::BAD_REQUEST),
    ] {
        let (s, v) = create(&app, None, body).await;
        assert_eq!(s, status, "{body}: {v}");
        assert_eq!(v["code"].as_u64(), Some(status.as_u16() as u64), "{body}");
        assert!(
            v["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{body}"
        );
    }
    for path in [
        "/sandboxes/x/fork",
        "/sandboxes/x/snapshots",
        "/v2/sandboxes/x/logs",
    ] {
        let (s, _, b) = raw(&app, Request::post(path).body(Body::empty()).unwrap()).await;
        assert_eq!(s, StatusCode::NOT_IMPLEMENTED, "{path}");
        assert!(
            json_of(&b)["message"].as_str().unwrap().contains("not"),
            "{path}"
        );
    }
    // Warden's own routes are untouched.
    let (s, v, _) = send(
        app.clone(),
        Request::get("/healthz").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!((s, v["status"].as_str()), (StatusCode::OK, Some("ok")));
}

#[tokio::test]
async fn the_control_plane_takes_warden_keys_in_x_api_key() {
    let app = keyed_app();
    let (s, v) = create(&app, None, "{}").await;
    assert_eq!(
        (s, v["code"].as_u64()),
        (StatusCode::UNAUTHORIZED, Some(401))
    );
    let (s, v) = create(&app, Some("wrong"), "{}").await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{v}");
    let (s, v) = create(&app, Some("key-a"), "{}").await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let id = v["sandboxID"].as_str().unwrap().to_owned();
    let token = v["envdAccessToken"].as_str().unwrap().to_owned();
    // Key b does not see it, on either API; key a does, on both.
    let (s, _, _) = raw(
        &app,
        Request::get(format!("/sandboxes/{id}"))
            .header("x-api-key", "key-b")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, body) = call_as(
        &app,
        Some("key-a"),
        "GET",
        &format!("/v1/sandboxes/{id}"),
        "",
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    // Key a's own limit (1 sandbox) comes through as E2B's 429.
    let (s, v) = create(&app, Some("key-a"), "{}").await;
    assert_eq!(
        (s, v["code"].as_u64()),
        (StatusCode::TOO_MANY_REQUESTS, Some(429))
    );
    // In-sandbox requests carry no key: the token is what counts.
    let (s, _, _) = raw(
        &app,
        in_sandbox("GET", "/health", &id, 49983, Some(&token))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _, _) = raw(
        &app,
        in_sandbox("GET", "/health", &id, 49983, None)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        s,
        StatusCode::NO_CONTENT,
        "health is open to the sandbox's id, as E2B's is"
    );
    let (s, _, _) = raw(
        &app,
        in_sandbox("POST", "/filesystem.Filesystem/Stat", &id, 49983, None)
            .header("content-type", "application/json")
            .body(Body::from(r#"{"path":"a"}"#))
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn bad_envd_requests_get_connect_errors_never_a_5xx_or_a_hang() {
    let app = app();
    let (_, v) = create(&app, None, "{}").await;
    let id = v["sandboxID"].as_str().unwrap().to_owned();
    let token = v["envdAccessToken"].as_str().unwrap().to_owned();
    let stream = |body: Vec<u8>| {
        in_sandbox("POST", "/process.Process/Start", &id, 49983, Some(&token))
            .header("content-type", "application/connect+json")
            .body(Body::from(body))
            .unwrap()
    };
    // Garbage envelopes: a 200 stream that is only its end, with invalid_argument.
    for body in [
        b"\x00\x00".to_vec(),
        b"\x00\xff\xff\xff\xff{".to_vec(),
        b"\x01\x00\x00\x00\x02{}".to_vec(),
        b"\x00\x00\x00\x00\x03[1]".to_vec(),
        b"\x00\x00\x00\x00\x05{\"pr".to_vec(),
        vec![],
    ] {
        let (s, h, b) = raw(&app, stream(body.clone())).await;
        assert_eq!(s, StatusCode::OK, "{body:?}");
        assert_eq!(h["content-type"], "application/connect+json");
        let envs = crate::e2b::decode_envelopes(&b).unwrap();
        assert_eq!(envs.len(), 1, "{body:?}");
        assert_eq!(envs[0].flags, 2);
        let end = json_of(&envs[0].message);
        assert_eq!(end["error"]["code"], "invalid_argument", "{body:?}: {end}");
    }
    // A command that is not a command.
    let start = br#"{"process":{"cmd":"","args":[]}}"#;
    let mut body = vec![0, 0, 0, 0, start.len() as u8];
    body.extend_from_slice(start);
    let (_, _, b) = raw(&app, stream(body)).await;
    let envs = crate::e2b::decode_envelopes(&b).unwrap();
    assert_eq!(
        json_of(&envs[0].message)["error"]["code"],
        "invalid_argument"
    );
    // Unknown services, wrong content types, wrong methods, garbage JSON.
    for (method, path, ct, body, status, code) in [
        (
            "POST",
            "/nope.Nope/Do",
            "application/json",
            "{}",
            StatusCode::NOT_FOUND,
            "unimplemented",
        ),
        (
            "POST",
            "/filesystem.Filesystem/Stat",
            "application/proto",
            "{}",
            StatusCode::BAD_REQUEST,
            "invalid_argument",
        ),
        (
            "POST",
            "/filesystem.Filesystem/Stat",
            "application/json",
            "{",
            StatusCode::BAD_REQUEST,
            "invalid_argument",
        ),
        (
            "POST",
            "/filesystem.Filesystem/Stat",
            "application/json",
            "{}",
            StatusCode::BAD_REQUEST,
            "invalid_argument",
        ),
        (
            "POST",
            "/filesystem.Filesystem/Stat",
            "application/json",
            "{\"path\":\"a\\u0000b\"}",
            StatusCode::BAD_REQUEST,
            "invalid_argument",
        ),
        (
            "GET",
            "/filesystem.Filesystem/Stat",
            "application/json",
            "",
            StatusCode::NOT_IMPLEMENTED,
            "unimplemented",
        ),
        (
            "POST",
            "/filesystem.Filesystem/CreateWatcher",
            "application/json",
            "{}",
            StatusCode::NOT_IMPLEMENTED,
            "unimplemented",
        ),
        (
            "POST",
            "/process.Process/SendInput",
            "application/json",
            "{}",
            StatusCode::BAD_REQUEST,
            "invalid_argument",
        ),
        (
            "POST",
            "/process.Process/SendInput",
            "application/json",
            r#"{"process":{"pid":4242},"input":{"stdin":"aGk="}}"#,
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "POST",
            "/process.Process/SendInput",
            "application/json",
            r#"{"process":{"pid":4242},"input":{"stdin":"not base64!"}}"#,
            StatusCode::BAD_REQUEST,
            "invalid_argument",
        ),
        (
            "POST",
            "/process.Process/CloseStdin",
            "application/json",
            r#"{"process":{"pid":4242}}"#,
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "POST",
            "/process.Process/SendSignal",
            "application/json",
            r#"{"process":{"pid":4242}}"#,
            StatusCode::NOT_FOUND,
            "not_found",
        ),
    ] {
        let (s, _, b) = raw(
            &app,
            in_sandbox(method, path, &id, 49983, Some(&token))
                .header("content-type", ct)
                .body(Body::from(body))
                .unwrap(),
        )
        .await;
        assert_eq!(
            (s, json_of(&b)["code"].as_str()),
            (status, Some(code)),
            "{method} {path} {body}"
        );
    }
    // A wrong port header.
    let (s, _, b) = raw(
        &app,
        Request::get("/health")
            .header("e2b-sandbox-id", &id)
            .header("e2b-sandbox-port", "x")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        (s, json_of(&b)["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_argument"))
    );
    // The code interpreter: bad bodies and unknown routes in its shape.
    for (path, body, status) in [
        ("/execute", "{", StatusCode::BAD_REQUEST),
        ("/execute", "{}", StatusCode::BAD_REQUEST),
        (
            "/execute",
            r#"{"code":"1","env_vars":{"A":"b"}}"#,
            StatusCode::BAD_REQUEST,
        ),
        (
            "/execute",
            r#"{"code":"1","context_id":"x","language":"js"}"#,
            StatusCode::BAD_REQUEST,
        ),
        ("/nope", "{}", StatusCode::NOT_FOUND),
    ] {
        let (s, _, b) = raw(
            &app,
            in_sandbox("POST", path, &id, 49999, Some(&token))
                .header("content-type", "application/json")
                .body(Body::from(body))
                .unwrap(),
        )
        .await;
        assert_eq!(s, status, "{path} {body}");
        assert_eq!(json_of(&b)["code"].as_u64(), Some(status.as_u16() as u64));
    }
}

#[tokio::test]
async fn huge_bodies_are_refused_in_the_protocols_shape() {
    let app = app_with(
        EchoBackend::default(),
        ServerLimits {
            max_body_bytes: 1024,
            ..ServerLimits::default()
        },
    );
    let (_, v) = create(&app, None, "{}").await;
    let id = v["sandboxID"].as_str().unwrap().to_owned();
    let token = v["envdAccessToken"].as_str().unwrap().to_owned();
    let big = vec![b'a'; 4096];
    let (s, _, b) = raw(
        &app,
        in_sandbox("POST", "/files?path=a.txt", &id, 49983, Some(&token))
            .header("content-type", "application/octet-stream")
            .body(Body::from(big.clone()))
            .unwrap(),
    )
    .await;
    assert_eq!(
        (s, json_of(&b)["code"].as_u64()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some(413))
    );
    let (s, _, b) = raw(
        &app,
        in_sandbox(
            "POST",
            "/filesystem.Filesystem/Stat",
            &id,
            49983,
            Some(&token),
        )
        .header("content-type", "application/json")
        .body(Body::from(big))
        .unwrap(),
    )
    .await;
    assert_eq!(
        (s, json_of(&b)["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("resource_exhausted"))
    );
}

#[tokio::test]
async fn files_round_trip_through_the_workspace() {
    let app = app();
    let (_, v) = create(&app, None, "{}").await;
    let id = v["sandboxID"].as_str().unwrap().to_owned();
    let token = v["envdAccessToken"].as_str().unwrap().to_owned();
    let body = b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/home/user/d/x.bin\"\r\n\r\n\x00\xff\r\n--b--\r\n";
    let (s, _, b) = raw(
        &app,
        in_sandbox(
            "POST",
            "/files?path=/home/user/d/x.bin",
            &id,
            49983,
            Some(&token),
        )
        .header("content-type", "multipart/form-data; boundary=b")
        .body(Body::from(&body[..]))
        .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{}", String::from_utf8_lossy(&b));
    assert_eq!(json_of(&b)[0]["path"], "/home/user/d/x.bin");
    let (s, _, b) = raw(
        &app,
        in_sandbox("GET", "/files?path=d/x.bin", &id, 49983, Some(&token))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!((s, b), (StatusCode::OK, vec![0, 0xff]));
    let (s, _, b) = raw(
        &app,
        in_sandbox(
            "GET",
            "/files?path=/home/user/none",
            &id,
            49983,
            Some(&token),
        )
        .body(Body::empty())
        .unwrap(),
    )
    .await;
    assert_eq!(
        (s, json_of(&b)["code"].as_u64()),
        (StatusCode::NOT_FOUND, Some(404))
    );
}

/// The messages of a Connect stream's envelopes (the end's included), as JSON.
fn stream_messages(body: &[u8]) -> Vec<serde_json::Value> {
    crate::e2b::decode_envelopes(body)
        .unwrap()
        .iter()
        .map(|e| json_of(&e.message))
        .collect()
}

#[tokio::test]
async fn a_commands_live_stdin_and_a_second_stream_through_connect() {
    let app = app();
    let (_, v) = create(&app, None, "{}").await;
    let id = v["sandboxID"].as_str().unwrap().to_owned();
    let token = v["envdAccessToken"].as_str().unwrap().to_owned();
    let envelope = |msg: &str| {
        let mut b = vec![0, 0, 0, 0, msg.len() as u8];
        b.extend_from_slice(msg.as_bytes());
        b
    };
    let unary = |path: &str, body: String| {
        in_sandbox("POST", path, &id, 49983, Some(&token))
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap()
    };
    let start = in_sandbox("POST", "/process.Process/Start", &id, 49983, Some(&token))
        .header("content-type", "application/connect+json")
        .body(Body::from(envelope(
            r#"{"process":{"cmd":"cat","envs":{"A":"b"},"cwd":"/tmp"},"stdin":true}"#,
        )))
        .unwrap();
    let resp = app.clone().oneshot(start).await.unwrap();
    let mut body = resp.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    let pid = stream_messages(&first)[0]["event"]["start"]["pid"]
        .as_u64()
        .unwrap();
    // A second stream of the same command.
    let connect = in_sandbox("POST", "/process.Process/Connect", &id, 49983, Some(&token))
        .header("content-type", "application/connect+json")
        .body(Body::from(envelope(&format!(
            r#"{{"process":{{"pid":{pid}}}}}"#
        ))))
        .unwrap();
    let second = app.clone().oneshot(connect).await.unwrap();
    let listed = raw(&app, unary("/process.Process/List", "{}".into())).await;
    assert_eq!(json_of(&listed.2)["processes"][0]["pid"], pid);
    assert_eq!(
        json_of(&listed.2)["processes"][0]["config"]["envs"]["A"],
        "b"
    );
    for input in ["aGkK", "dGhlcmUK"] {
        let (s, _, b) = raw(
            &app,
            unary(
                "/process.Process/SendInput",
                format!(r#"{{"process":{{"pid":{pid}}},"input":{{"stdin":"{input}"}}}}"#),
            ),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{}", String::from_utf8_lossy(&b));
    }
    let close = format!(r#"{{"process":{{"pid":{pid}}}}}"#);
    let (s, _, _) = raw(&app, unary("/process.Process/CloseStdin", close.clone())).await;
    assert_eq!(s, StatusCode::OK);
    let rest = body.collect().await.unwrap().to_bytes();
    let messages = stream_messages(&rest);
    let stdout: Vec<u8> = messages
        .iter()
        .filter_map(|m| m["event"]["data"]["stdout"].as_str())
        .flat_map(|b64| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap()
        })
        .collect();
    assert_eq!(stdout, b"hi\nthere\n");
    let end = messages
        .iter()
        .find(|m| m["event"]["end"].is_object())
        .unwrap();
    assert_eq!(end["event"]["end"]["exitCode"], 0, "{messages:?}");
    let second = second.into_body().collect().await.unwrap().to_bytes();
    let second = stream_messages(&second);
    assert_eq!(second[0]["event"]["start"]["pid"], pid);
    assert!(
        second.iter().any(|m| m["event"]["end"]["exitCode"] == 0),
        "{second:?}"
    );
    // The command is gone.
    let (s, _, _) = raw(&app, unary("/process.Process/CloseStdin", close)).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_commands_cwd_outside_the_sandbox_is_invalid_argument() {
    let app = app();
    let (_, v) = create(&app, None, "{}").await;
    let id = v["sandboxID"].as_str().unwrap().to_owned();
    let token = v["envdAccessToken"].as_str().unwrap().to_owned();
    for msg in [
        r#"{"process":{"cmd":"pwd","cwd":"/etc"}}"#,
        r#"{"process":{"cmd":"pwd","envs":{"WARDEN_X":"1"}}}"#,
        r#"{"process":{"cmd":"pwd"},"stdin":"yes"}"#,
    ] {
        let mut b = vec![0, 0, 0, 0, msg.len() as u8];
        b.extend_from_slice(msg.as_bytes());
        let (s, _, body) = raw(
            &app,
            in_sandbox("POST", "/process.Process/Start", &id, 49983, Some(&token))
                .header("content-type", "application/connect+json")
                .body(Body::from(b))
                .unwrap(),
        )
        .await;
        assert_eq!(s, StatusCode::OK);
        let end = &stream_messages(&body)[0];
        assert_eq!(end["error"]["code"], "invalid_argument", "{msg}: {end}");
    }
}
