//! The SDK's HTTP edge without a daemon (no root needed): connection refused, the API key on
//! the wire, answers that are not the API's shape, a stream cut before its end, and events
//! yielded as their lines arrive. The peers are small scripted HTTP servers.

use futures_util::StreamExt;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use warden_client::{Client, CodeInterpreterTool, Error, ExecEvent, Sandbox};

/// A URL on which nothing listens (a port just released).
async fn dead_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

#[tokio::test]
async fn connection_refused_is_its_own_error() {
    let url = dead_url().await;
    let client = Client::new(&url).unwrap();
    let e = client.execute("print(1)").await.unwrap_err();
    match &e {
        Error::Connect { url: u, .. } => assert!(u.starts_with(&url), "{u}"),
        other => panic!("{other:?}"),
    }
    assert!(
        e.to_string()
            .starts_with("cannot connect to the warden daemon at"),
        "{e}"
    );
    assert!(!e.is_caller_error());
    assert!(matches!(
        Sandbox::connect(&client, "x").await,
        Err(Error::Connect { .. })
    ));

    // The tool keeps it from the LLM with try_call, and says it plainly with call.
    let tool = CodeInterpreterTool::one_shot(client);
    assert!(matches!(
        tool.try_call(r#"{"code": "print(1)"}"#).await,
        Err(Error::Connect { .. })
    ));
    let text = tool.call(r#"{"code": "print(1)"}"#).await;
    assert!(
        text.starts_with("ERROR:\nthe code could not be run: cannot connect"),
        "{text}"
    );
}

/// Reads one HTTP request (head and a Content-Length body) and returns the head.
async fn read_request(stream: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the client closed before a whole request");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            while buf.len() < end + 4 + length {
                let n = stream.read(&mut chunk).await.unwrap();
                buf.extend_from_slice(&chunk[..n]);
            }
            return head;
        }
    }
}

/// Serves one connection with `respond(head)`; returns the URL and the request's head.
async fn serve_once<F, Fut>(respond: F) -> (String, tokio::task::JoinHandle<String>)
where
    F: FnOnce(TcpStream, String) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let head = read_request(&mut stream).await;
        respond(stream, head.clone()).await;
        head
    });
    (url, task)
}

