# Sourced by the wrk benchmarks (sizes.sh, store.sh, fleet.sh): bench_setup (tools, the release
# build, a work dir stopped and removed on exit), free_port, ticks, start_mock, the nginx mock
# upstream answering a fixed OpenAI chat completion and a fixed Anthropic message at once, and
# start_redis, a private Redis for the run.

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# A process's user + system CPU ticks so far.
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

MOCK_OPENAI='{"id":"chatcmpl-1","object":"chat.completion","created":1730000000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":9,"total_tokens":18}}'
MOCK_ANTHROPIC='{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Hello! How can I help you today?"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":9}}'

# start_mock WORKDIR PORT: nginx with one worker on 127.0.0.1:PORT, its pid in WORKDIR/mock.pid.
start_mock() {
  cat > "$1/mock.conf" <<EOF
worker_processes 1;
pid $1/mock.pid;
error_log $1/mock.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_buffer_size 1m;
  client_max_body_size 10m;
  server { listen 127.0.0.1:$2 backlog=4096;
    location = /v1/chat/completions { default_type application/json; return 200 '$MOCK_OPENAI'; }
    location = /v1/messages { default_type application/json; return 200 '$MOCK_ANTHROPIC'; } }
}
EOF
  nginx -p "$1" -c "$1/mock.conf"
}

# start_redis WORKDIR PORT: a redis-server keeping nothing on disk, its pid in WORKDIR/redis.pid.
start_redis() {
  redis-server --port "$2" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes --pidfile "$1/redis.pid" >/dev/null
  for _ in $(seq 100); do redis-cli -p "$2" ping >/dev/null 2>&1 && break; sleep 0.05; done
}

# bench_setup NAME TOOL...: checks the tools, builds ax (release), sets AX and WORK (a fresh dir),
# and on exit stops every process whose pid file is in WORK and removes it. AX_BIN=<binary>
# measures that build instead (an earlier one kept for an A/B), with no build.
bench_setup() {
  local name=$1 tool; shift
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y nginx wrk python3 redis-server curl" >&2; exit 2; }
  done
  if [ -n "${AX_BIN:-}" ]; then
    AX=$AX_BIN
  else
    cargo build --release --locked -p ax-dataplane --bin ax-dataplane >/dev/null 2>&1
    AX=target/release/ax-dataplane
  fi
  WORK=$(mktemp -d "/tmp/ax-$name.XXXXXX")
  trap bench_cleanup EXIT
}
bench_cleanup() {
  for f in "$WORK"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
  rm -rf "$WORK"
}

# wrk_cpu URL SCRIPT PID: a 1 s warm-up, then wrk -t1 -c64 for $DUR seconds; prints "req/s CPU-µs-per-request"
# (PID's user + system time over the run ÷ the requests wrk counted); exits on a non-2xx answer.
wrk_cpu() {
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
