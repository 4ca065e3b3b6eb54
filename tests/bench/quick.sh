#!/usr/bin/env bash
# Quick side-by-side benchmark on loopback: direct to a mock upstream, through an nginx reverse
# proxy, and through ax, in one run, reported as added latency and throughput ratios.
#
#   bash tests/bench/quick.sh [seconds-per-run]      (default 8; needs nginx and wrk: apt-get install nginx wrk)
#
# The mock upstream is nginx answering fixed OpenAI and Anthropic JSON bodies (`return 200`), so
# the upstream itself costs next to nothing. Every process listens on 127.0.0.1 only; each run is
# bounded by wrk's -d; everything started here is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${1:-8}
for tool in nginx wrk; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y nginx wrk" >&2; exit 2; }
done

cargo build --release --locked -p ax-dataplane --bin ax-dataplane >/dev/null 2>&1
AX=target/release/ax-dataplane
WORK=$(mktemp -d /tmp/ax-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$WORK/mock.pid" ] && kill "$(cat "$WORK/mock.pid")" 2>/dev/null || true
  [ -f "$WORK/proxy.pid" ] && kill "$(cat "$WORK/proxy.pid")" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
MOCK=$(free_port); PROXY=$(free_port); DEAD=$(free_port)   # nothing listens on DEAD

OPENAI_BODY='{"id":"chatcmpl-1","object":"chat.completion","created":1730000000,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":9,"completion_tokens":9,"total_tokens":18,"prompt_tokens_details":{"cached_tokens":0}}}'
ANTHROPIC_BODY='{"id":"msg_01","type":"message","role":"assistant","model":"claude-real","content":[{"type":"text","text":"Hello! How can I help you today?"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":9,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}'

cat > "$WORK/mock.conf" <<EOF
worker_processes 1;
pid $WORK/mock.pid;
error_log $WORK/mock.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$MOCK;
    location = /v1/chat/completions { default_type application/json; return 200 '$OPENAI_BODY'; }
    location = /v1/messages { default_type application/json; return 200 '$ANTHROPIC_BODY'; }
  }
}
EOF
cat > "$WORK/proxy.conf" <<EOF
worker_processes 1;
pid $WORK/proxy.pid;
error_log $WORK/proxy.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  upstream mock { server 127.0.0.1:$MOCK; keepalive 128; }
  server {
    listen 127.0.0.1:$PROXY;
    location / { proxy_pass http://mock; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
EOF
nginx -p "$WORK" -c "$WORK/mock.conf"
nginx -p "$WORK" -c "$WORK/proxy.conf"

KEY=ax-bench-key
DIGEST=$(printf '%s' "$KEY" | sha256sum | cut -d' ' -f1)
cat > "$WORK/ax.yaml" <<EOF
upstreams:
  - name: openai-mock
    provider: openai
    base_url: http://127.0.0.1:$MOCK/v1
    api_key: sk-bench
    models: [{ name: gpt-4o-mini, context_window: 128000, capabilities: [chat, streaming] }]
  - name: anthropic-mock
    provider: anthropic
    base_url: http://127.0.0.1:$MOCK
    api_key: sk-ant-bench
    models: [{ name: claude-real, context_window: 200000, capabilities: [chat, streaming] }]
  - name: dead   # connection refused; breaker effectively off so every request fails over
    provider: openai
    base_url: http://127.0.0.1:$DEAD/v1
    breaker: { failures: 1000000000, min_requests: 1000000000 }
    models: [{ name: gpt-4o-mini, context_window: 128000, capabilities: [chat, streaming] }]
routes:
  - alias: chat
    candidates: [{ upstream: openai-mock, model: gpt-4o-mini }]
  - alias: failover
    strategy: priority
    candidates:
      - { upstream: dead, model: gpt-4o-mini, priority: 0 }
      - { upstream: openai-mock, model: gpt-4o-mini, priority: 1 }
  - alias: claude
    candidates: [{ upstream: anthropic-mock, model: claude-real }]
tenants:
  - id: bench
    keys: [{ id: bench-1, sha256: "$DIGEST" }]
EOF
AX_LOG=warn "$AX" --config "$WORK/ax.yaml" --listen 127.0.0.1:0 --addr-file "$WORK/ax.addr" 2>"$WORK/ax.log" &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$WORK/ax.addr" ] && break; sleep 0.05; done
AXADDR=$(cat "$WORK/ax.addr")

lua() { # $1 = model alias
  cat > "$WORK/$1.lua" <<EOF
wrk.method = "POST"
wrk.body = '{"model":"$1","messages":[{"role":"user","content":"Hello, how are you?"}]}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $KEY"
EOF
  echo "$WORK/$1.lua"
}
CHAT=$(lua chat); CLAUDE=$(lua claude); FAILOVER=$(lua failover)

# Prints "p50_us p99_us rps" for one wrk run.
run() { # $1 = url, $2 = lua, $3 = connections, $4 = threads
  wrk -t"$4" -c"$3" -d1s -s "$2" "$1" >/dev/null 2>&1 || true   # warm-up: pools and caches
  wrk -t"$4" -c"$3" -d"${DUR}s" --latency -s "$2" "$1" | awk '
    function us(v) { if (v ~ /us$/) return v+0; if (v ~ /ms$/) return (v+0)*1000; if (v ~ /s$/) return (v+0)*1000000; return v+0 }
    /^ +50%/ { p50 = us($2) } /^ +99%/ { p99 = us($2) } /^Requests\/sec/ { rps = $2 }
    /Non-2xx/ { bad = $NF }
    END { if (bad) { print "ERROR non-2xx responses: " bad > "/dev/stderr"; exit 1 } printf "%.0f %.0f %.0f\n", p50, p99, rps }'
}

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "runs of ${DUR}s; wrk, nginx and ax share this machine's $(nproc) cores"
read -r d50 d99 _ < <(run "http://127.0.0.1:$MOCK/v1/chat/completions" "$CHAT" 1 1)
read -r a50 a99 _ < <(run "http://$AXADDR/v1/chat/completions" "$CHAT" 1 1)
read -r n50 n99 _ < <(run "http://127.0.0.1:$PROXY/v1/chat/completions" "$CHAT" 1 1)
read -r dc50 dc99 _ < <(run "http://127.0.0.1:$MOCK/v1/messages" "$CLAUDE" 1 1)
read -r ac50 ac99 _ < <(run "http://$AXADDR/v1/chat/completions" "$CLAUDE" 1 1)
read -r f50 f99 _ < <(run "http://$AXADDR/v1/chat/completions" "$FAILOVER" 1 1)
read -r _ _ drps < <(run "http://127.0.0.1:$MOCK/v1/chat/completions" "$CHAT" 64 2)
read -r _ _ nrps < <(run "http://127.0.0.1:$PROXY/v1/chat/completions" "$CHAT" 64 2)
read -r _ _ arps < <(run "http://$AXADDR/v1/chat/completions" "$CHAT" 64 2)
RSS=$(awk '/VmRSS/ {print $2}' /proc/"${PIDS[0]}"/status)

cat <<EOF

| measure (concurrency 1)                    | p50 µs | p99 µs |
|--------------------------------------------|-------:|-------:|
| direct to mock (OpenAI body)               | $d50 | $d99 |
| through nginx reverse proxy                | $n50 | $n99 |
| through ax, OpenAI upstream                | $a50 | $a99 |
| **ax added, OpenAI upstream**              | $((a50 - d50)) | $((a99 - d99)) |
| nginx added                                | $((n50 - d50)) | $((n99 - d99)) |
| direct to mock (Anthropic body)            | $dc50 | $dc99 |
| through ax, Anthropic upstream (translated)| $ac50 | $ac99 |
| **ax added, Anthropic translation**        | $((ac50 - dc50)) | $((ac99 - dc99)) |
| through ax, failing over from a refused primary | $f50 | $f99 |
| **failover added (refused attempt included)** | $((f50 - a50)) | $((f99 - a99)) |

| throughput (concurrency 64)  | req/s | ratio to nginx |
|------------------------------|------:|---------------:|
| direct to mock               | $drps | – |
| nginx reverse proxy          | $nrps | 1.00 |
| ax                           | $arps | $(awk -v a="$arps" -v n="$nrps" 'BEGIN { printf "%.2f", a/n }') |

ax RSS after the runs: $((RSS / 1024)) MiB
EOF
