//! The egress stream: canonical items from an upstream stream become the caller's wire events
//! (the codec's `StreamEncoder`), each forwarded as soon as it is complete.
//!
//! The work runs inside the response body's stream, not in a spawned task: when the client
//! disconnects, hyper drops the body, which drops the upstream response and cancels the call.
//! After the first byte has gone out, an upstream failure ends the stream with the protocol's
//! error event; nothing already sent is repeated.
//!
//! An upstream that speaks the caller's protocol (the same-protocol fast path) sends `Raw`
//! events: each is forwarded as it came, and only what metering needs is read from it.
//!
//! The last event of a completed or failed stream (before `[DONE]` where the protocol has one)
//! carries ax's facts of the call in an `ax` field the SDKs ignore: the request id, the upstream
//! and model that served, the attempts, and the exact cost as metered (`ax_facts`). The stream's
//! end is written only when the caller reads it, after the meter has settled, and the event that
//! may turn out to be the last (one with no content delta, or a choice's finish) is held back
//! until the next one comes, so that the field can go into it.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::body::Body;
use crate::error::{AxError, Outcome};
use crate::pipeline::Ledger;
use crate::routing::failover::AttemptHealth;
use crate::upstream::call::UpstreamStream;
pub use ax_wire::canonical::StreamEncoder;
use ax_wire::canonical::{Chunk, RawEvent, StreamItem, Usage};

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
    /// The upstream's events are forwarded as they came (no opening event of ours, and our
    /// terminator alone at the end).
    forwarded: bool,
    /// The encoder's `before_end`, awaited before the end goes out.
    before_end: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
    /// An event that may be the stream's last, held back until the next one.
    held: Option<Bytes>,
    /// The stream ended: its end is written when the caller reads it (`push_end`).
    end_due: bool,
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
        // Forwarded events before the first content (the role event) wait with it.
        let mut held: Option<VecDeque<Bytes>> = None;
        loop {
            match upstream.next().await {
                Some(Ok(StreamItem::Chunk(c))) => {
                    if let Some(u) = c.usage {
                        usage = Some(u);
                    }
                    if c.choices.iter().all(ax_wire::canonical::ChunkChoice::is_empty) {
                        continue;
                    }
                    let mut s = Self::new(upstream, enc, usage, n, guard, held);
                    s.push_chunk(c);
                    return Ok(Box::new(s));
                }
                Some(Ok(StreamItem::Raw(ev))) => {
                    if ev.deltas == 0 {
                        if let Some(u) = ev.usage {
                            usage = Some(u);
                        }
                        let keep = !ev.usage_only || enc.wants_usage_event();
                        let held = held.get_or_insert_with(VecDeque::new);
                        if keep {
                            held.push_back(ev.bytes);
                        }
                        continue;
                    }
                    let mut s = Self::new(upstream, enc, usage, n, guard, Some(held.unwrap_or_default()));
                    s.push_raw(ev);
                    return Ok(Box::new(s));
                }
                Some(Ok(StreamItem::Done)) | None => {
                    // A stream that ends with nothing: still a valid (empty) reply.
                    let mut s = Self::new(upstream, enc, usage, n, guard, held);
                    s.finish();
                    return Ok(Box::new(s));
                }
                Some(Err(e)) => return Err((e, guard)),
            }
        }
    }

    /// `held`: the forwarded events so far, when the upstream's events are forwarded (they stand
    /// in for our opening event).
    fn new(
        upstream: Box<UpstreamStream>,
        mut enc: E,
        usage: Option<Usage>,
        n: u32,
        guard: AttemptHealth,
        held: Option<VecDeque<Bytes>>,
    ) -> Self {
        let forwarded = held.is_some();
        let pending = match held {
            Some(h) => h,
            // A protocol with no opening event (Gemini's) writes none.
            None => VecDeque::from_iter(Some(enc.start(n.max(1))).filter(|b| !b.is_empty())),
        };
        EgressStream {
            upstream,
            enc,
            usage,
            pending,
            done: false,
            guard: Some(guard),
            ledger: None,
            end: None,
            deltas: 0,
            forwarded,
            before_end: None,
            held: None,
            end_due: false,
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
            if let Some(work) = self.before_end.take() {
                work.await;
            }
            if let Some(b) = self.pending.pop_front() {
                return Some(b);
            }
            if std::mem::take(&mut self.end_due) {
                self.push_end();
                continue;
            }
            if self.done {
                return None;
            }
            match self.upstream.next().await {
                Some(Ok(StreamItem::Chunk(c))) => self.push_chunk(c),
                Some(Ok(StreamItem::Raw(ev))) => self.push_raw(ev),
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
        self.count_deltas(deltas as u64);
        let finishes = c.choices.iter().any(|ch| ch.finish_reason.is_some());
        let event = self.enc.chunk(&c.choices);
        // An encoder that keeps what it was given for a later event (Gemini's calls) writes none.
        if !event.is_empty() {
            self.push_event(event, deltas == 0 || finishes);
        }
    }

    /// Sends `event` after the one held back; holds it back instead when it may be the last.
    fn push_event(&mut self, event: Bytes, may_be_last: bool) {
        if let Some(h) = self.held.take() {
            self.pending.push_back(h);
        }
        if may_be_last {
            self.held = Some(event);
        } else {
            self.pending.push_back(event);
        }
    }

    /// An event forwarded as the upstream sent it; what metering needs was read from it.
    fn push_raw(&mut self, ev: RawEvent) {
        if let Some(u) = ev.usage {
            self.usage = Some(u);
        }
        if ev.usage_only && !self.enc.wants_usage_event() {
            return;
        }
        self.count_deltas(u64::from(ev.deltas));
        self.push_event(ev.bytes, ev.deltas == 0 || ev.finishes);
    }

    /// Content or tool-call deltas about to go out: the meter counts them (the completion
    /// tokens of a stream cut short) and the first marks the time to first token.
    fn count_deltas(&mut self, deltas: u64) {
        if deltas == 0 {
            return;
        }
        self.deltas += deltas;
        if let Some(l) = &mut self.ledger {
            for _ in 0..deltas {
                l.meter.delta();
            }
            l.meter.first_token();
        }
        if let Some(g) = &mut self.guard {
            g.first_token();
        }
    }

    fn finish(&mut self) {
        self.done = true;
        self.end = Some(None);
        self.end_due = true;
        self.settle();
    }

    fn fail(&mut self, e: &AxError) {
        tracing::warn!(code = e.code(), "stream ended by upstream failure");
        self.done = true;
        self.end = Some(Some(e.clone()));
        self.end_due = true;
        self.settle();
    }

    /// The end of the stream, written as the caller reads it (the meter has settled by then):
    /// the held-back event, the protocol's end, and ax's facts in the last event that can take
    /// them.
    fn push_end(&mut self) {
        let tail = match &self.end {
            Some(Some(e)) => self.enc.fail(e),
            _ if self.forwarded => self.enc.end_forwarded(),
            _ => self.enc.finish(self.usage.as_ref()),
        };
        self.before_end = self.enc.before_end();
        let mut held = self.held.take();
        let mut tail = tail;
        // Into the tail's last JSON event, else into the held-back one.
        if let Some(f) = self.ax_facts() {
            if let Some(t) = with_facts(&tail, &f) {
                tail = t;
            } else if let Some(h) = held.as_mut() {
                if let Some(with) = with_facts(h, &f) {
                    *h = with;
                }
            }
        }
        self.pending.extend(held);
        if !tail.is_empty() {
            self.pending.push_back(tail);
        }
    }

    /// ax's facts of the call, as JSON: what the headers of a whole answer say (`x-request-id`,
    /// `x-ax-upstream`, `x-ax-model`, `x-ax-attempts`, `x-ax-fallback`, `x-ax-cost-usd`), from the
    /// settled record, so the cost is the one metered.
    fn ax_facts(&self) -> Option<Vec<u8>> {
        #[derive(serde::Serialize)]
        struct Facts<'a> {
            request_id: &'a str,
            upstream: &'a str,
            model: &'a str,
            attempts: u32,
            #[serde(skip_serializing_if = "Option::is_none")]
            fallback: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            cost_usd: Option<String>,
            /// The tokens (and so the cost) are ax's estimate: the provider reported none.
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            estimated: bool,
        }
        let r = &self.ledger.as_ref()?.meter.record;
        let facts = Facts {
            request_id: &r.request_id,
            upstream: &r.upstream,
            model: &r.model,
            attempts: r.attempts,
            fallback: r.fallback.as_deref(),
            cost_usd: r.cost_micro_usd.map(ax_protocol::price::format_usd),
            estimated: r.estimated,
        };
        serde_json::to_vec(&facts).ok()
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
            if l.meter.traced() {
                l.meter.answered(self.upstream.facts());
                if let Some(t) = self.upstream.transcript() {
                    l.meter.completion(t.answer());
                }
            }
            l.finish(200, end.as_ref().map(AxError::code));
        }
    }
}

