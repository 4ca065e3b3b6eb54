use super::*;

fn resolve(spec: Option<&str>, vars: &[(&str, &str)]) -> Result<Option<Settings>, String> {
    let spec: Option<ax_protocol::config::TracingSpec> = spec.map(|s| serde_norway::from_str(s).unwrap());
    let env = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned());
    Settings::resolve(spec.as_ref(), &env)
}

#[test]
fn tracing_is_off_unless_asked_for_and_disabled_wins() {
    assert!(resolve(None, &[]).unwrap().is_none());
    assert!(resolve(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]).unwrap().is_some());
    assert!(resolve(Some("{}"), &[("OTEL_SDK_DISABLED", "TRUE")]).unwrap().is_none());
    let on = resolve(Some("{}"), &[]).unwrap().unwrap();
    assert_eq!(on.endpoint, "http://localhost:4318/v1/traces");
    assert_eq!((on.timeout, on.queue, on.service_name.as_str()), (Duration::from_secs(10), 4096, "ax-dataplane"));
}

#[test]
fn endpoints_follow_the_specification() {
    let endpoint = |spec, vars: &[(&str, &str)]| resolve(spec, vars).unwrap().unwrap().endpoint;
    // The general variable names the collector; the traces one is the whole URL.
    assert_eq!(endpoint(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318/")]), "https://c:4318/v1/traces");
    assert_eq!(
        endpoint(
            None,
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a"), ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b/custom")]
        ),
        "http://b/custom"
    );
    // ax's key wins over both.
    assert_eq!(
        endpoint(Some("{ endpoint: 'http://x:1' }"), &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b")]),
        "http://x:1/v1/traces"
    );
    assert!(resolve(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")]).unwrap_err().contains("http://"));
}

#[test]
fn headers_timeout_protocol_and_sampler_are_read_or_refused() {
    let s = resolve(
        Some("{}"),
        &[
            ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20abc , x-scope=ops"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            ("OTEL_SERVICE_NAME", "gw"),
        ],
    )
    .unwrap()
    .unwrap();
    let h: Vec<(&str, &str)> = s.headers.iter().map(|(n, v)| (n.as_str(), v.to_str().unwrap())).collect();
    assert_eq!(h, [("authorization", "Bearer abc"), ("x-scope", "ops")]);
    assert_eq!(s.timeout, Duration::from_millis(2500));
    assert_eq!(s.sampler, Sampler { ratio: 0.25, parent_based: false });
    assert_eq!(s.service_name, "gw");
    for (var, value, says) in [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon", "milliseconds"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "novalue", "key=value"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "bad name=1", "header name"),
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem", "/nonexistent/ca.pem"),
        ("OTEL_TRACES_SAMPLER", "jaeger_remote", "not a sampler"),
    ] {
        let e = resolve(Some("{}"), &[(var, value)]).err().unwrap_or_else(|| panic!("{var}={value} accepted"));
        assert!(e.contains(says) && e.contains(var), "{var}={value}: {e}");
    }
    // A credential in a header is never echoed in an error.
    let e = resolve(Some("{}"), &[("OTEL_EXPORTER_OTLP_HEADERS", "authorization=sec%0Aret")]).unwrap_err();
    assert!(!e.contains("sec"), "{e}");
}

/// The constants a serving thread keeps per (operation, alias, upstream, model) write the
/// same attributes as a span written whole, for the request and each attempt (the one
/// at another upstream too).
#[test]
fn spans_from_constants_carry_the_same_attributes() {
    let ctx = TraceContext { trace_id: 7, parent: Some(3), span: 9, sampled: true };
    let attempt = |n: u32, upstream: &str, model: &str, error: Option<&str>| ax_protocol::usage::AttemptRecord {
        attempt_id: format!("r#{n}"),
        upstream: upstream.into(),
        model: model.into(),
        provider: "openai".into(),
        error_code: error.map(str::to_owned),
        ..Default::default()
    };
    let r = UsageRecord {
        request_id: "r".into(),
        tenant: "acme".into(),
        key_id: "k1".into(),
        alias: "chat".into(),
        upstream: "up".into(),
        model: "m-up".into(),
        status: 200,
        attempts: 3,
        attempt_list: vec![
            attempt(1, "down", "m-down", Some("upstream_timeout")),
            attempt(2, "up", "m-up", Some("upstream_rate_limited")),
            attempt(3, "up", "m-up", None),
        ],
        ..UsageRecord::default()
    };
    let answer = ax_wire::canonical::AnswerFacts {
        id: Some("chatcmpl-1".into()),
        finish_reasons: [ax_wire::canonical::FinishReason::Stop].into(),
    };
    let facts = SpanFacts {
        operation: "chat",
        provider: Some("openai"),
        max_tokens: Some(10),
        temperature: None,
        ttft: None,
        elapsed: Duration::from_millis(5),
        answer: &answer,
        content: None,
    };
    let end = SystemTime::now();
    let constants = Constants::new("chat", "openai", "chat", "up", "m-up");
    let attributes = |r: &UsageRecord, c: Option<&Constants>| {
        let mut b = Vec::new();
        spans(&mut b, &ctx, r, &facts, c, end);
        otlp::span_attributes(&[otlp::request_head(&[], b.len()), b].concat()).unwrap()
    };
    // Served at once (the attempt count and status among the constants) and not.
    let once = UsageRecord { attempts: 1, attempt_list: vec![attempt(1, "up", "m-up", None)], ..r.clone() };
    let (whole, from_constants) = (attributes(&once, None), attributes(&once, Some(&constants)));
    assert_eq!(whole.len(), 2);
    assert_eq!(whole, from_constants);
    let (whole, from_constants) = (attributes(&r, None), attributes(&r, Some(&constants)));
    assert_eq!(whole.len(), 4);
    assert_eq!(whole, from_constants);
    assert!(whole[0].len() > 12, "{}", whole[0].len());
}

#[test]
fn a_request_with_two_attempts_is_three_spans() {
    let ctx = TraceContext { trace_id: 7, parent: None, span: 9, sampled: true };
    let r = UsageRecord {
        request_id: "r".into(),
        alias: "chat".into(),
        status: 200,
        attempts: 2,
        attempt_list: vec![
            ax_protocol::usage::AttemptRecord {
                attempt_id: "r#1".into(),
                error_code: Some("upstream_timeout".into()),
                ..Default::default()
            },
            ax_protocol::usage::AttemptRecord { attempt_id: "r#2".into(), ..Default::default() },
        ],
        ..UsageRecord::default()
    };
    let facts = SpanFacts {
        operation: "chat",
        provider: None,
        max_tokens: None,
        temperature: None,
        ttft: None,
        elapsed: Duration::from_millis(5),
        answer: &Default::default(),
        content: None,
    };
    let mut b = Vec::new();
    spans(&mut b, &ctx, &r, &facts, None, SystemTime::now());
    let body = [otlp::request_head(&[], b.len()), b].concat();
    // Three `spans` entries of one ScopeSpans: each a field 2.
    assert_eq!(otlp::count_spans(&body), Some(3));
}
