//! A usage record as one JSON object, written straight into a buffer: the usage line's `fields`
//! and the spool's line.
//!
//! Written here rather than with serde: through a serde serializer (sonic-rs or serde_json) a
//! record's 25 fields and its attempt's 11 cost ~7,000 instructions, a tenth of a whole ~1 KB
//! request at the default log level (callgrind, session 23); this writes the keys as constants
//! and the values through the one hand writer (`ax_wire::json::write`: a short plain string is
//! copied after one scan), ~1,500. The output is the
//! `Serialize` derive's, field for field and in its order: a test compares the two on arbitrary
//! records, so a field added to `UsageRecord` and not here fails it.

use ax_protocol::usage::{AttemptRecord, UsageRecord};
use ax_wire::json::write::{boolean, opt_string, opt_uint, string, uint};

/// Appends `rec` as JSON (no newline).
pub fn write(out: &mut Vec<u8>, rec: &UsageRecord) {
    out.extend_from_slice(b"{\"request_id\":");
    string(out, &rec.request_id);
    out.extend_from_slice(b",\"started_at_ms\":");
    uint(out, rec.started_at_ms);
    out.extend_from_slice(b",\"tenant\":");
    string(out, &rec.tenant);
    out.extend_from_slice(b",\"key_id\":");
    string(out, &rec.key_id);
    out.extend_from_slice(b",\"alias\":");
    string(out, &rec.alias);
    out.extend_from_slice(b",\"fallback\":");
    opt_string(out, rec.fallback.as_deref());
    out.extend_from_slice(b",\"upstream\":");
    string(out, &rec.upstream);
    out.extend_from_slice(b",\"model\":");
    string(out, &rec.model);
    out.extend_from_slice(b",\"stream\":");
    boolean(out, rec.stream);
    out.extend_from_slice(b",\"status\":");
    uint(out, u64::from(rec.status));
    out.extend_from_slice(b",\"error_code\":");
    opt_string(out, rec.error_code.as_deref());
    out.extend_from_slice(b",\"incomplete\":");
    boolean(out, rec.incomplete);
    out.extend_from_slice(b",\"degraded\":");
    opt_string(out, rec.degraded.as_deref());
    out.extend_from_slice(b",\"estimated\":");
    boolean(out, rec.estimated);
    out.extend_from_slice(b",\"prompt_tokens\":");
    uint(out, rec.prompt_tokens);
    out.extend_from_slice(b",\"completion_tokens\":");
    uint(out, rec.completion_tokens);
    out.extend_from_slice(b",\"cached_prompt_tokens\":");
    uint(out, rec.cached_prompt_tokens);
    out.extend_from_slice(b",\"cache_write_tokens\":");
    uint(out, rec.cache_write_tokens);
    out.extend_from_slice(b",\"cost_micro_usd\":");
    opt_uint(out, rec.cost_micro_usd);
    out.extend_from_slice(b",\"latency_ms\":");
    uint(out, rec.latency_ms);
    out.extend_from_slice(b",\"ttft_ms\":");
    opt_uint(out, rec.ttft_ms);
    out.extend_from_slice(b",\"attempts\":");
    uint(out, u64::from(rec.attempts));
    out.extend_from_slice(b",\"retry_of\":");
    opt_string(out, rec.retry_of.as_deref());
    out.extend_from_slice(b",\"attempt_list\":[");
    for (i, a) in rec.attempt_list.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        attempt(out, a);
    }
    out.push(b']');
    if let Some(t) = &rec.trace_id {
        out.extend_from_slice(b",\"trace_id\":");
        string(out, t);
    }
    out.push(b'}');
}

