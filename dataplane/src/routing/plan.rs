//! Routing: from a logical alias to the ordered attempt plan of one request.
//!
//! The plan is computed once per request. Candidates that cannot serve the request are dropped
//! first (capability matrix, context window, and in strict mode the parameters their provider
//! cannot honour); the rest are ordered by the route's strategy. Every candidate appears at most
//! once. Failover walks this plan; nothing here does I/O.

use ax_protocol::config::{Capability, ParamsMode, Strategy};
use rand::Rng;

use crate::config::snapshot::{Candidate, Route, Snapshot};
use crate::error::AxError;
use ax_wire::canonical::{estimate_tokens, IMAGE_TOKENS, MESSAGE_TOKENS};
use ax_wire::canonical::{ChatRequest, Content, ContentPart, EmbeddingsRequest, RawChat};
use ax_wire::upstream as providers;

/// What the request needs from a candidate.
#[derive(Debug, Clone, Default)]
pub struct Needs {
    pub caps: Vec<Capability>,
    /// Estimated prompt tokens plus the requested output cap.
    pub window_tokens: u64,
    pub prompt_estimate: u64,
    /// Parameters set on the request, checked against each provider in strict mode.
    pub params: Vec<&'static str>,
    /// Fields ax does not know, checked against each upstream's passthrough in strict mode.
    pub extra: Vec<String>,
    /// Tokens reserved against TPM limits: the prompt estimate plus the output cap (or the
    /// server default), settled to the actual usage afterwards.
    pub reserve_tokens: u64,
}

/// Estimates a chat prompt's tokens, erring high (see `canonical::estimate_tokens`).
pub fn estimate_prompt(req: &ChatRequest) -> u64 {
    let mut bytes = 0usize;
    let mut extra = 0u64;
    for m in &req.messages {
        extra += MESSAGE_TOKENS;
        match &m.content {
            Some(Content::Text(t)) => bytes += t.len(),
            Some(Content::Parts(parts)) => {
                for p in parts {
                    match p {
                        ContentPart::Text { text } => bytes += text.len(),
                        ContentPart::ImageUrl { .. } => extra += IMAGE_TOKENS,
                    }
                }
            }
            None => {}
        }
        for tc in m.tool_calls.iter().flatten() {
            bytes += tc.function.name.len() + tc.function.arguments.len();
        }
    }
    for t in req.tools.iter().flatten() {
        bytes += t.function.name.len() + t.function.description.as_ref().map_or(0, String::len);
        bytes += t.function.parameters.as_ref().map_or(0, json_len);
    }
    estimate_tokens(bytes) + extra
}

/// Approximate serialized length of a JSON value, without serializing it.
fn json_len(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    match v {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(a) => 2 + a.iter().map(|x| json_len(x) + 1).sum::<usize>(),
        Value::Object(o) => 2 + o.iter().map(|(k, x)| k.len() + 4 + json_len(x)).sum::<usize>(),
    }
}

pub fn chat_needs(req: &ChatRequest, default_max_tokens: u32) -> Needs {
    let mut caps = vec![Capability::Chat];
    if req.stream {
        caps.push(Capability::Streaming);
    }
    if req.has_tools() {
        caps.push(Capability::Tools);
    }
    if req.has_images() {
        caps.push(Capability::Vision);
    }
    if req.wants_json() {
        caps.push(Capability::Json);
    }
    let prompt_estimate = estimate_prompt(req);
    Needs {
        caps,
        window_tokens: prompt_estimate + u64::from(req.max_output().unwrap_or(0)),
        prompt_estimate,
        params: req.set_params().collect(),
        extra: req.extra.iter().map(|(n, _)| n.clone()).collect(),
        reserve_tokens: prompt_estimate + u64::from(req.max_output().unwrap_or(default_max_tokens)),
    }
}

