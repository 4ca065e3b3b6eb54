//! Fuzz targets: one function per codec that reads bytes from outside (callers and upstreams;
//! the data plane's `fuzz` has the HTTP client's parser and the configuration). Each takes
//! arbitrary bytes and checks what must hold for any input: no panic, and for the framing
//! decoders, the same result however the bytes are split into reads. They run three ways
//! (commands and figures in `docs/testing.md`):
//! - a short property run of each in CI (the tests below: generated inputs, and mutations of
//!   valid samples, so a run reaches past the first byte of JSON);
//! - a long one: `PROPTEST_CASES=1000000 cargo nextest run -p ax-wire fuzz::`;
//! - coverage-guided with libFuzzer: `fuzz/` holds a `cargo fuzz` target per function here.

use ax_protocol::config::{ParamsMode, ProviderKind};

use crate::adapter::Ctx;
use crate::canonical::EmbeddingsRequest;
use crate::sse::{SseDecoder, SseEvent};
use crate::upstream::{self as providers, StreamDecoder};

/// The providers an input's first byte picks from.
const KINDS: [ProviderKind; 4] =
    [ProviderKind::Openai, ProviderKind::AzureOpenai, ProviderKind::Anthropic, ProviderKind::Gemini];

fn split(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((b, rest)) => (*b, rest),
        None => (0, data),
    }
}

/// Every event of `input` read in pieces of `piece` bytes (0: in one piece), or the error.
fn sse_events(input: &[u8], piece: usize, limit: usize) -> Result<Vec<SseEvent>, crate::sse::SseError> {
    let mut d = SseDecoder::with_limit(limit);
    let mut out = Vec::new();
    let pieces: Vec<&[u8]> = if piece == 0 { vec![input] } else { input.chunks(piece).collect() };
    for p in pieces {
        d.push(p);
        while let Some(ev) = d.next_event()? {
            out.push(ev);
        }
    }
    if let Some(ev) = d.finish()? {
        out.push(ev);
    }
    Ok(out)
}

/// SSE framing (`sse::SseDecoder`): never panics, and reads of any size give the same events
/// (or the same error) as one read.
pub fn sse(data: &[u8]) {
    let (b, input) = split(data);
    let piece = usize::from(b % 16) + 1;
    let limit = 1024;
    let whole = sse_events(input, 0, limit);
    let pieces = sse_events(input, piece, limit);
    match (&whole, &pieces) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "events depend on how the bytes were split"),
        // The size limit may trip at a different read; any other verdict must agree.
        (Err(crate::sse::SseError::TooLarge(_)), _) | (_, Err(crate::sse::SseError::TooLarge(_))) => {}
        (a, b) => assert_eq!(a.is_err(), b.is_err(), "{a:?} / {b:?}"),
    }
}

/// A whole upstream answer and an upstream error body, for the provider the first byte picks.
pub fn upstream_answer(data: &[u8]) {
    let (b, body) = split(data);
    let kind = KINDS[usize::from(b) % KINDS.len()];
    let _ = providers::decode_chat(kind, body);
    let _ = providers::decode_error(kind, 400 + u16::from(b % 200), body, None);
    let req = EmbeddingsRequest {
        model: "m".into(),
        input: crate::canonical::EmbeddingInput::Many(vec!["a".into(), "b".into()]),
        encoding_format: None,
        dimensions: None,
        user: None,
    };
    let _ = providers::decode_embeddings(kind, body, &req);
}

/// An upstream stream (SSE framing, then the provider's event decoder), for the provider the first
/// byte picks: events in, canonical items out, then the end-of-stream verdict.
pub fn upstream_stream(data: &[u8]) {
    let (b, input) = split(data);
    let kind = KINDS[usize::from(b) % KINDS.len()];
    let Some(mut decoder) = StreamDecoder::new(kind) else { return };
    let mut sse = SseDecoder::with_limit(64 * 1024);
    sse.push(input);
    loop {
        match sse.next_event() {
            Ok(Some(ev)) => {
                if decoder.on_event(&ev).is_err() {
                    return;
                }
            }
            Ok(None) => break,
            Err(_) => return,
        }
    }
    if let Ok(Some(ev)) = sse.finish() {
        let _ = decoder.on_event(&ev);
    }
    let _ = decoder.on_eof();
}