/// `events` with `"ax":<facts>` written into the last event whose data is one JSON object, as
/// its last member; `None` when no event's data is an object. An event's data may span several
/// `data:` lines (a forwarded event keeps the upstream's lines): its object opens on the first
/// and closes on the last, and the member goes before that close.
fn with_facts(events: &[u8], facts: &[u8]) -> Option<Bytes> {
    let mut found = None;
    // The spans of the current event's `data:` values.
    let mut data: smallvec::SmallVec<[(usize, usize); 4]> = smallvec::SmallVec::new();
    let mut at = 0;
    loop {
        let end = memchr::memchr(b'\n', &events[at..]).map_or(events.len(), |i| at + i);
        let line_end = if end > at && events[end - 1] == b'\r' { end - 1 } else { end };
        let line = &events[at..line_end];
        if line.is_empty() {
            found = object_close(events, &data).or(found);
            data.clear();
        } else if let Some(v) = line.strip_prefix(b"data:") {
            let skip = usize::from(v.first() == Some(&b' '));
            data.push((at + 5 + skip, line_end));
        }
        if end >= events.len() {
            found = object_close(events, &data).or(found);
            break;
        }
        at = end + 1;
    }
    let (close, empty) = found?;
    let mut out = Vec::with_capacity(events.len() + facts.len() + 6);
    out.extend_from_slice(&events[..close]);
    out.extend_from_slice(if empty { b"\"ax\":" } else { b",\"ax\":" });
    out.extend_from_slice(facts);
    out.extend_from_slice(&events[close..]);
    Some(Bytes::from(out))
}

