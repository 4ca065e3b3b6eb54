#!/usr/bin/env bash
# What traces cost (issue 25: at ratio 1.0, throughput ≥ 0.95× tracing off): ax at its defaults,
# ~1 KB chat requests to an OpenAI upstream (nginx answering at once), wrk -t1 -c64, alternating
# rounds with tracing off and with every request traced (OTEL_EXPORTER_OTLP_ENDPOINT set, the
# default sampler: all) to a collector stand-in (nginx answering 200 to POST /v1/traces, so the
# collector costs next to nothing). Per round: req/s and ax's CPU µs per request from /proc (the
# exporter thread included), the two runs of a round back to back in alternating order; at the end
# the medians and their ratio, the median of the rounds' own ratios (the steadier figure on a
# box whose speed drifts between rounds), and the spans ax counted as exported and dropped.
#
#   bash tests/bench/traces.sh [seconds-per-run] [rounds]
#
# Loopback only; every run is bounded by wrk's -d; everything started here is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${1:-5}
ROUNDS=${2:-3}
source tests/bench/mock.sh
bench_setup traces nginx wrk python3 curl
MOCK=$(free_port); SINK=$(free_port)
start_mock "$WORK" "$MOCK"
cat > "$WORK/sink.conf" <<CONF
worker_processes 1;
pid $WORK/sink.pid;
error_log $WORK/sink.err warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_buffer_size 16m;
  client_max_body_size 64m;
  server { listen 127.0.0.1:$SINK;
    location = /v1/traces { default_type application/x-protobuf; return 200 ''; } }
}
CONF
nginx -p "$WORK" -c "$WORK/sink.conf"
KEY=ax-bench-key
cat > "$WORK/ax.yaml" <<CONF
upstreams:
  - { name: up, provider: openai, base_url: "http://127.0.0.1:$MOCK/v1", api_key: sk-bench,
      models: [{ name: m, context_window: 1000000, capabilities: [chat], price_per_mtok: { input: 1, output: 2 } }] }
routes:
  - { alias: chat, candidates: [{ upstream: up, model: m }] }
tenants:
  - { id: plain, keys: [{ id: k1, sha256: "$(printf '%s' "$KEY" | sha256sum | cut -d' ' -f1)" }] }
CONF
python3 - "$KEY" > "$WORK/post.lua" <<'PY'
import json, sys
text = "The quick brown fox jumps over the lazy dog while the agent reads the repository. " * 10
body = json.dumps({"model": "chat", "max_tokens": 100, "messages": [{"role": "user", "content": text}]})
print('wrk.method = "POST"')
print("wrk.body = " + json.dumps(body))
print('wrk.headers["Content-Type"] = "application/json"')
print('wrk.headers["Authorization"] = "Bearer %s"' % sys.argv[1])
PY
start_ax() { # $1 = collector URL or ""; prints the address
  rm -f "$WORK/ax.addr"
  if [ -n "$1" ]; then export OTEL_EXPORTER_OTLP_ENDPOINT="$1"; else unset OTEL_EXPORTER_OTLP_ENDPOINT; fi
  "$AX" --config "$WORK/ax.yaml" --listen 127.0.0.1:0 --addr-file "$WORK/ax.addr" >/dev/null 2>"$WORK/ax.log" &
  echo $! > "$WORK/ax.pid"
  unset OTEL_EXPORTER_OTLP_ENDPOINT
  for _ in $(seq 200); do [ -s "$WORK/ax.addr" ] && break; sleep 0.05; done
  cat "$WORK/ax.addr"
}
stop_ax() { kill "$(cat "$WORK/ax.pid")"; wait "$(cat "$WORK/ax.pid")" 2>/dev/null || true; rm -f "$WORK/ax.pid"; }
run() { wrk_cpu "http://$1/v1/chat/completions" "$WORK/post.lua" "$(cat "$WORK/ax.pid")"; }
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); runs of ${DUR}s, wrk -t1 -c64, ~1 KB body, ax at its defaults"
echo "| round | off req/s | off CPU µs | traced req/s | traced CPU µs |"
echo "|---|---:|---:|---:|---:|"
OFF_R=(); OFF_C=(); ON_R=(); ON_C=()
off() { addr=$(start_ax ""); read -r orps ocpu < <(run "$addr"); stop_ax; }
traced() {
  addr=$(start_ax "http://127.0.0.1:$SINK"); read -r trps tcpu < <(run "$addr")
  METRICS=$(curl -s "http://$addr/metrics" | grep '^ax_trace_spans' || true)
  stop_ax
}
PAIR_R=(); PAIR_C=()
for r in $(seq "$ROUNDS"); do
  # Which goes first alternates, so a drift of the box within a round favours neither.
  if [ $((r % 2)) = 1 ]; then off; traced; else traced; off; fi
  echo "| $r | $orps | $ocpu | $trps | $tcpu |"
  OFF_R+=("$orps"); OFF_C+=("$ocpu"); ON_R+=("$trps"); ON_C+=("$tcpu")
  PAIR_R+=("$(awk -v a="$trps" -v b="$orps" 'BEGIN { printf "%.4f", a / b }')")
  PAIR_C+=("$(awk -v a="$tcpu" -v b="$ocpu" 'BEGIN { printf "%.4f", a / b }')")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
mo=$(median "${OFF_R[@]}"); mt=$(median "${ON_R[@]}"); co=$(median "${OFF_C[@]}"); ct=$(median "${ON_C[@]}")
echo
echo "medians: off $mo req/s, $co µs; traced $mt req/s, $ct µs; throughput traced ÷ off $(awk -v a="$mt" -v b="$mo" 'BEGIN { printf "%.3f", a / b }'), CPU $(awk -v a="$ct" -v b="$co" 'BEGIN { printf "%.3f", a / b }')"
echo "median of the rounds' own ratios (each round's two runs back to back): throughput $(median "${PAIR_R[@]}"), CPU $(median "${PAIR_C[@]}")"
echo "the last traced run's counters:"
echo "$METRICS"
