//! The egress stream: canonical items from an upstream stream become OpenAI
//! `chat.completion.chunk` SSE events, each forwarded as soon as it is complete.
//!
//! The work runs inside the response body's stream, not in a spawned task: when the client
//! disconnects, hyper drops the body, which drops the upstream response and cancels the call.
//! After the first byte has gone out, an upstream failure ends the stream with one OpenAI-shaped
//! error event and `[DONE]`; nothing already sent is repeated.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use crate::body::Body;
use crate::canonical::{Chunk, StreamItem, Usage};
use crate::error::AxError;
use crate::metering::meter::Meter;
use crate::providers::openai::ChunkEncoder;
use crate::routing::failover::AttemptGuard;
use crate::upstream::call::UpstreamStream;
use crate::upstream::health::Outcome;
use crate::upstream::sse::{self, DONE_EVENT};

pub struct EgressStream {
    upstream: Box<UpstreamStream>,
    enc: ChunkEncoder,
    request_id: String,
    include_usage: bool,
    usage: Option<Usage>,
    pending: VecDeque<Bytes>,
    done: bool,
    /// The attempt's health bookkeeping: reports success, the mid-stream failure, or (dropped
    /// unfinished) a client disconnect.
    guard: Option<AttemptGuard>,
    meter: Option<Meter>,
    /// How the stream ended: `Some(None)` completed, `Some(Some(e))` failed.
    end: Option<Option<AxError>>,
    /// Content and tool-call deltas forwarded (the completion tokens, if the stream is cut).
    deltas: u64,
}

impl EgressStream {
    /// Pulls upstream items until the first one with something to send, so that failures before
    /// the first byte still get a proper HTTP status and can fail over. On failure the attempt's
    /// guard comes back with the error.
    pub async fn open(
        mut upstream: Box<UpstreamStream>,
        enc: ChunkEncoder,
        request_id: String,
        include_usage: bool,
        n: u32,
        guard: AttemptGuard,
    ) -> Result<Box<Self>, (AxError, AttemptGuard)> {
        let mut usage = None;
        loop {
            match upstream.next().await {
                Some(Ok(StreamItem::Chunk(c))) => {
                    if let Some(u) = c.usage {
                        usage = Some(u);
                    }
                    if c.choices.iter().all(crate::canonical::ChunkChoice::is_empty) {
                        continue;
                    }
                    let mut s = Self::new(upstream, enc, request_id, include_usage, usage, n, guard);
                    s.push_chunk(c);
                    return Ok(Box::new(s));
                }
                Some(Ok(StreamItem::Done)) | None => {
                    // A stream that ends with nothing: still a valid (empty) reply.
                    let mut s = Self::new(upstream, enc, request_id, include_usage, usage, n, guard);
                    s.finish();
                    return Ok(Box::new(s));
                }
                Some(Err(e)) => return Err((e, guard)),
            }
        }
    }

    fn new(
        upstream: Box<UpstreamStream>,
        enc: ChunkEncoder,
        request_id: String,
        include_usage: bool,
        usage: Option<Usage>,
        n: u32,
        guard: AttemptGuard,
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
            guard: Some(guard),
            meter: None,
            end: None,
            deltas: 0,
        }
    }

    /// Hands over the request's meter; it reports when the stream ends, however it ends.
    pub fn attach(&mut self, mut meter: Meter) {
        for _ in 0..self.deltas {
            meter.delta();
        }
        self.meter = Some(meter);
        self.settle();
    }

    pub fn into_body(self: Box<Self>) -> Body {
        Body::stream(futures_util::stream::unfold(self, |mut st| async move { st.step().await.map(|b| (b, st)) }))
    }

    async fn step(&mut self) -> Option<Bytes> {
        loop {
            if let Some(b) = self.pending.pop_front() {
                return Some(b);
            }
            if self.done {
                return None;
            }
            match self.upstream.next().await {
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
        let deltas = c
            .choices
            .iter()
            .filter(|ch| ch.content.as_ref().is_some_and(|t| !t.is_empty()) || !ch.tool_calls.is_empty())
            .count();
        self.deltas += deltas as u64;
        if let Some(m) = &mut self.meter {
            for _ in 0..deltas {
                m.delta();
            }
        }
        if c.choices.iter().any(|ch| ch.content.as_ref().is_some_and(|t| !t.is_empty()) || !ch.tool_calls.is_empty()) {
            if let Some(m) = &mut self.meter {
                m.first_token();
            }
            if let Some(g) = &mut self.guard {
                g.first_token();
            }
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
        self.end = Some(None);
        self.settle();
    }

    fn fail(&mut self, e: &AxError) {
        tracing::warn!(code = e.code(), "stream ended by upstream failure");
        let mut tail = BytesMut::new();
        tail.extend_from_slice(&sse::data_event(&e.to_body(&self.request_id)));
        tail.extend_from_slice(DONE_EVENT);
        self.pending.push_back(tail.freeze());
        self.done = true;
        self.end = Some(Some(e.clone()));
        self.settle();
    }

    /// Reports the end (once known) to the attempt guard and the meter; tokens the provider
    /// reported so far reach the meter even if the caller goes away first (see `Drop`). A stream can end before
    /// the meter is attached (an upstream that finishes within the first read).
    fn settle(&mut self) {
        let Some(end) = &self.end else { return };
        if let Some(mut g) = self.guard.take() {
            if let Some(u) = &self.usage {
                g.usage(u.total());
            }
            g.finish(end.as_ref().map_or(Outcome::Success, AxError::outcome));
        }
        if let Some(m) = &mut self.meter {
            if let Some(u) = &self.usage {
                m.usage(u);
            }
            m.finish(200, end.as_ref().map(AxError::code));
        }
    }
}

impl Drop for EgressStream {
    /// The caller went away mid-stream: the meter's record (emitted as it drops) carries the
    /// tokens generated until now: the provider's count if one arrived, else the deltas forwarded.
    fn drop(&mut self) {
        if self.end.is_none() {
            if let (Some(m), Some(u)) = (&mut self.meter, &self.usage) {
                if u.completion_tokens >= self.deltas {
                    m.usage(u);
                }
            }
        }
    }
}
