use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A minimal HTTP/1.1 server: answers every request with `{"ok":true}`; closes each
/// connection after one answer when `close_after_one`. Counts connections and keeps the
/// request heads it saw.
struct Server {
    url: reqwest::Url,
    accepted: Arc<AtomicUsize>,
    heads: Arc<Mutex<Vec<String>>>,
}

async fn server(close_after_one: bool) -> Server {
    server_with(close_after_one, false).await
}

/// `chunked`: the answer is a chunked body of two chunks, the second sent 20 ms after the first.
async fn server_with(close_after_one: bool, chunked: bool) -> Server {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = reqwest::Url::parse(&format!("http://{}/v1", l.local_addr().unwrap())).unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let heads = Arc::new(Mutex::new(Vec::new()));
    let (a, h) = (accepted.clone(), heads.clone());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            a.fetch_add(1, Ordering::SeqCst);
            let h = h.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let mut chunk = [0u8; 4096];
                    let Ok(n) = s.read(&mut chunk).await else { return };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
                    let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    if buf.len() < end + 4 + len {
                        continue;
                    }
                    buf.drain(..end + 4 + len);
                    h.lock().unwrap().push(head);
                    if chunked {
                        let head =
                            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                        let first = format!("{head}b\r\ndata: one\n\n\r\n");
                        if s.write_all(first.as_bytes()).await.is_err() {
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        if s.write_all(b"0\r\n\r\n").await.is_err() {
                            return;
                        }
                        continue;
                    }
                    let body = r#"{"ok":true}"#;
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if s.write_all(resp.as_bytes()).await.is_err() || close_after_one {
                        return;
                    }
                }
            });
        }
    });
    Server { url, accepted, heads }
}

fn client(url: &reqwest::Url) -> Client {
    let mut headers = HeaderMap::new();
    headers.insert("authorization", HeaderValue::from_static("Bearer sk-upstream"));
    Client::new(url, headers, Duration::from_secs(2), 1).unwrap()
}

async fn call(c: &Client) -> Result<Vec<u8>, String> {
    let target: Uri = "/v1/chat/completions".parse().unwrap();
    let mut resp = c.post_json(&target, b"{}".to_vec(), &[], "req-1".into()).await.map_err(|e| e.to_string())?;
    let mut body = Vec::new();
    while let Some(b) = resp.chunk().await.map_err(|e| e.to_string())? {
        body.extend_from_slice(&b);
    }
    Ok(body)
}

