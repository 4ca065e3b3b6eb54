//! The egress stream: canonical items from an upstream stream become the caller's wire events
//! (the codec's `StreamEncoder`), each forwarded as soon as it is complete.
//!
//! The work runs inside the response body's stream, not in a spawned task: when the client
//! disconnects, hyper drops the body, which drops the upstream response and cancels the call.
//! After the first byte has gone out, an upstream failure ends the stream with the protocol's
//! error event; nothing already sent is repeated.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::body::Body;
use crate::canonical::{Chunk, ChunkChoice, StreamItem, Usage};
use crate::error::{AxError, Outcome};
use crate::pipeline::Ledger;
use crate::routing::failover::AttemptHealth;
use crate::upstream::call::UpstreamStream;

/// How a wire protocol writes a stream for its callers.
pub trait StreamEncoder: Send + 'static {
    /// The opening event(s), before the first content, for `n` choices.
    fn start(&mut self, n: u32) -> Bytes;
    /// One event of content or tool-call deltas.
    fn chunk(&mut self, choices: &[ChunkChoice]) -> Bytes;
    /// The end of a completed stream, with the usage the provider reported.
    fn finish(&mut self, usage: Option<&Usage>) -> Bytes;
    /// The end of a stream an upstream failure cut short.
    fn fail(&mut self, e: &AxError) -> Bytes;
}

pub struct EgressStream<E> {
    upstream: Box<UpstreamStream>,
    enc: E,
    usage: Option<Usage>,
    pending: VecDeque<Bytes>,
    done: bool,
    /// The attempt's health bookkeeping: reports success, the mid-stream failure, or (dropped
    /// unfinished) a client disconnect.
    guard: Option<AttemptHealth>,
    /// The request's meter and reservations, once attached.
    ledger: Option<Ledger>,
    /// How the stream ended: `Some(None)` completed, `Some(Some(e))` failed.
    end: Option<Option<AxError>>,
    /// Content and tool-call deltas forwarded (the completion tokens, if the stream is cut).
    deltas: u64,
}

impl<E: StreamEncoder> EgressStream<E> {
    /// Pulls upstream items until the first one with something to send, so that failures before
    /// the first byte still get a proper HTTP status and can fail over. On failure the attempt's
    /// guard comes back with the error.
    pub async fn open(
        mut upstream: Box<UpstreamStream>,
        enc: E,
        n: u32,
        guard: AttemptHealth,
    ) -> Result<Box<Self>, (AxError, AttemptHealth)> {
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
                    let mut s = Self::new(upstream, enc, usage, n, guard);
                    s.push_chunk(c);
                    return Ok(Box::new(s));
                }
                Some(Ok(StreamItem::Done)) | None => {
                    // A stream that ends with nothing: still a valid (empty) reply.
                    let mut s = Self::new(upstream, enc, usage, n, guard);
                    s.finish();
                    return Ok(Box::new(s));
                }
                Some(Err(e)) => return Err((e, guard)),
            }
        }
    }

    fn new(upstream: Box<UpstreamStream>, mut enc: E, usage: Option<Usage>, n: u32, guard: AttemptHealth) -> Self {
        let role = enc.start(n.max(1));
        EgressStream {
            upstream,
            enc,
            usage,
            pending: VecDeque::from([role]),
            done: false,
            guard: Some(guard),
            ledger: None,
            end: None,
            deltas: 0,
        }
    }

    /// Hands over the request's meter and reservations; they settle when the stream ends, however
    /// it ends.
    pub fn attach(&mut self, mut ledger: Ledger) {
        for _ in 0..self.deltas {
            ledger.meter.delta();
        }
        self.ledger = Some(ledger);
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
        if let Some(l) = &mut self.ledger {
            for _ in 0..deltas {
                l.meter.delta();
            }
        }
        if c.choices.iter().any(|ch| ch.content.as_ref().is_some_and(|t| !t.is_empty()) || !ch.tool_calls.is_empty()) {
            if let Some(l) = &mut self.ledger {
                l.meter.first_token();
            }
            if let Some(g) = &mut self.guard {
                g.first_token();
            }
        }
        self.pending.push_back(self.enc.chunk(&c.choices));
    }

    fn finish(&mut self) {
        let tail = self.enc.finish(self.usage.as_ref());
        self.pending.push_back(tail);
        self.done = true;
        self.end = Some(None);
        self.settle();
    }

    fn fail(&mut self, e: &AxError) {
        tracing::warn!(code = e.code(), "stream ended by upstream failure");
        let tail = self.enc.fail(e);
        self.pending.push_back(tail);
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
        if let Some(l) = &mut self.ledger {
            if let Some(u) = &self.usage {
                l.meter.usage(u);
            }
            l.finish(200, end.as_ref().map(AxError::code));
        }
    }
}

impl<E> Drop for EgressStream<E> {
    /// The caller went away mid-stream: the record (emitted as the ledger drops) carries the
    /// tokens generated until now: the provider's count if one arrived, else the deltas forwarded.
    fn drop(&mut self) {
        if self.end.is_none() {
            if let (Some(l), Some(u)) = (&mut self.ledger, &self.usage) {
                if u.completion_tokens >= self.deltas {
                    l.meter.usage(u);
                }
            }
        }
    }
}
