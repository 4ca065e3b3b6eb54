#!/usr/bin/env bash
# CPU per request of each of ax's threads (serving threads, the log writer) under wrk -t1 -c64 for
# 8 s with a ~1 KB chat request, nginx answering as the upstream:
#
#   bash tests/bench/threads.sh BINARY [AX_LOG value, empty for the default]
#
# From /proc/PID/task/*/stat (user and system time) before and after the run. Loopback only.
set -euo pipefail
BIN=$1; LOG=${2:-}
W=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
MOCK=$(free_port)
OPENAI='{"id":"chatcmpl-1","object":"chat.completion","created":1730000000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello!"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":9,"total_tokens":18}}'
cat > $W/mock.conf <<E2
worker_processes 1; pid $W/mock.pid; error_log $W/mock.err warn; events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000;
  server { listen 127.0.0.1:$MOCK backlog=4096; location = /v1/chat/completions { default_type application/json; return 200 '$OPENAI'; } } }
E2
nginx -p $W -c $W/mock.conf
KEY=ax-bench-key; DIGEST=$(printf '%s' "$KEY" | sha256sum | cut -d' ' -f1)
cat > $W/ax.yaml <<E2
upstreams:
  - { name: up, provider: openai, base_url: "http://127.0.0.1:$MOCK/v1", api_key: sk, models: [{ name: m, context_window: 1000000, capabilities: [chat], price_per_mtok: { input: 1, output: 2 } }] }
routes:
  - { alias: chat, candidates: [{ upstream: up, model: m }] }
tenants:
  - { id: plain, keys: [{ id: k1, sha256: "$DIGEST" }] }
E2
python3 - > $W/post.lua <<'PY'
import json
text = "The quick brown fox jumps over the lazy dog while the agent reads the repository. " * 10
body = json.dumps({"model": "chat", "max_tokens": 100, "messages": [{"role":"user","content":text}]})
print('wrk.method = "POST"'); print("wrk.body = " + json.dumps(body)); print('wrk.headers["Content-Type"] = "application/json"'); print('wrk.headers["Authorization"] = "Bearer ax-bench-key"')
PY
if [ -n "$LOG" ]; then export AX_LOG=$LOG; fi
$BIN --config $W/ax.yaml --listen 127.0.0.1:0 --addr-file $W/ax.addr >/dev/null 2>$W/ax.log &
PID=$!
for _ in $(seq 100); do [ -s $W/ax.addr ] && break; sleep 0.05; done
ADDR=$(cat $W/ax.addr)
wrk -t1 -c64 -d1s -s $W/post.lua http://$ADDR/v1/chat/completions >/dev/null
declare -A U0 S0
for t in /proc/$PID/task/*; do id=$(basename $t); read -r u s < <(awk '{print $14, $15}' $t/stat); U0[$id]=$u; S0[$id]=$s; done
N=$(wrk -t1 -c64 -d8s -s $W/post.lua http://$ADDR/v1/chat/completions | awk '/requests in/ {print $1}')
for t in /proc/$PID/task/*; do id=$(basename $t); name=$(cat $t/comm); read -r u s < <(awk '{print $14, $15}' $t/stat); du=$((u-${U0[$id]:-0})); ds=$((s-${S0[$id]:-0})); [ $((du+ds)) -gt 0 ] && printf "%-16s user %6.2f us/req sys %6.2f us/req\n" "$name" $(python3 -c "print($du*1e6/100/$N, $ds*1e6/100/$N)"); done
echo "requests $N"
kill $PID; kill $(cat $W/mock.pid); rm -rf $W
