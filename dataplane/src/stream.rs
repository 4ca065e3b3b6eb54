//! The egress stream: canonical items from an upstream stream become OpenAI
//! `chat.completion.chunk` SSE events, each forwarded as soon as it is complete.
//!
//! The work runs inside the response body's stream, not in a spawned task: when the client
//! disconnects, hyper drops the body, which drops the upstream response and cancels the call.
//! After the first byte has gone out, an upstream failure ends the stream with one OpenAI-shaped
//! error event and `[DONE]`; nothing already sent is repeated.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use tokio::time::{timeout_at, Instant};

use crate::canonical::{Chunk, StreamItem, Usage};
use crate::dispatch::UpstreamStream;
use crate::error::AxError;
use crate::meter::Meter;
use crate::providers::openai::ChunkEncoder;
use crate::sse::{self, DONE_EVENT};

pub struct EgressStream {
    upstream: UpstreamStream,
    enc: ChunkEncoder,
    request_id: String,
    include_usage: bool,
    usage: Option<Usage>,
    pending: VecDeque<Bytes>,
    done: bool,
    deadline: Instant,
    meter: Meter,
}

/// What the stream looks like before the response is committed.
pub enum Opening {
    /// The stream is alive: these events go out first.
    Started(Box<EgressStream>),
    /// The upstream failed before anything could be sent: answer with an HTTP error instead.
    Failed(AxError),
}

impl EgressStream {
    /// Pulls upstream items until the first one with something to send (or an error), so that
    /// failures before the first byte still get a proper HTTP status.
    pub async fn open(
        mut upstream: UpstreamStream,
        enc: ChunkEncoder,
        request_id: String,
        include_usage: bool,
        n: u32,
        deadline: Instant,
        mut meter: Meter,
    ) -> Opening {
        let mut usage = None;
        loop {
            let item = match timeout_at(deadline, upstream.next()).await {
                Err(_) => Some(Err(AxError::UpstreamTimeout)),
                Ok(item) => item,
            };
            match item {
                Some(Ok(StreamItem::Chunk(c))) => {
                    if let Some(u) = c.usage {
                        usage = Some(u);
                    }
                    if c.choices.iter().all(crate::canonical::ChunkChoice::is_empty) {
                        continue;
                    }
                    let mut s = EgressStream::new(upstream, enc, request_id, include_usage, usage, n, deadline, meter);
                    s.push_chunk(c);
                    return Opening::Started(Box::new(s));
                }
                Some(Ok(StreamItem::Done)) | None => {
                    // A stream that ends with nothing: still a valid (empty) reply.
                    let mut s = EgressStream::new(upstream, enc, request_id, include_usage, usage, n, deadline, meter);
                    s.finish();
                    return Opening::Started(Box::new(s));
                }
                Some(Err(e)) => {
                    meter.finish(e.status().as_u16(), Some(e.code()));
                    return Opening::Failed(e);
                }
            }
        }
    }

    #[expect(clippy::too_many_arguments, reason = "a private constructor of one struct's fields")]
    fn new(
        upstream: UpstreamStream,
        enc: ChunkEncoder,
        request_id: String,
        include_usage: bool,
        usage: Option<Usage>,
        n: u32,
        deadline: Instant,
        meter: Meter,
    ) -> Self {
        let role = enc.role(n.max(1));
        EgressStream {
            upstream,
            enc,
            request_id,
            include_usage,
            usage,
            pending: VecDeque::from([role]),
            done: false,
            deadline,
            meter,
        }
    }

    pub fn into_body(self: Box<Self>) -> Body {
        let s = futures_util::stream::unfold(self, |mut st| async move {
            st.step().await.map(|b| (Ok::<_, Infallible>(b), st))
        });
        Body::from_stream(s)
    }

    async fn step(&mut self) -> Option<Bytes> {
        loop {
            if let Some(b) = self.pending.pop_front() {
                return Some(b);
            }
            if self.done {
                return None;
            }
            let item = match timeout_at(self.deadline, self.upstream.next()).await {
                Err(_) => Some(Err(AxError::UpstreamTimeout)),
                Ok(item) => item,
            };
            match item {
                Some(Ok(StreamItem::Chunk(c))) => self.push_chunk(c),
                Some(Ok(StreamItem::Done)) | None => self.finish(),
                Some(Err(e)) => self.fail(&e),
            }
        }
    }

    fn push_chunk(&mut self, mut c: Chunk) {
        if let Some(u) = c.usage {
            self.usage = Some(u);
        }
        c.choices.retain(|ch| !ch.is_empty());
        if c.choices.is_empty() {
            return;
        }
        if c.choices.iter().any(|ch| ch.content.as_ref().is_some_and(|t| !t.is_empty()) || !ch.tool_calls.is_empty()) {
            self.meter.first_token();
        }
        self.pending.push_back(self.enc.chunk(&c.choices));
    }

    fn finish(&mut self) {
        let mut tail = BytesMut::new();
        if self.include_usage {
            tail.extend_from_slice(&self.enc.usage(&self.usage.unwrap_or_default()));
        }
        tail.extend_from_slice(DONE_EVENT);
        self.pending.push_back(tail.freeze());
        self.done = true;
        if let Some(u) = &self.usage {
            self.meter.usage(u);
        }
        self.meter.finish(200, None);
    }

    fn fail(&mut self, e: &AxError) {
        tracing::warn!(code = e.code(), "stream ended by upstream failure");
        let mut tail = BytesMut::new();
        tail.extend_from_slice(&sse::data_event(&e.to_body(&self.request_id)));
        tail.extend_from_slice(DONE_EVENT);
        self.pending.push_back(tail.freeze());
        self.done = true;
        if let Some(u) = &self.usage {
            self.meter.usage(u);
        }
        self.meter.finish(200, Some(e.code()));
    }
}