/// The needs of a request kept as the caller's bytes, from what the codec's skim read.
/// Parameters are not listed: every candidate speaks the caller's protocol, so takes them all.
pub fn forward_needs(req: &RawChat, default_max_tokens: u32) -> Needs {
    let mut caps = vec![Capability::Chat];
    for (need, cap) in [
        (req.stream, Capability::Streaming),
        (req.needs_tools, Capability::Tools),
        (req.needs_vision, Capability::Vision),
        (req.needs_json, Capability::Json),
    ] {
        if need {
            caps.push(cap);
        }
    }
    Needs {
        caps,
        window_tokens: req.prompt_estimate + u64::from(req.max_output.unwrap_or(0)),
        prompt_estimate: req.prompt_estimate,
        params: Vec::new(),
        extra: Vec::new(),
        reserve_tokens: req.prompt_estimate + u64::from(req.max_output.unwrap_or(default_max_tokens)),
    }
}

pub fn embeddings_needs(req: &EmbeddingsRequest) -> Needs {
    let prompt_estimate = estimate_tokens(req.input.byte_len());
    Needs {
        caps: vec![Capability::Embeddings],
        window_tokens: 0,
        prompt_estimate,
        params: Vec::new(),
        extra: Vec::new(),
        reserve_tokens: prompt_estimate,
    }
}

