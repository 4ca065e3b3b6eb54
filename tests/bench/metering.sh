#!/usr/bin/env bash
# What metering costs a request: the same data plane with and without the durable usage spool,
# alternating, at concurrency 1. Loopback only; about 10 s per run.
#   tests/bench/metering.sh [ROUNDS]        (needs wrk; builds the release binary)
set -euo pipefail
ROUNDS=${1:-3}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$(mktemp -d /tmp/ax-metering-bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
cargo build --release -p ax-dataplane --manifest-path "$ROOT/Cargo.toml" >/dev/null
BIN="$ROOT/target/release/ax-dataplane"
cat > "$W/plain.yaml" <<YAML
server: { listen: 127.0.0.1:18090, params: strict }
upstreams:
  - name: m
    provider: mock
    mock: { latency_ms: 0, ttft_ms: 0, tokens_per_second: 0, reply_tokens: 8 }
    models:
      - { name: mm, context_window: 32000, capabilities: [chat, streaming], price_per_mtok: { input: 0.10, output: 0.40 } }
routes:
  - alias: a
    candidates: [ { upstream: m, model: mm } ]
tenants:
  - id: t
    keys: [ { id: k1, sha256: "50f5d776511f2babed8acd50a43609bab694d547405334abcc96eeddd8a471cb" } ]
    allowed_aliases: ["*"]
YAML
sed 's/18090/18091/' "$W/plain.yaml" > "$W/spooled.yaml"
printf 'metering: { spool_dir: %s/spool, jsonl: %s/usage.jsonl }\n' "$W" "$W" >> "$W/spooled.yaml"
cat > "$W/body.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"model":"a","messages":[{"role":"user","content":"hi"}]}'
wrk.headers["content-type"] = "application/json"
wrk.headers["authorization"] = "Bearer ax-quickstart-key"
LUA
run() { # CONFIG PORT LABEL
  rm -rf "$W/spool" "$W/usage.jsonl"
  AX_LOG=warn "$BIN" --config "$1" >"$W/ax.log" 2>&1 &
  local pid=$!
  for _ in $(seq 50); do curl -s -o /dev/null "127.0.0.1:$2/healthz" && break; sleep 0.1; done
  wrk -t1 -c1 -d2s -s "$W/body.lua" "http://127.0.0.1:$2/v1/chat/completions" >/dev/null
  local out; out=$(wrk -t1 -c1 -d6s --latency -s "$W/body.lua" "http://127.0.0.1:$2/v1/chat/completions")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  echo "$3 p50=$(awk '/ 50%/{print $2}' <<<"$out") p99=$(awk '/ 99%/{print $2}' <<<"$out") rps=$(awk '/Requests\/sec/{print $2}' <<<"$out")"
}
for _ in $(seq "$ROUNDS"); do
  run "$W/plain.yaml" 18090 "no-metering"
  run "$W/spooled.yaml" 18091 "metering   "
done