/// Where the object an event's data holds closes (the index of its `}` in `events`), and whether
/// it has no member; `None` when the data is not an object.
fn object_close(events: &[u8], data: &[(usize, usize)]) -> Option<(usize, bool)> {
    let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    let bytes = || data.iter().flat_map(|&(s, e)| (s..e).map(|i| (i, events[i])));
    let (open, first) = bytes().find(|(_, b)| !ws(b))?;
    let (close, last) = bytes().rev().find(|(_, b)| !ws(b))?;
    if first != b'{' || last != b'}' || open == close {
        return None;
    }
    let empty = bytes().all(|(i, b)| i <= open || i >= close || ws(&b));
    Some((close, empty))
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
            if let Some(l) = self.ledger.as_mut().filter(|l| l.meter.traced()) {
                l.meter.answered(self.upstream.facts());
                if let Some(t) = self.upstream.transcript() {
                    l.meter.completion(t.answer());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::with_facts;

    fn facts(events: &str) -> Option<String> {
        with_facts(events.as_bytes(), br#"{"n":1}"#).map(|b| String::from_utf8(b.to_vec()).unwrap())
    }

    /// The facts go into the last event whose data is an object, as its last member, wherever its
    /// data's lines split it; events whose data is not an object are passed over.
    #[test]
    fn the_facts_go_into_the_last_object_whatever_its_lines() {
        assert_eq!(facts("data: {\"a\":1}\n\n").unwrap(), "data: {\"a\":1,\"ax\":{\"n\":1}}\n\n");
        assert_eq!(
            facts("data: {\"a\":1}\n\ndata: [DONE]\n\n").unwrap(),
            "data: {\"a\":1,\"ax\":{\"n\":1}}\n\ndata: [DONE]\n\n"
        );
        assert_eq!(
            facts("event: message_stop\ndata: {\"type\":\n data: \"message_stop\"\ndata: }  \n\n").unwrap(),
            "event: message_stop\ndata: {\"type\":\n data: \"message_stop\"\ndata: ,\"ax\":{\"n\":1}}  \n\n"
        );
        assert_eq!(facts("data: {\ndata:   }\n\n").unwrap(), "data: {\ndata:   \"ax\":{\"n\":1}}\n\n");
        assert_eq!(facts("data: {}").unwrap(), "data: {\"ax\":{\"n\":1}}");
        assert_eq!(
            facts("data: {\"a\":1}\n\ndata: [1]\n\n").unwrap(),
            "data: {\"a\":1,\"ax\":{\"n\":1}}\n\ndata: [1]\n\n"
        );
        assert_eq!(facts("data: [DONE]\n\n"), None);
        assert_eq!(facts(": comment {}\n\n"), None);
        assert_eq!(facts("data: {\ndata: \"a\": 1\n\n"), None);
    }
}