/// Computes the ordered attempt plan, or the error that says why no candidate fits.
pub fn plan(snap: &Snapshot, route: &Route, needs: &Needs, rng: &mut impl Rng) -> Result<Vec<Candidate>, AxError> {
    let mut eligible = Vec::with_capacity(route.candidates.len());
    let mut missing_cap = None;
    let mut too_long = false;
    let mut largest_window = 0;
    let mut unsupported: Option<(String, &'static str)> = None;
    for c in route.candidates.iter().filter(|c| c.weight > 0) {
        let (up, model) = snap.upstream_model(c);
        if let Some(cap) = needs.caps.iter().find(|cap| !model.caps.has(**cap)) {
            missing_cap.get_or_insert(*cap);
            continue;
        }
        if needs.window_tokens > u64::from(model.context_window) {
            too_long = true;
            largest_window = largest_window.max(model.context_window);
            continue;
        }
        if snap.params == ParamsMode::Strict {
            if let Some(p) = needs.params.iter().find(|p| !providers::supports(up.kind, p)) {
                unsupported.get_or_insert_with(|| ((*p).to_owned(), up.kind.as_str()));
                continue;
            }
            if let Some(n) = needs.extra.iter().find(|n| !up.passthrough.allows(n)) {
                unsupported.get_or_insert_with(|| (n.clone(), up.kind.as_str()));
                continue;
            }
        }
        eligible.push(*c);
    }
    if eligible.is_empty() {
        return Err(if let Some((param, provider)) = unsupported {
            AxError::UnsupportedParameter { param, provider }
        } else if too_long {
            AxError::ContextLengthExceeded {
                alias: route.alias.clone(),
                estimated: needs.prompt_estimate,
                needed: needs.window_tokens,
                window: largest_window,
            }
        } else {
            let reason = match missing_cap {
                Some(cap) => format!("no candidate has the capability '{}'", cap.as_str()),
                None => "every candidate is disabled".to_owned(),
            };
            AxError::NoCapableUpstream { alias: route.alias.clone(), reason }
        });
    }
    let by_weight = |c: &Candidate| f64::from(c.weight);
    match route.strategy {
        Strategy::Weighted => Ok(weighted_order(eligible, by_weight, rng)),
        Strategy::Priority => {
            eligible.sort_by_key(|c| c.priority);
            Ok(tiers(eligible, |a, b| a.priority == b.priority, by_weight, rng))
        }
        Strategy::Latency => {
            if rng.random_bool(EXPLORATION) {
                // Exploration: a uniformly random order, so a recovered or new upstream gets
                // traffic and a fresh measurement.
                return Ok(weighted_order(eligible, |_| 1.0, rng));
            }
            // Weight ∝ configured weight / EWMA²: smooth in the measurements, so two upstreams
            // with similar latency share traffic instead of flapping. An upstream without a
            // measurement counts as fast as the best known one.
            let ewma = |c: &Candidate| snap.upstream_model(c).1.health.ewma().map(|d| d.as_secs_f64().max(1e-4));
            let best = eligible.iter().filter_map(ewma).fold(f64::INFINITY, f64::min);
            let best = if best.is_finite() { best } else { 1.0 };
            Ok(weighted_order(eligible, |c| f64::from(c.weight) / ewma(c).unwrap_or(best).powi(2), rng))
        }
        Strategy::Cost => {
            // Cheapest first by this request's estimated price; unpriced models last; weighted
            // among equal prices.
            let output = needs.window_tokens.saturating_sub(needs.prompt_estimate).max(DEFAULT_OUTPUT_ESTIMATE);
            let price = |c: &Candidate| {
                snap.upstream_model(c).1.prices.map_or(u128::MAX, |p| p.estimate(needs.prompt_estimate, output))
            };
            eligible.sort_by_key(price);
            Ok(tiers(eligible, |a, b| price(a) == price(b), by_weight, rng))
        }
    }
}

/// Share of `latency` plans that explore in random order.
const EXPLORATION: f64 = 0.05;
/// Output tokens assumed for pricing when the request sets no `max_tokens`.
const DEFAULT_OUTPUT_ESTIMATE: u64 = 500;

/// Weighted order within each run of equal candidates (`same`), runs kept in order.
fn tiers(
    sorted: Vec<Candidate>,
    same: impl Fn(&Candidate, &Candidate) -> bool,
    weight: impl Fn(&Candidate) -> f64 + Copy,
    rng: &mut impl Rng,
) -> Vec<Candidate> {
    let mut out = Vec::with_capacity(sorted.len());
    for tier in sorted.chunk_by(same) {
        out.extend(weighted_order(tier.to_vec(), weight, rng));
    }
    out
}

/// Weighted random order without replacement: each position is drawn among the remaining
/// candidates with probability proportional to weight.
fn weighted_order(mut rest: Vec<Candidate>, weight: impl Fn(&Candidate) -> f64, rng: &mut impl Rng) -> Vec<Candidate> {
    let mut out = Vec::with_capacity(rest.len());
    while !rest.is_empty() {
        let total: f64 = rest.iter().map(&weight).sum();
        let mut pick = rng.random::<f64>() * total;
        let mut idx = rest.len() - 1;
        for (i, c) in rest.iter().enumerate() {
            let w = weight(c);
            if pick < w {
                idx = i;
                break;
            }
            pick -= w;
        }
        out.push(rest.swap_remove(idx));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn snapshot(yaml: &str) -> Snapshot {
        let spec = serde_norway::from_str(yaml).unwrap();
        crate::config::snapshot::build(&spec, 1, &|_| None, None).unwrap()
    }

    const TWO: &str = r#"
upstreams:
  - name: a
    provider: mock
    models: [{ name: m, context_window: 1000, capabilities: [chat, tools] }]
  - name: b
    provider: anthropic
    base_url: http://127.0.0.1:1
    models: [{ name: m, context_window: 100000, capabilities: [chat] }]
routes:
  - alias: r
    strategy: STRATEGY
    candidates:
      - { upstream: a, model: m, weight: 80, priority: 1 }
      - { upstream: b, model: m, weight: 20, priority: 0 }
"#;

    #[test]
    fn weighted_80_20_over_10000_plans() {
        let snap = snapshot(&TWO.replace("STRATEGY", "weighted"));
        let route = &snap.routes["r"];
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let needs = Needs { caps: vec![Capability::Chat], ..Needs::default() };
        let mut first_a = 0;
        for _ in 0..10_000 {
            let p = plan(&snap, route, &needs, &mut rng).unwrap();
            assert_eq!(p.len(), 2, "every candidate appears exactly once");
            assert_ne!(p[0].upstream, p[1].upstream);
            if p[0].upstream == 0 {
                first_a += 1;
            }
        }
        let share = f64::from(first_a) / 10_000.0;
        assert!((0.78..=0.82).contains(&share), "share of a = {share}");
    }

    const THREE: &str = r#"
upstreams:
  - { name: a, provider: mock, models: [{ name: m, context_window: 10000, capabilities: [chat], price_per_mtok: { input: 3.0, output: 15.0 } }] }
  - { name: b, provider: mock, models: [{ name: m, context_window: 10000, capabilities: [chat], price_per_mtok: { input: 0.15, output: 0.6 } }] }
  - { name: c, provider: mock, models: [{ name: m, context_window: 10000, capabilities: [chat] }] }
routes:
  - alias: r
    strategy: STRATEGY
    candidates: [{ upstream: a, model: m }, { upstream: b, model: m }, { upstream: c, model: m }]
"#;

    #[test]
    fn cost_orders_cheapest_first_and_unpriced_last() {
        let snap = snapshot(&THREE.replace("STRATEGY", "cost"));
        let needs =
            Needs { caps: vec![Capability::Chat], prompt_estimate: 1000, window_tokens: 1200, ..Needs::default() };
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for _ in 0..50 {
            let p = plan(&snap, &snap.routes["r"], &needs, &mut rng).unwrap();
            let order: Vec<usize> = p.iter().map(|c| c.upstream).collect();
            assert_eq!(order, vec![1, 0, 2]);
        }
    }

    fn first_share(snap: &Snapshot, n: u32) -> f64 {
        let needs = Needs { caps: vec![Capability::Chat], ..Needs::default() };
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let firsts =
            (0..n).filter(|_| plan(snap, &snap.routes["r"], &needs, &mut rng).unwrap()[0].upstream == 0).count();
        firsts as f64 / f64::from(n)
    }

    #[test]
    fn latency_favours_the_faster_smoothly_and_explores() {
        use crate::error::Outcome;
        use std::time::Duration;
        let yaml = THREE.replace("STRATEGY", "latency").replace(", { upstream: c, model: m }", "");
        let snap = snapshot(&yaml);
        let ttft = |i: usize, ms: u64| {
            let h = &snap.upstreams[i].models[0].health;
            for _ in 0..20 {
                h.record(Outcome::Success, Duration::from_millis(ms * 2), Some(Duration::from_millis(ms)));
            }
        };
        // Equal speed: an even split, no flapping to one side.
        ttft(0, 100);
        ttft(1, 100);
        let even = first_share(&snap, 10_000);
        assert!((0.47..=0.53).contains(&even), "even share {even}");
        // `a` twice as slow: weight 1/4 of `b`'s → 0.95 × 0.2 + 0.05 × 0.5 ≈ 0.215 of first places.
        ttft(0, 200);
        ttft(0, 200);
        ttft(0, 200);
        let slow = first_share(&snap, 10_000);
        assert!((0.17..=0.27).contains(&slow), "slow share {slow}");
        // Much slower: exploration still sends it about 2.5% of first places.
        ttft(0, 100_000);
        ttft(0, 100_000);
        let explored = first_share(&snap, 20_000);
        assert!((0.015..=0.04).contains(&explored), "explored share {explored}");
    }

    #[test]
    fn priority_tiers_come_first() {
        let snap = snapshot(&TWO.replace("STRATEGY", "priority"));
        let needs = Needs { caps: vec![Capability::Chat], ..Needs::default() };
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for _ in 0..100 {
            let p = plan(&snap, &snap.routes["r"], &needs, &mut rng).unwrap();
            assert_eq!(p[0].upstream, 1);
        }
    }

    #[test]
    fn capability_window_and_param_filters() {
        let snap = snapshot(&TWO.replace("STRATEGY", "weighted"));
        let route = &snap.routes["r"];
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        // Tools: only `a` has them.
        let tools = Needs { caps: vec![Capability::Chat, Capability::Tools], ..Needs::default() };
        assert_eq!(plan(&snap, route, &tools, &mut rng).unwrap().len(), 1);
        // Window: only `b` holds 5,000 tokens.
        let long = Needs { caps: vec![Capability::Chat], window_tokens: 5_000, ..Needs::default() };
        let p = plan(&snap, route, &long, &mut rng).unwrap();
        assert_eq!((p.len(), p[0].upstream), (1, 1));
        // Strict: `seed` is unsupported by anthropic; with a long prompt nothing is left.
        let seed =
            Needs { caps: vec![Capability::Chat], window_tokens: 5_000, params: vec!["seed"], ..Needs::default() };
        let e = plan(&snap, route, &seed, &mut rng).unwrap_err();
        assert_eq!(e.code(), "unsupported_parameter");
        assert_eq!(e.param(), Some("seed"));
        let vision = Needs { caps: vec![Capability::Chat, Capability::Vision], ..Needs::default() };
        assert_eq!(plan(&snap, route, &vision, &mut rng).unwrap_err().code(), "no_capable_upstream");
        let huge = Needs { caps: vec![Capability::Chat], window_tokens: 1_000_000, ..Needs::default() };
        let e = plan(&snap, route, &huge, &mut rng).unwrap_err();
        assert_eq!(e.code(), "context_length_exceeded");
        // The message names what was needed and the largest window there is.
        let largest = route.candidates.iter().map(|c| snap.upstream_model(c).1.context_window).max().unwrap();
        assert!(e.to_string().contains("need about 1000000 tokens"), "{e}");
        assert!(e.to_string().contains(&format!("the largest is {largest}")), "{e}");
    }

    /// What an OpenAI body's skim gives the stages agrees with its decode: the capabilities, flags and output cap
    /// exactly, the prompt estimate from above and close.
    #[test]
    fn the_skim_reads_what_the_decode_reads() {
        let v = serde_json::json!({
            "model": "chat", "stream": true, "stream_options": { "include_usage": true }, "max_completion_tokens": 77,
            "response_format": { "type": "json_object" },
            "messages": [
                { "role": "system", "content": "Be terse, \"really\"." },
                { "role": "user", "content": [{ "type": "text", "text": "What is this?" },
                    { "type": "image_url", "image_url": { "url": format!("data:image/png;base64,{}", "A".repeat(30_000)) } }] },
                { "role": "assistant", "content": null, "tool_calls": [{ "id": "c1", "type": "function",
                    "function": { "name": "f", "arguments": "{\"a\":1}" } }] },
                { "role": "tool", "tool_call_id": "c1", "content": "42" } ],
            "tools": [{ "type": "function", "function": { "name": "f", "description": "does f", "parameters": { "type": "object" } } }]
        });
        let body = bytes::Bytes::from(serde_json::to_vec(&v).unwrap());
        let ax_wire::canonical::Skim::Forward(raw) =
            ax_wire::openai::caller::skim_chat(body.clone(), &|_| true).unwrap()
        else {
            panic!("every route forwards here")
        };
        let req = ax_wire::openai::caller::decode_chat(&body, ax_protocol::config::ParamsMode::Strict).unwrap();
        let canon = chat_needs(&req, 4096);
        let fwd = forward_needs(&raw, 4096);
        assert_eq!(fwd.caps, canon.caps);
        assert_eq!((raw.stream, raw.include_usage, raw.max_output), (true, true, Some(77)));
        assert_eq!(raw.model, "chat");
        // The image counts as one image whatever the size of its data; the skim errs high by the
        // JSON around tool calls and tools (it counts them as written), a few dozen tokens.
        let (f, c) = (fwd.prompt_estimate, canon.prompt_estimate);
        assert!(f >= c && f - c <= 64, "skim {f} against decode {c}");
    }
}