/// A caller's chat request: decoded as ingress decodes it (strict and lenient), validated, its
/// needs estimated, and translated for every provider.
pub fn chat_request(data: &[u8]) {
    // The fast path's skim, and the forwarded body it makes: the model replaced, the rest kept.
    if let Ok(crate::canonical::Skim::Forward(raw)) =
        crate::openai::caller::skim_chat(bytes::Bytes::copy_from_slice(data), &|_| true)
    {
        let body: Vec<u8> = raw.body_for("m").concat();
        assert!(
            serde_json::from_slice::<serde_json::Value>(data).is_err()
                || serde_json::from_slice::<serde_json::Value>(&body).is_ok()
        );
    }
    for mode in [ParamsMode::Strict, ParamsMode::Lenient] {
        let Ok(req) = crate::openai::caller::decode_chat(&bytes::Bytes::copy_from_slice(data), mode) else { continue };
        translate(&req);
    }
}

/// A caller's Anthropic Messages request: skimmed (and its forwarded body made), decoded as
/// ingress decodes it, and translated for every provider.
pub fn messages_request(data: &[u8]) {
    use crate::anthropic::caller as anthropic;
    let body = bytes::Bytes::copy_from_slice(data);
    if let Ok(crate::canonical::Skim::Forward(raw)) = anthropic::skim_messages(body.clone(), &|_| true) {
        let _ = raw.body_for("m").concat();
    }
    let _ = anthropic::with_model(body.clone(), "m");
    for mode in [ParamsMode::Strict, ParamsMode::Lenient] {
        let Ok((req, _)) = anthropic::decode_canonical(&body, mode, false) else { continue };
        translate(&req);
    }
}

/// A caller's OpenAI Responses request, decoded and translated for every provider.
pub fn responses_request(data: &[u8]) {
    for mode in [ParamsMode::Strict, ParamsMode::Lenient] {
        let Ok(r) = crate::responses::caller::decode(&bytes::Bytes::copy_from_slice(data), mode) else { continue };
        let Ok(req) = crate::responses::caller::to_canonical(r, &mut Vec::new(), &[]) else { continue };
        translate(&req);
    }
}

/// A decoded request, validated and encoded for every provider.
fn translate(req: &crate::canonical::ChatRequest) {
    if req.validate().is_err() {
        return;
    }
    for kind in KINDS {
        let ctx = Ctx { kind, model: "m", max_tokens: 4096, output_cap: Some(1000), reasoning: true };
        let _ = providers::encode_chat(ctx, req);
    }
}

/// A caller's embeddings request, decoded, estimated and translated for every provider.
pub fn embeddings_request(data: &[u8]) {
    let Ok(req) = crate::openai::caller::decode_embeddings(data, ParamsMode::Strict) else { return };
    for kind in KINDS.into_iter().filter(|k| *k != ProviderKind::Anthropic) {
        let ctx = Ctx { kind, model: "m", max_tokens: 4096, output_cap: None, reasoning: true };
        let _ = providers::encode_embeddings(ctx, &req);
    }
}