#[tokio::test]
async fn one_connection_serves_sequential_requests_and_carries_the_headers() {
    let s = server(false).await;
    let c = client(&s.url);
    for _ in 0..5 {
        assert_eq!(call(&c).await.unwrap(), br#"{"ok":true}"#);
    }
    assert_eq!(s.accepted.load(Ordering::SeqCst), 1);
    assert_eq!(c.idle(), 1);
    let heads = s.heads.lock().unwrap();
    assert_eq!(heads.len(), 5);
    let host = format!("host: {}", s.url.authority());
    for h in heads.iter() {
        assert!(h.starts_with("post /v1/chat/completions http/1.1"), "{h}");
        for line in [host.as_str(), "authorization: bearer sk-upstream", "x-request-id: req-1"] {
            assert!(h.lines().any(|l| l == line), "{line} missing in {h}");
        }
        assert!(h.lines().any(|l| l == "content-type: application/json"), "{h}");
    }
}

#[tokio::test]
async fn a_response_dropped_before_its_end_does_not_go_back_to_the_pool() {
    let s = server(false).await;
    let c = client(&s.url);
    let target: Uri = "/v1/chat/completions".parse().unwrap();
    drop(c.post_json(&target, b"{}".to_vec(), &[], "req-1".into()).await.unwrap());
    assert_eq!(c.idle(), 0);
    call(&c).await.unwrap();
    assert_eq!(s.accepted.load(Ordering::SeqCst), 2);
}

/// What has arrived is given without a read: an answer that came whole with its head is its
/// body then its end (the connection back in the pool); a body still arriving is `None` until
/// a read brings more.
#[tokio::test]
async fn a_buffered_chunk_needs_no_read() {
    let target: Uri = "/v1/chat/completions".parse().unwrap();
    let s = server(false).await;
    let c = client(&s.url);
    let mut resp = c.post_json(&target, b"{}".to_vec(), &[], "req-1".into()).await.unwrap();
    let mut body = Vec::new();
    // (The head and the body may come in two reads: one more read at most.)
    let end = loop {
        match resp.buffered_chunk() {
            Some(Ok(Some(b))) => body.extend_from_slice(&b),
            Some(Ok(None)) => break true,
            Some(Err(e)) => panic!("{e}"),
            None => match resp.chunk().await.unwrap() {
                Some(b) => body.extend_from_slice(&b),
                None => break false,
            },
        }
    };
    assert!(end, "the end was read, not buffered");
    assert_eq!(body, br#"{"ok":true}"#);
    assert_eq!(c.idle(), 1);

    let s = server_with(false, true).await;
    let c = client(&s.url);
    let mut resp = c.post_json(&target, b"{}".to_vec(), &[], "req-1".into()).await.unwrap();
    let first = match resp.buffered_chunk() {
        Some(first) => first.unwrap(),
        None => resp.chunk().await.unwrap(),
    };
    assert_eq!(first.unwrap(), &b"data: one\n\n"[..]);
    // The terminator comes 20 ms later: nothing is buffered for it yet.
    assert!(resp.buffered_chunk().is_none());
    assert_eq!(resp.chunk().await.unwrap(), None);
    assert_eq!(resp.buffered_chunk().unwrap().unwrap(), None, "the end, again");
}

#[tokio::test]
async fn a_stream_left_after_its_last_event_keeps_its_connection() {
    let s = server_with(false, true).await;
    let c = client(&s.url);
    let target: Uri = "/v1/chat/completions".parse().unwrap();
    let mut resp = c.post_json(&target, b"{}".to_vec(), &[], "req-1".into()).await.unwrap();
    assert_eq!(resp.chunk().await.unwrap().unwrap(), &b"data: one\n\n"[..]);
    // The caller has its last event and moves on; the body's end arrives 20 ms later.
    resp.finish_in_background();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(c.idle(), 1);
    let mut resp = c.post_json(&target, b"{}".to_vec(), &[], "req-2".into()).await.unwrap();
    while resp.chunk().await.unwrap().is_some() {}
    assert_eq!(s.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_connection_the_server_closed_is_not_used_again() {
    let s = server(true).await;
    let c = client(&s.url);
    call(&c).await.unwrap();
    // Let the close arrive.
    tokio::time::sleep(Duration::from_millis(50)).await;
    for _ in 0..3 {
        call(&c).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(s.accepted.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn a_refused_connect_is_a_connect_error() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = reqwest::Url::parse(&format!("http://{}", l.local_addr().unwrap())).unwrap();
    drop(l);
    let c = client(&url);
    let target: Uri = "/".parse().unwrap();
    assert!(matches!(c.post_json(&target, Vec::<u8>::new(), &[], "r".into()).await, Err(Error::Connect(_))));
}

#[tokio::test]
async fn a_failed_tls_handshake_is_a_connect_error_and_a_silent_one_times_out() {
    // A server that closes at once: the handshake fails.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = reqwest::Url::parse(&format!("https://{}", l.local_addr().unwrap())).unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            drop(s);
        }
    });
    let target: Uri = "/".parse().unwrap();
    let c = Client::new(&url, HeaderMap::new(), Duration::from_secs(2), 1).unwrap();
    let e = c.post_json(&target, Vec::<u8>::new(), &[], "r".into()).await.err().unwrap();
    assert!(matches!(&e, Error::Connect(m) if m.starts_with("TLS")), "{e}");
    // One that accepts and says nothing: the connect timeout covers the handshake.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = reqwest::Url::parse(&format!("https://{}", l.local_addr().unwrap())).unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    let c = Client::new(&url, HeaderMap::new(), Duration::from_millis(200), 1).unwrap();
    assert!(matches!(c.post_json(&target, Vec::<u8>::new(), &[], "r".into()).await, Err(Error::ConnectTimeout)));
}

#[test]
fn origins_are_checked_and_https_gets_tls() {
    let new = |u: &str| Client::new(&reqwest::Url::parse(u).unwrap(), HeaderMap::new(), Duration::from_secs(1), 2);
    let c = new("https://api.example.com/v1").unwrap();
    assert!(c.origin.tls.is_some());
    assert_eq!((c.origin.host.as_str(), c.origin.port), ("api.example.com", 443));
    assert!(c.fixed_head.starts_with(b"host: api.example.com\r\n"));
    let c = new("http://[::1]:8080").unwrap();
    assert_eq!((c.origin.host.as_str(), c.origin.port), ("::1", 8080));
    assert!(c.fixed_head.starts_with(b"host: [::1]:8080\r\n"));
    assert!(new("http://user:pw@example.com").unwrap_err().contains("credentials"));
    assert!(new("ftp://example.com").is_err());
}

/// A server that answers each request with the next of `answers` (raw bytes, written as
/// given, each piece after the one before with `gap` between), then closes when `close`.
async fn scripted(answers: Vec<Vec<&'static [u8]>>, gap: Duration, close: bool) -> reqwest::Url {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = reqwest::Url::parse(&format!("http://{}", l.local_addr().unwrap())).unwrap();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        for pieces in answers {
            let mut buf = Vec::new();
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                let mut chunk = [0u8; 4096];
                let n = s.read(&mut chunk).await.unwrap();
                if n == 0 {
                    return;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            for p in pieces {
                s.write_all(p).await.unwrap();
                tokio::time::sleep(gap).await;
            }
        }
        if !close {
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    });
    url
}

async fn body_of(c: &Client) -> Result<(StatusCode, Vec<u8>), String> {
    let target: Uri = "/v1/x".parse().unwrap();
    let mut resp = c.post_json(&target, b"{}".to_vec(), &[], "req-1".into()).await.map_err(|e| e.to_string())?;
    let mut body = Vec::new();
    while let Some(b) = resp.chunk().await.map_err(|e| e.to_string())? {
        body.extend_from_slice(&b);
    }
    Ok((resp.status, body))
}

#[tokio::test]
async fn chunked_bodies_split_anywhere_are_reassembled_and_the_connection_kept() {
    let pieces: Vec<&'static [u8]> = vec![
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/event-stream\r\n\r\n5;ext=1\r\nhel",
        b"lo\r",
        b"\n6\r\n world\r\n0\r\nx-trailer: 1\r\n",
        b"\r\n",
    ];
    let url = scripted(vec![pieces, vec![b"HTTP/1.1 204 No Content\r\n\r\n"]], Duration::from_millis(5), false).await;
    let c = client(&url);
    let (status, body) = body_of(&c).await.unwrap();
    assert_eq!((status, body.as_slice()), (StatusCode::OK, &b"hello world"[..]));
    assert_eq!(c.idle(), 1, "a chunked body read to its end keeps its connection");
    let (status, body) = body_of(&c).await.unwrap();
    assert_eq!((status, body.len()), (StatusCode::NO_CONTENT, 0));
    assert_eq!(c.idle(), 1);
}

#[tokio::test]
async fn informational_heads_are_skipped_and_the_kept_headers_are_given() {
    let url = scripted(
        vec![vec![
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n",
            b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nx-other: 1\r\ncontent-length: 2\r\n\r\n{}",
        ]],
        Duration::ZERO,
        false,
    )
    .await;
    let c = client(&url);
    let target: Uri = "/".parse().unwrap();
    let mut resp = c.post_json(&target, Vec::<u8>::new(), &[], "r".into()).await.unwrap();
    assert_eq!(resp.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(resp.headers.get("retry-after").unwrap(), "7");
    assert!(resp.headers.get("x-other").is_none(), "only the kept headers are kept");
    assert_eq!(resp.chunk().await.unwrap().unwrap(), &b"{}"[..]);
    assert!(resp.chunk().await.unwrap().is_none());
}

#[tokio::test]
async fn a_body_until_close_is_read_to_the_end_and_its_connection_not_kept() {
    let url =
        scripted(vec![vec![b"HTTP/1.1 200 OK\r\n\r\npart one, ", b"part two"]], Duration::from_millis(5), true).await;
    let c = client(&url);
    assert_eq!(body_of(&c).await.unwrap().1, b"part one, part two");
    assert_eq!(c.idle(), 0);
}

#[tokio::test]
async fn connection_close_and_http_1_0_answers_are_not_pooled() {
    for head in [
        &b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"[..],
        b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok",
    ] {
        let url = scripted(vec![vec![head]], Duration::ZERO, false).await;
        let c = client(&url);
        assert_eq!(body_of(&c).await.unwrap().1, b"ok");
        assert_eq!(c.idle(), 0, "{}", String::from_utf8_lossy(head));
    }
}

#[tokio::test]
async fn a_body_cut_short_is_an_error_not_an_answer() {
    for pieces in [
        vec![&b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort"[..]],
        vec![b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n"],
    ] {
        let url = scripted(vec![pieces], Duration::ZERO, true).await;
        let c = client(&url);
        let e = body_of(&c).await.unwrap_err();
        assert!(e.contains("ended early"), "{e}");
    }
    let url = scripted(vec![vec![]], Duration::ZERO, true).await;
    let e = body_of(&client(&url)).await.unwrap_err();
    assert!(e.contains("closed before a response"), "{e}");
}

#[tokio::test]
async fn malformed_answers_are_errors() {
    for (pieces, want) in [
        (vec![&b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nok"[..]], "conflicting"),
        (vec![b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"], "invalid chunk size"),
        (vec![b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nokX\r\n"], "CRLF"),
        (vec![b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\nok\r\n"], "without CRLF"),
        (vec![b"SMTP ready\r\n\r\n"], "invalid response head"),
    ] {
        let url = scripted(vec![pieces], Duration::ZERO, false).await;
        let e = body_of(&client(&url)).await.unwrap_err();
        assert!(e.contains(want), "{e} should say {want}");
    }
}

#[test]
fn heads_are_framed_by_the_rules_of_rfc_9112() {
    let head = |s: &str| parse_head(s.as_bytes()).unwrap().unwrap();
    let h = head("HTTP/1.1 200 OK\r\ncontent-length: 42, 42\r\n\r\n");
    assert_eq!((h.framing, h.keep_alive), (Framing::Length(42), true));
    // A transfer coding wins over a length, and such a connection is not kept.
    let h = head("HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: gzip, chunked\r\n\r\n");
    assert_eq!((h.framing, h.keep_alive), (Framing::Chunked(Chunked::Size), false));
    let h = head("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\n");
    assert_eq!((h.framing, h.keep_alive), (Framing::UntilClose, false));
    assert_eq!(head("HTTP/1.1 304 Not Modified\r\ncontent-length: 9\r\n\r\n").framing, Framing::Done);
    assert!(head("HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 1\r\n\r\n").keep_alive);
    assert!(!head("HTTP/1.1 200 OK\r\nconnection: Close\r\ncontent-length: 1\r\n\r\n").keep_alive);
    let h = head("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After-Ms: 250\r\ncontent-length: 0\r\n\r\n");
    assert_eq!(h.headers.get("retry-after-ms").unwrap(), "250");
    assert_eq!(h.headers.get(http::header::CONTENT_TYPE).unwrap(), "application/json");
    assert_eq!(h.framing, Framing::Done);
    assert!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-").unwrap().is_none(), "a partial head waits");
    assert!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n").is_err());
    assert!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: 1, 2\r\n\r\n").is_err());
    let huge = format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD_BYTES + 1));
    assert!(parse_head(huge.as_bytes()).unwrap_err().contains("too large"));
}

#[test]
fn request_heads_carry_the_fixed_headers_the_id_and_the_length() {
    let url = reqwest::Url::parse("http://127.0.0.1:9/v1").unwrap();
    let c = client(&url);
    let target: Uri = "/v1/chat/completions?x=1".parse().unwrap();
    let head = String::from_utf8(c.request_head(&target, "application/json", 17, &[], "req-1".into())).unwrap();
    assert_eq!(
        head,
        "POST /v1/chat/completions?x=1 HTTP/1.1\r\nhost: 127.0.0.1:9\r\nauthorization: Bearer sk-upstream\r\n\
         content-type: application/json\r\nx-request-id: req-1\r\ncontent-length: 17\r\n\r\n"
    );
    let head = String::from_utf8(c.request_head(&target, "application/json", 0, &[], "bad\r\nid".into())).unwrap();
    assert!(!head.contains("x-request-id"), "{head}");
    let traced = Hop {
        request_id: "r",
        traceparent: Some(b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        io: None,
    };
    let head = String::from_utf8(c.request_head(&target, "application/json", 0, &[], traced)).unwrap();
    assert!(head.contains("\r\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n"), "{head}");
    assert!(!format!("{c:?}").contains("sk-upstream"), "the key is never printed");
}

/// Decodes `wire` given in pieces split at `cuts`, as reads would hand them over.
fn decode_in_pieces(wire: &[u8], cuts: &[usize]) -> io::Result<Vec<u8>> {
    let mut framing = Framing::Chunked(Chunked::Size);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut at = 0;
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.push(wire.len());
    for cut in cuts {
        buf.extend_from_slice(&wire[at..cut.max(at)]);
        at = cut.max(at);
        loop {
            match framing.step(&mut buf)? {
                Step::Data(b) => out.extend_from_slice(&b),
                Step::End => return Ok(out),
                Step::More => break,
            }
        }
    }
    Err(io::ErrorKind::UnexpectedEof.into())
}

proptest::proptest! {
    #[test]
    fn a_chunked_body_decodes_the_same_however_it_is_split(
        chunks in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 1..40), 0..8),
        cuts in proptest::collection::vec(0usize..1000, 0..12),
    ) {
        let mut wire = Vec::new();
        for (i, c) in chunks.iter().enumerate() {
            wire.extend_from_slice(format!("{:x}{}\r\n", c.len(), if i % 2 == 1 { ";ext=v" } else { "" }).as_bytes());
            wire.extend_from_slice(c);
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(b"0\r\ntrailer: t\r\n\r\n");
        let got = decode_in_pieces(&wire, &cuts).unwrap();
        proptest::prop_assert_eq!(got, chunks.concat());
    }
}