fn attempt(out: &mut Vec<u8>, a: &AttemptRecord) {
    out.extend_from_slice(b"{\"attempt_id\":");
    string(out, &a.attempt_id);
    out.extend_from_slice(b",\"upstream\":");
    string(out, &a.upstream);
    out.extend_from_slice(b",\"model\":");
    string(out, &a.model);
    out.extend_from_slice(b",\"error_code\":");
    opt_string(out, a.error_code.as_deref());
    out.extend_from_slice(b",\"possibly_billed\":");
    boolean(out, a.possibly_billed);
    out.extend_from_slice(b",\"latency_ms\":");
    uint(out, a.latency_ms);
    out.extend_from_slice(b",\"offset_us\":");
    uint(out, a.offset_us);
    if !a.provider.is_empty() {
        out.extend_from_slice(b",\"provider\":");
        string(out, &a.provider);
    }
    if let Some(t) = a.ttft_ms {
        out.extend_from_slice(b",\"ttft_ms\":");
        uint(out, t);
    }
    out.extend_from_slice(b",\"sent_bytes\":");
    uint(out, a.sent_bytes);
    out.extend_from_slice(b",\"received_bytes\":");
    uint(out, a.received_bytes);
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn text() -> impl Strategy<Value = String> {
        // Plain names, and strings with every kind of character JSON escapes.
        prop_oneof!["[a-z0-9_#.-]{0,12}", "\\PC{0,8}", "[\"\\\\\u{0}-\u{1f}\u{7f}é€😀a]{0,8}"]
    }

    fn attempt() -> impl Strategy<Value = AttemptRecord> {
        (
            (text(), text(), text(), proptest::option::of(text()), any::<bool>()),
            (any::<u64>(), any::<u64>(), text(), proptest::option::of(any::<u64>()), any::<u64>(), any::<u64>()),
        )
            .prop_map(|((attempt_id, upstream, model, error_code, possibly_billed), rest)| {
                let (latency_ms, offset_us, provider, ttft_ms, sent_bytes, received_bytes) = rest;
                AttemptRecord {
                    attempt_id,
                    upstream,
                    model,
                    error_code,
                    possibly_billed,
                    latency_ms,
                    offset_us,
                    provider: provider.into(),
                    ttft_ms,
                    sent_bytes,
                    received_bytes,
                }
            })
    }

    fn record() -> impl Strategy<Value = UsageRecord> {
        let names = (text(), any::<u64>(), text(), text(), text(), proptest::option::of(text()), text(), text());
        let outcome = (
            any::<bool>(),
            any::<u16>(),
            proptest::option::of(text()),
            any::<bool>(),
            proptest::option::of(text()),
            any::<bool>(),
        );
        let figures = (
            any::<[u64; 4]>(),
            proptest::option::of(any::<u64>()),
            any::<u64>(),
            proptest::option::of(any::<u64>()),
            any::<u32>(),
        );
        let tail = (
            proptest::option::of(text()),
            proptest::collection::vec(attempt(), 0..3),
            proptest::option::of("[0-9a-f]{32}"),
        );
        (names, outcome, figures, tail).prop_map(|(n, o, f, t)| {
            let (request_id, started_at_ms, tenant, key_id, alias, fallback, upstream, model) = n;
            let (stream, status, error_code, incomplete, degraded, estimated) = o;
            let ([prompt_tokens, completion_tokens, cached_prompt_tokens, cache_write_tokens], cost, latency, ttft, n) =
                f;
            let (retry_of, attempt_list, trace_id) = t;
            UsageRecord {
                request_id,
                started_at_ms,
                tenant,
                key_id,
                alias,
                fallback,
                upstream,
                model,
                stream,
                status,
                error_code,
                incomplete,
                degraded,
                estimated,
                prompt_tokens,
                completion_tokens,
                cached_prompt_tokens,
                cache_write_tokens,
                cost_micro_usd: cost,
                latency_ms: latency,
                ttft_ms: ttft,
                attempts: n,
                retry_of,
                attempt_list,
                trace_id,
            }
        })
    }

    proptest! {
        /// The same bytes as the `Serialize` derive (so the same fields, names, order and
        /// escapes), and they read back as the record.
        #[test]
        fn writes_what_serde_writes(rec in record()) {
            let mut out = Vec::new();
            write(&mut out, &rec);
            prop_assert_eq!(String::from_utf8(out.clone()).unwrap(), serde_json::to_string(&rec).unwrap());
            prop_assert_eq!(serde_json::from_slice::<UsageRecord>(&out).unwrap(), rec);
        }
    }

    #[test]
    fn a_record_with_every_field_set_names_every_field() {
        // A field added to the record and not to `write` fails here even when proptest's
        // records leave it at its default.
        let rec = UsageRecord {
            attempt_list: vec![AttemptRecord { provider: "openai".into(), ttft_ms: Some(1), ..Default::default() }],
            trace_id: Some("0af7651916cd43dd8448eb211c80319c".into()),
            ..Default::default()
        };
        let mut out = Vec::new();
        write(&mut out, &rec);
        let ours: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(ours, serde_json::to_value(&rec).unwrap());
    }
}