/// Valid inputs each target starts its mutations from (the first byte is the target's selector).
pub mod samples {
    pub const SSE: &[&[u8]] = &[
        b"\x03: ping\r\n\r\nevent: a\r\ndata: one\r\ndata:two\r\n\r\ndata: x\n\ndata: y\r\rdata\n\n",
        "\x07data: {\"a\":\"\u{4f60}\u{597d}\u{1f642}\"}\r\n\r\ndata: [DONE]\n\n".as_bytes(),
    ];
    pub const MESSAGES_REQUEST: &[&[u8]] = &[
        br#"{"model":"chat","max_tokens":100,"stream":true,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"thinking":{"type":"enabled","budget_tokens":2048},"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},{"type":"document","source":{"type":"text","media_type":"text/plain","data":"doc"}}]},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"x"},{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"r"},{"type":"tool_reference","tool_name":"g"}],"is_error":true}]}],"tools":[{"name":"f","input_schema":{"type":"object"}},{"name":"g","defer_loading":true,"input_schema":{"type":"object"}}],"tool_choice":{"type":"any"},"stop_sequences":["x"],"metadata":{"user_id":"u"}}"#,
        br#"{"model":"chat","max_tokens":10,"system":"s","output_config":{"effort":"low","format":{"type":"json_schema","schema":{"type":"object"}}},"thinking":{"type":"adaptive","display":"omitted"},"messages":[{"role":"user","content":"hi"},{"role":"system","content":"mid"}]}"#,
    ];
    pub const RESPONSES_REQUEST: &[&[u8]] = &[
        br#"{"model":"chat","instructions":"i","stream":true,"max_output_tokens":100,"reasoning":{"effort":"low","summary":"auto"},"text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"}},"verbosity":"low"},"input":[{"role":"user","content":[{"type":"input_text","text":"hi"},{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo="}]},{"type":"reasoning","id":"rs_1","summary":[]},{"type":"function_call","call_id":"c","name":"f","arguments":"{\"a\":1}"},{"type":"function_call_output","call_id":"c","output":"r"}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":{"type":"function","name":"f"},"store":false,"include":["reasoning.encrypted_content"]}"#,
        br#"{"model":"chat","input":"hi","tools":[{"type":"web_search"}],"tool_choice":"auto","metadata":{"k":"v"}}"#,
    ];
    pub const UPSTREAM_ANSWER: &[&[u8]] = &[
        b"\x00{\"id\":\"c1\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"hi\",\"tool_calls\":[{\"id\":\"t\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"total_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":0}}}",
        b"\x02{\"id\":\"msg\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"},{\"type\":\"tool_use\",\"id\":\"toolu\",\"name\":\"f\",\"input\":{\"a\":1}}],\"stop_reason\":\"tool_use\",\"usage\":{\"input_tokens\":5,\"output_tokens\":3,\"cache_read_input_tokens\":1}}",
        b"\x03{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"hi\"},{\"functionCall\":{\"name\":\"f\",\"args\":{}}}]},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":3,\"candidatesTokenCount\":2},\"embeddings\":[{\"values\":[0.1]}]}",
        b"\x00{\"error\":{\"message\":\"m\",\"type\":\"invalid_request_error\",\"code\":\"context_length_exceeded\"},\"object\":\"list\",\"data\":[{\"embedding\":[0.5],\"index\":0}],\"usage\":{\"prompt_tokens\":1}}",
    ];
    pub const UPSTREAM_STREAM: &[&[u8]] = &[
        b"\x00data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"h\",\"tool_calls\":[{\"index\":0,\"id\":\"t\",\"function\":{\"name\":\"f\",\"arguments\":\"{\"}}]}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n",
        b"\x02event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}}\n\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\ndata: {\"type\":\"message_stop\"}\n\n",
        b"\x03data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"h\"}]},\"index\":0}]}\r\n\r\ndata: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":\"f\",\"args\":{}}}]},\"finishReason\":\"STOP\",\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":2}}\r\n\r\n",
    ];
    pub const CHAT_REQUEST: &[&[u8]] = &[
        b"{\"model\":\"chat\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"max_tokens\":50,\"temperature\":0.5,\"stop\":[\"x\"],\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"},{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,iVBORw0KGgo=\"}}]},{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"r\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}],\"tool_choice\":\"auto\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{\"type\":\"object\"}}}}",
        b"{\"model\":\"chat\",\"n\":2,\"seed\":1,\"user\":\"u\",\"logprobs\":true,\"top_logprobs\":2,\"messages\":[{\"role\":\"developer\",\"content\":\"d\"},{\"role\":\"user\",\"content\":\"hi\",\"name\":\"x\"}]}",
    ];
    pub const EMBEDDINGS_REQUEST: &[&[u8]] = &[
        b"{\"model\":\"embed\",\"input\":[\"a\",\"b\"],\"encoding_format\":\"base64\",\"dimensions\":8}",
        b"{\"model\":\"embed\",\"input\":\"one text\"}",
    ];
}

/// Inputs for the property runs of fuzz targets (here and in the data plane).
#[cfg(any(test, feature = "strategies"))]
pub mod strategies {
    use proptest::prelude::*;

