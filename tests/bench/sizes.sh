#!/usr/bin/env bash
# Throughput and CPU per request at real request sizes and ax's default configuration (log level
# info, one usage line per request), beside nginx in the same run, with wrk as the load driver:
#
#   bash tests/bench/sizes.sh [seconds-per-run] [other ax-dataplane binary to compare]
#
# For bodies of ~1 KB, ~50 KB and ~500 KB (1, 60 and 600 messages): wrk -t1 -c64 against nginx as
# a bare keep-alive reverse proxy (access log off), ax without limits, and ax with the tenant's
# rate limits (rpm, tpm, concurrency, set far above the load) and a day budget: the governed path.
# The upstream is nginx answering a fixed OpenAI body. CPU per request is the proxy's
# utime + stime from /proc over the run, divided by the requests wrk counted. Loopback only; every
# run is bounded by wrk's -d; everything started here is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${1:-8}
OTHER=${2:-}
for tool in nginx wrk; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y nginx wrk" >&2; exit 2; }
done
cargo build --release --locked -p ax-dataplane --bin ax-dataplane >/dev/null 2>&1
AX=target/release/ax-dataplane
WORK=$(mktemp -d /tmp/ax-sizes.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for f in mock proxy; do [ -f "$WORK/$f.pid" ] && kill "$(cat "$WORK/$f.pid")" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
MOCK=$(free_port); PROXY=$(free_port)
BODY='{"id":"chatcmpl-1","object":"chat.completion","created":1730000000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":9,"total_tokens":18}}'
cat > "$WORK/mock.conf" <<EOF
worker_processes 1;
pid $WORK/mock.pid;
error_log $WORK/mock.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_buffer_size 1m;
  client_max_body_size 10m;
  server { listen 127.0.0.1:$MOCK backlog=4096;
    location = /v1/chat/completions { default_type application/json; return 200 '$BODY'; } }
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
  client_body_buffer_size 1m;
  client_max_body_size 10m;
  upstream mock { server 127.0.0.1:$MOCK; keepalive 128; }
  server { listen 127.0.0.1:$PROXY backlog=4096;
    location / { proxy_pass http://mock; proxy_http_version 1.1; proxy_set_header Connection ""; } }
}
EOF
nginx -p "$WORK" -c "$WORK/mock.conf"
nginx -p "$WORK" -c "$WORK/proxy.conf"
KEY=ax-bench-key
DIGEST=$(printf '%s' "$KEY" | sha256sum | cut -d' ' -f1)
cat > "$WORK/ax.yaml" <<EOF
upstreams:
  - { name: up, provider: openai, base_url: "http://127.0.0.1:$MOCK/v1", api_key: sk-bench,
      models: [{ name: m, context_window: 1000000, capabilities: [chat], price_per_mtok: { input: 1, output: 2 } }] }
routes:
  - { alias: chat, candidates: [{ upstream: up, model: m }] }
tenants:
  - { id: plain, keys: [{ id: k1, sha256: "$DIGEST" }] }
  - id: governed
    limits: { rpm: 100000000, tpm: 4000000000, concurrency: 100000 }
    budgets: [{ window: day, usd: 1000000000 }]
    keys: [{ id: k2, sha256: "$(printf '%s' "$KEY-gov" | sha256sum | cut -d' ' -f1)" }]
EOF
start_ax() { # $1 = binary; prints the address; the pid goes to $WORK/ax.pid
  rm -f "$WORK/ax.addr"
  "$1" --config "$WORK/ax.yaml" --listen 127.0.0.1:0 --addr-file "$WORK/ax.addr" >/dev/null 2>"$WORK/ax.log" &
  echo $! > "$WORK/ax.pid"
  for _ in $(seq 200); do [ -s "$WORK/ax.addr" ] && break; sleep 0.05; done
  cat "$WORK/ax.addr"
}
script() { # $1 = messages, $2 = key; a wrk script posting a chat request of that many messages
  python3 - "$1" "$2" > "$WORK/post-$1-$2.lua" <<'PY'
import json, sys
n, key = int(sys.argv[1]), sys.argv[2]
text = "The quick brown fox jumps over the lazy dog while the agent reads the repository. " * 10
msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": text} for i in range(n)]
body = json.dumps({"model": "chat", "max_tokens": 100, "messages": msgs})
print('wrk.method = "POST"')
print("wrk.body = " + json.dumps(body))
print('wrk.headers["Content-Type"] = "application/json"')
print('wrk.headers["Authorization"] = "Bearer %s"' % key)
PY
  echo "$WORK/post-$1-$2.lua"
}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
run() { # $1 = url, $2 = script, $3 = pid whose CPU counts; prints "rps cpu_us_per_request"
  wrk -t1 -c64 -d1s -s "$2" "$1" >/dev/null 2>&1 || true
  local t0 t1 out
  t0=$(ticks "$3")
  out=$(wrk -t1 -c64 -d"${DUR}s" -s "$2" "$1")
  t1=$(ticks "$3")
  echo "$out" | grep -q "Non-2xx" && { echo "non-2xx answers: $out" >&2; exit 1; }
  echo "$out" | awk -v dt=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" '
    /requests in/ { n = $1 } /^Requests\/sec/ { rps = $2 }
    END { printf "%.0f %.1f\n", rps, dt / hz * 1e6 / n }'
}
# nginx works in its (one) worker process, not the master.
NGINX_PID=$(pgrep -P "$(cat "$WORK/proxy.pid")" | head -1)
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); runs of ${DUR}s, wrk -t1 -c64"
printf '| body | nginx req/s | nginx µs/req | ax req/s | ax µs/req | ax governed req/s | ax governed µs/req |'
[ -n "$OTHER" ] && printf ' other ax req/s | other µs/req | other governed req/s | other governed µs/req |'
printf '\n'
for n in 1 60 600; do
  plain=$(script "$n" "$KEY"); gov=$(script "$n" "$KEY-gov")
  size=$(( $(wc -c < "$plain") / 1024 ))
  read -r nr nc < <(run "http://127.0.0.1:$PROXY/v1/chat/completions" "$plain" "$NGINX_PID")
  row="| ~${size} KB ($n msg) | $nr | $nc |"
  for bin in "$AX" ${OTHER:+"$OTHER"}; do
    addr=$(start_ax "$bin")
    pid=$(cat "$WORK/ax.pid")
    read -r ar ac < <(run "http://$addr/v1/chat/completions" "$plain" "$pid")
    read -r gr gc < <(run "http://$addr/v1/chat/completions" "$gov" "$pid")
    kill "$pid"; wait "$pid" 2>/dev/null || true
    row="$row $ar | $ac | $gr | $gc |"
  done
  echo "$row"
done