fn response(status: &str, content_type: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test]
async fn the_api_key_is_sent_and_error_bodies_are_decoded() {
    let (url, server) = serve_once(|mut s, _| async move {
        let body = r#"{"error":{"code":"sandbox_not_found","message":"no sandbox \"a/b c\""}}"#;
        let r = response("404 Not Found", "application/json", body);
        s.write_all(r.as_bytes()).await.unwrap();
    })
    .await;
    let client = Client::builder(&url).api_key("k-123").build().unwrap();
    let e = Sandbox::connect(&client, "a/b c").await.unwrap_err();
    let head = server.await.unwrap();
    assert!(
        head.starts_with("GET /v1/sandboxes/a%2Fb%20c HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(
        head.lines()
            .any(|l| l.eq_ignore_ascii_case("authorization: Bearer k-123")),
        "{head}"
    );
    match e {
        Error::Api {
            status: 404,
            code,
            message,
            violation: None,
            retry_after: None,
        } => {
            assert_eq!(code, "sandbox_not_found");
            assert_eq!(message, "no sandbox \"a/b c\"");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn retry_after_and_foreign_error_pages() {
    let (url, _server) = serve_once(|mut s, _| async move {
        let body = r#"{"error":{"code":"too_many_requests","message":"8 running, 64 waiting"}}"#;
        let r = response("429 Too Many Requests", "application/json", body).replacen(
            "\r\n",
            "\r\nretry-after: 2\r\n",
            1,
        );
        s.write_all(r.as_bytes()).await.unwrap();
    })
    .await;
    let e = Client::new(&url).unwrap().execute("1").await.unwrap_err();
    assert!(
        matches!(&e, Error::Api { status: 429, retry_after: Some(d), .. } if d.as_secs() == 2),
        "{e:?}"
    );

    let (url, _server) = serve_once(|mut s, _| async move {
        let r = response("502 Bad Gateway", "text/html", "<html>bad gateway</html>");
        s.write_all(r.as_bytes()).await.unwrap();
    })
    .await;
    let e = Client::new(&url).unwrap().execute("1").await.unwrap_err();
    assert!(
        matches!(&e, Error::UnexpectedResponse { status: 502, body, .. } if body.contains("bad gateway")),
        "{e:?}"
    );

    // A 200 whose body is not a result is a decode error, not a panic or a default.
    let (url, _server) = serve_once(|mut s, _| async move {
        let r = response("200 OK", "application/json", r#"{"stdout": 5}"#);
        s.write_all(r.as_bytes()).await.unwrap();
    })
    .await;
    let e = Client::new(&url).unwrap().execute("1").await.unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Decode {
                operation: "execute",
                ..
            }
        ),
        "{e:?}"
    );
}

fn chunk(line: &str) -> String {
    format!("{:x}\r\n{line}\r\n", line.len())
}

const STREAM_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";

#[tokio::test]
async fn events_are_yielded_as_their_lines_arrive() {
    let end = r#"{"type":"end","stdout":"a\nb\n","stderr":"","exit_code":0,"signal":null,"reason":"exited","duration_ms":600,"stdout_truncated":false,"stderr_truncated":false,"artifacts":[]}"#;
    let (url, server) = serve_once(move |mut s, _| async move {
        s.write_all(STREAM_HEAD.as_bytes()).await.unwrap();
        // One event split over two chunks, with a pause in the middle of its line.
        s.write_all(chunk(r#"{"type":"stdout","te"#).as_bytes())
            .await
            .unwrap();
        s.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await;
        s.write_all(chunk("xt\":\"a\\n\",\"timestamp\":1}\n").as_bytes())
            .await
            .unwrap();
        s.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(600)).await;
        // A type this SDK does not know is skipped; then the second line and the end in one
        // chunk.
        let rest = format!(
            "{{\"type\":\"chart\",\"png\":\"\"}}\n{{\"type\":\"stdout\",\"text\":\"b\\n\",\"timestamp\":2}}\n{end}\n"
        );
        s.write_all(chunk(&rest).as_bytes()).await.unwrap();
        s.write_all(b"0\r\n\r\n").await.unwrap();
    })
    .await;
    let client = Client::new(&url).unwrap();
    let mut events = client.execute_stream("x").await.unwrap();
    let mut seen = Vec::new();
    while let Some(e) = events.next().await {
        seen.push((Instant::now(), e.unwrap()));
    }
    let head = server.await.unwrap();
    assert!(head.starts_with("POST /v1/execute HTTP/1.1"), "{head}");
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(
        seen[0].1,
        ExecEvent::Stdout {
            text: "a\n".into(),
            timestamp: 1
        }
    );
    assert!(matches!(&seen[1].1, ExecEvent::Stdout { text, .. } if text == "b\n"));
    assert!(matches!(&seen[2].1, ExecEvent::End(r) if r.stdout == "a\nb\n"));
    let gap = seen[1].0.duration_since(seen[0].0);
    assert!(
        gap >= Duration::from_millis(400),
        "a came only {gap:?} before b"
    );
}

#[tokio::test]
async fn a_stream_cut_before_its_end_or_failing_is_an_error() {
    let (url, _server) = serve_once(|mut s, _| async move {
        s.write_all(STREAM_HEAD.as_bytes()).await.unwrap();
        s.write_all(chunk("{\"type\":\"stdout\",\"text\":\"a\",\"timestamp\":1}\n").as_bytes())
            .await
            .unwrap();
        s.write_all(b"0\r\n\r\n").await.unwrap();
    })
    .await;
    let mut events = Client::new(&url)
        .unwrap()
        .execute_stream("x")
        .await
        .unwrap();
    assert!(matches!(
        events.next().await,
        Some(Ok(ExecEvent::Stdout { .. }))
    ));
    let e = events.next().await.unwrap().unwrap_err();
    assert!(
        matches!(&e, Error::Decode { detail, .. } if detail.contains("before its end event")),
        "{e:?}"
    );
    assert!(events.next().await.is_none());

    let (url, _server) = serve_once(|mut s, _| async move {
        s.write_all(STREAM_HEAD.as_bytes()).await.unwrap();
        s.write_all(
            chunk("{\"type\":\"error\",\"name\":\"internal\",\"value\":\"internal error\"}\n")
                .as_bytes(),
        )
        .await
        .unwrap();
        s.write_all(b"0\r\n\r\n").await.unwrap();
    })
    .await;
    let events = Client::new(&url)
        .unwrap()
        .execute_stream("x")
        .await
        .unwrap();
    let e = events.result().await.unwrap_err();
    assert!(
        matches!(&e, Error::Execution { code, message } if code == "internal" && message == "internal error"),
        "{e:?}"
    );
}