    /// A valid sample with a few byte-level mutations: flips, inserts, removals and a cut.
    pub fn mutated(samples: &'static [&'static [u8]]) -> impl Strategy<Value = Vec<u8>> {
        let ops = proptest::collection::vec((0u8..4, any::<prop::sample::Index>(), any::<u8>()), 0..8);
        (prop::sample::select(samples), ops).prop_map(|(s, ops)| {
            let mut v = s.to_vec();
            for (op, at, byte) in ops {
                let i = at.index(v.len() + 1);
                match op {
                    0 if i < v.len() => v[i] ^= byte | 1,
                    1 => v.insert(i, byte),
                    2 if i < v.len() => {
                        v.remove(i);
                    }
                    3 => v.truncate(i),
                    _ => {}
                }
            }
            v
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::strategies::mutated;
    use super::*;

    /// Junk (any bytes) half the time, a mutated sample the other half.
    fn input(samples: &'static [&'static [u8]]) -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![proptest::collection::vec(any::<u8>(), 0..512), mutated(samples)]
    }

    proptest! {
        #[test]
        fn fuzz_sse(data in input(samples::SSE)) { sse(&data) }

        #[test]
        fn fuzz_upstream_answer(data in input(samples::UPSTREAM_ANSWER)) { upstream_answer(&data) }

        #[test]
        fn fuzz_upstream_stream(data in input(samples::UPSTREAM_STREAM)) { upstream_stream(&data) }

        #[test]
        fn fuzz_chat_request(data in input(samples::CHAT_REQUEST)) { chat_request(&data) }

        #[test]
        fn fuzz_messages_request(data in input(samples::MESSAGES_REQUEST)) { messages_request(&data) }

        #[test]
        fn fuzz_responses_request(data in input(samples::RESPONSES_REQUEST)) { responses_request(&data) }

        #[test]
        fn fuzz_embeddings_request(data in input(samples::EMBEDDINGS_REQUEST)) { embeddings_request(&data) }

    }

    /// Writes the samples as the seed corpus of the libFuzzer targets (`fuzz/corpus/<target>/`):
    /// `cargo test -p ax-wire --lib fuzz::tests::write_seed_corpus -- --ignored` (and the data plane's).
    #[test]
    #[ignore = "a tool: writes files for `cargo fuzz`"]
    fn write_seed_corpus() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
        for (target, list) in [
            ("sse", samples::SSE),
            ("upstream_answer", samples::UPSTREAM_ANSWER),
            ("upstream_stream", samples::UPSTREAM_STREAM),
            ("chat_request", samples::CHAT_REQUEST),
            ("messages_request", samples::MESSAGES_REQUEST),
            ("responses_request", samples::RESPONSES_REQUEST),
            ("embeddings_request", samples::EMBEDDINGS_REQUEST),
        ] {
            let dir = root.join(target);
            std::fs::create_dir_all(&dir).unwrap();
            for (i, s) in list.iter().enumerate() {
                std::fs::write(dir.join(format!("sample-{i}")), s).unwrap();
            }
        }
    }

    /// The samples are valid: a mutation run starts from inputs that reach the deep code.
    #[test]
    fn samples_parse() {
        for s in samples::CHAT_REQUEST {
            assert!(
                crate::openai::caller::decode_chat(&bytes::Bytes::from_static(s), ParamsMode::Strict).is_ok(),
                "{}",
                String::from_utf8_lossy(s)
            );
        }
        for s in samples::MESSAGES_REQUEST {
            let body = bytes::Bytes::from_static(s);
            let (req, _) = crate::anthropic::caller::decode_canonical(&body, ParamsMode::Strict, false).unwrap();
            req.validate().unwrap();
        }
        for s in samples::RESPONSES_REQUEST {
            let r = crate::responses::caller::decode(&bytes::Bytes::from_static(s), ParamsMode::Lenient).unwrap();
            crate::responses::caller::to_canonical(r, &mut Vec::new(), &[]).unwrap().validate().unwrap();
        }
        for s in samples::EMBEDDINGS_REQUEST {
            assert!(crate::openai::caller::decode_embeddings(s, ParamsMode::Strict).is_ok());
        }
        assert!(providers::decode_chat(ProviderKind::Openai, &samples::UPSTREAM_ANSWER[0][1..]).is_ok());
        assert!(providers::decode_chat(ProviderKind::Anthropic, &samples::UPSTREAM_ANSWER[1][1..]).is_ok());
        assert!(providers::decode_chat(ProviderKind::Gemini, &samples::UPSTREAM_ANSWER[2][1..]).is_ok());
    }
}
