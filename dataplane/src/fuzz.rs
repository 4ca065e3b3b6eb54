//! Fuzz targets of the data plane's own parsers: the upstream HTTP client's response parser
//! (`transport`) and the configuration (a YAML file or a control-plane push). The codecs' targets
//! are in `ax_wire::fuzz`. They run as `ax_wire::fuzz`'s do (`docs/testing.md`): a short property
//! run in CI (the tests below), a long one, and `cargo fuzz` targets in `fuzz/`.

/// An upstream's response head and chunked body (`client`'s parser and framing).
pub fn upstream_http(data: &[u8]) {
    crate::transport::fuzz_response(data);
}

/// A configuration: YAML (a file) or JSON (a control-plane push) decoded and compiled.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(spec) = crate::config::parse(text) {
        let _ = crate::config::snapshot::build(&spec, 1, &|_| None, None);
    }
    if let Ok(ax_protocol::snapshot::ToNode::Snapshot { document, .. }) =
        serde_json::from_str::<ax_protocol::snapshot::ToNode>(text)
    {
        let spec = ax_protocol::config::ConfigSpec {
            upstreams: document.upstreams,
            routes: document.routes,
            tenants: document.tenants,
            ..Default::default()
        };
        let _ = crate::config::snapshot::build(&spec, 1, &|_| None, None);
    }
}

/// Valid inputs each target starts its mutations from.
pub mod samples {
    pub const UPSTREAM_HTTP: &[&[u8]] = &[
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\ntrailer: t\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 429 Too Many Requests\r\nretry-after-ms: 250\r\ncontent-length: 2\r\n\r\n{}",
    ];
    pub const CONFIG: &[&[u8]] = &[
        b"server: { params: lenient, max_body_bytes: 65536, budget_timezone: Europe/Berlin }\nupstreams:\n  - name: up\n    provider: mock\n    mock: { reply_tokens: 4 }\n    limits: { rpm: 10 }\n    models: [{ name: m, context_window: 8000, capabilities: [chat, streaming], price_per_mtok: { input: 1, output: 2 } }]\nroutes:\n  - { alias: chat, strategy: priority, fallbacks: [], candidates: [{ upstream: up, model: m, weight: 2 }] }\ntenants:\n  - { id: t, keys: [{ id: k, sha256: \"0000000000000000000000000000000000000000000000000000000000000000\" }], budgets: [{ window: day, usd: 1.5 }] }\n",
        b"{\"type\":\"snapshot\",\"version\":2,\"hash\":\"h\",\"keys\":{},\"document\":{\"upstreams\":[{\"name\":\"u\",\"provider\":\"openai\",\"base_url\":\"http://x\",\"models\":[{\"name\":\"m\",\"context_window\":10,\"capabilities\":[\"chat\"]}]}],\"routes\":[{\"alias\":\"a\",\"candidates\":[{\"upstream\":\"u\",\"model\":\"m\"}]}],\"tenants\":[]}}",
    ];
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Junk (any bytes) half the time, a mutated sample the other half.
    fn input(samples: &'static [&'static [u8]]) -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![proptest::collection::vec(any::<u8>(), 0..512), ax_wire::fuzz::strategies::mutated(samples)]
    }

    proptest! {
        #[test]
        fn fuzz_upstream_http(data in input(samples::UPSTREAM_HTTP)) { upstream_http(&data) }

        #[test]
        fn fuzz_config(data in input(samples::CONFIG)) { config(&data) }
    }

    /// Writes the samples as the seed corpus of the libFuzzer targets (`fuzz/corpus/<target>/`):
    /// `cargo test -p ax-dataplane --lib fuzz::tests::write_seed_corpus -- --ignored`.
    #[test]
    #[ignore = "a tool: writes files for `cargo fuzz`"]
    fn write_seed_corpus() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
        for (target, list) in [("upstream_http", samples::UPSTREAM_HTTP), ("config", samples::CONFIG)] {
            let dir = root.join(target);
            std::fs::create_dir_all(&dir).unwrap();
            for (i, s) in list.iter().enumerate() {
                std::fs::write(dir.join(format!("sample-{i}")), s).unwrap();
            }
        }
    }

    /// The configuration sample is valid: a mutation run starts from inputs that reach the deep code.
    #[test]
    fn samples_parse() {
        let cfg = std::str::from_utf8(samples::CONFIG[0]).unwrap();
        crate::config::snapshot::build(&crate::config::parse(cfg).unwrap(), 1, &|_| None, None).unwrap();
    }
}
