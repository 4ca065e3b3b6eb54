//! The mock upstream: answers OpenAI chat completions, Anthropic messages and Gemini's
//! generateContent (JSON, or a paced SSE
//! stream in the protocol's events when the body asks for `"stream":true`), as cheaply as hyper allows: a prebuilt body,
//! TCP_NODELAY, one write per JSON response. It runs in its own process (`ax-bench mock`) so its
//! CPU is not the load driver's.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::R;

pub const OPENAI_BODY: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1730000000,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":9,"completion_tokens":9,"total_tokens":18}}"#;
pub const ANTHROPIC_BODY: &str = r#"{"id":"msg_01","type":"message","role":"assistant","model":"claude-real","content":[{"type":"text","text":"Hello! How can I help you today?"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":9}}"#;

pub const GEMINI_BODY: &str = r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Hello! How can I help you today?"}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":9,"totalTokenCount":18},"modelVersion":"gemini-real","responseId":"r1"}"#;

/// The paced stream: `events` content chunks `gap` apart, then the finish chunk with usage and
/// `[DONE]`.
#[derive(Clone, Copy)]
pub struct Pace {
    pub events: u32,
    pub gap: Duration,
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn json(body: &'static str) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())).boxed());
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    r
}

fn openai_stream(pace: Pace) -> Response<Body> {
    let chunk = Bytes::from_static(
        b"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1730000000,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok \"},\"finish_reason\":null}]}\n\n",
    );
    let end = Bytes::from_static(
        b"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1730000000,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":50,\"total_tokens\":59}}\n\ndata: [DONE]\n\n",
    );
    paced(pace, Bytes::new(), chunk, end)
}

/// Anthropic's events for the same reply: message_start and the text block's start, the paced
/// text deltas, then the block's stop, message_delta with usage and message_stop.
fn anthropic_stream(pace: Pace) -> Response<Body> {
    let head = Bytes::from_static(
        b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-real\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    );
    let chunk = Bytes::from_static(
        b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"tok \"}}\n\n",
    );
    let end = Bytes::from_static(
        b"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":50}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    paced(pace, head, chunk, end)
}

/// Gemini's events for the same reply: the paced text chunks, then the one with the finish reason
/// and usage (Gemini ends a stream by closing it).
fn gemini_stream(pace: Pace) -> Response<Body> {
    let chunk = Bytes::from_static(
        b"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"tok \"}]},\"index\":0}],\"modelVersion\":\"gemini-real\",\"responseId\":\"r1\"}\r\n\r\n",
    );
    let end = Bytes::from_static(
        b"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"\"}]},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":9,\"candidatesTokenCount\":50,\"totalTokenCount\":59},\"modelVersion\":\"gemini-real\",\"responseId\":\"r1\"}\r\n\r\n",
    );
    paced(pace, Bytes::new(), chunk, end)
}

/// `head` at once, then `pace.events` copies of `chunk` `pace.gap` apart, then `end`.
fn paced(pace: Pace, head: Bytes, chunk: Bytes, end: Bytes) -> Response<Body> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
    tokio::spawn(async move {
        if !head.is_empty() && tx.send(Ok(Frame::data(head))).await.is_err() {
            return;
        }
        let mut tick = tokio::time::interval(pace.gap);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for _ in 0..pace.events {
            tick.tick().await;
            if tx.send(Ok(Frame::data(chunk.clone()))).await.is_err() {
                return;
            }
        }
        let _ = tx.send(Ok(Frame::data(end))).await;
    });
    let body = StreamBody::new(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    let mut r = Response::new(BodyExt::boxed(body));
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/event-stream"));
    r
}

/// `"stream": true` as a client writes it (with or without spaces): a proxy that forwards the
/// caller's bytes keeps them.
fn asks_to_stream(body: &[u8]) -> bool {
    memchr::memmem::find_iter(body, b"\"stream\"").any(|at| {
        let rest = body[at + 8..].iter().skip_while(|b| b.is_ascii_whitespace());
        let mut rest = rest.peekable();
        if rest.next() != Some(&b':') {
            return false;
        }
        let after: Vec<u8> = rest.skip_while(|b| b.is_ascii_whitespace()).take(4).copied().collect();
        after == b"true"
    })
}

async fn handle(req: Request<Incoming>, pace: Pace) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path();
    if path.ends_with(":streamGenerateContent") {
        return Ok(gemini_stream(pace));
    }
    if path.ends_with(":generateContent") {
        return Ok(json(GEMINI_BODY));
    }
    let anthropic = path.ends_with("/messages");
    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    Ok(match (anthropic, asks_to_stream(&body)) {
        (true, true) => anthropic_stream(pace),
        (true, false) => json(ANTHROPIC_BODY),
        (false, true) => openai_stream(pace),
        (false, false) => json(OPENAI_BODY),
    })
}

/// Serves on `listener` until the process ends.
pub async fn serve(listener: TcpListener, pace: Pace) -> R<()> {
    loop {
        let (tcp, _) = listener.accept().await?;
        tcp.set_nodelay(true)?;
        tokio::spawn(async move {
            let svc = service_fn(move |req| handle(req, pace));
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(tcp), svc)
                .await;
        });
    }
}
