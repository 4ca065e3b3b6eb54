#!/usr/bin/env bash
# Throughput and CPU per request at real request sizes, ax beside nginx in the same run, with wrk
# as the load driver (issue 20's measure):
#
#   bash tests/bench/sizes.sh [seconds-per-run] [other ax-dataplane binary to compare]
#
# For bodies of ~1 KB, ~50 KB and ~500 KB (1, 60 and 600 messages), each with wrk -t1 -c64:
#   - nginx as a bare keep-alive reverse proxy, access log off, and again with its default access
#     log (the combined format, to a file);
#   - ax at its defaults (log level info: one usage line per request), and at AX_LOG=warn; an
#     OpenAI caller and an OpenAI upstream, so the same-protocol fast path;
#   - ax at its defaults with the tenant's rate limits (rpm, tpm, concurrency, far above the load)
#     and a day budget: the governed path;
#   - ax at its defaults translating: the OpenAI caller's alias served by an Anthropic upstream;
#   - ax at its defaults with an Anthropic caller (POST /v1/messages) and an Anthropic upstream, the
#     same body: issue 21's measure (no more CPU than the OpenAI caller to an OpenAI upstream);
#   - ax at its defaults with a Responses caller (POST /v1/responses, the same messages as `input`)
#     and the OpenAI upstream: translated, as every Responses request is today;
#   - ax at its defaults with an Anthropic caller and the OpenAI upstream: translated the other way
#     (Claude Code in front of an OpenAI-compatible model);
#   - with a second binary, it at its defaults, plain, translated and Anthropic caller to the OpenAI
#     upstream, in the same run; with
#     AX_SIZES_AB=<rounds> as well, only the two at their defaults, alternating, round by round.
# AX_SIZES_ROUNDS=<n> measures each size n times, nginx first in odd rounds and ax first in even
# ones, and reports each ratio as the median of the rounds' own ratios: a ratio then compares two
# runs made close together, which a box whose speed drifts by ±15 % over minutes needs.
# The upstreams are nginx answering a fixed OpenAI or Anthropic body. CPU per request is the
# proxy's utime + stime from /proc over the run, divided by the requests wrk counted. The table
# ends with the ratios issue 20 sets targets on. Loopback only; every run is bounded by wrk's -d;
# everything started here is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${1:-8}
OTHER=${2:-}
ROUNDS=${AX_SIZES_ROUNDS:-1}
for tool in nginx wrk python3; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y nginx wrk python3" >&2; exit 2; }
done
cargo build --release --locked -p ax-dataplane --bin ax-dataplane >/dev/null 2>&1
AX=target/release/ax-dataplane
WORK=$(mktemp -d /tmp/ax-sizes.XXXXXX)
cleanup() {
  for f in "$WORK"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
source tests/bench/mock.sh
MOCK=$(free_port); PROXY=$(free_port); PROXY_LOG=$(free_port)
start_mock "$WORK" "$MOCK"
proxy_conf() { # $1 = name, $2 = port, $3 = access_log line
  cat > "$WORK/$1.conf" <<EOF
worker_processes 1;
pid $WORK/$1.pid;
error_log $WORK/$1.err warn;
events { worker_connections 4096; }
http {
  $3
  keepalive_requests 1000000;
  client_body_buffer_size 1m;
  client_max_body_size 10m;
  upstream mock { server 127.0.0.1:$MOCK; keepalive 128; }
  server { listen 127.0.0.1:$2 backlog=4096;
    location / { proxy_pass http://mock; proxy_http_version 1.1; proxy_set_header Connection ""; } }
}
EOF
}
proxy_conf proxy "$PROXY" "access_log off;"
proxy_conf proxylog "$PROXY_LOG" "access_log $WORK/access.log;"
for c in proxy proxylog; do nginx -p "$WORK" -c "$WORK/$c.conf"; done
KEY=ax-bench-key
DIGEST=$(printf '%s' "$KEY" | sha256sum | cut -d' ' -f1)
cat > "$WORK/ax.yaml" <<EOF
upstreams:
  - { name: up, provider: openai, base_url: "http://127.0.0.1:$MOCK/v1", api_key: sk-bench,
      models: [{ name: m, context_window: 1000000, capabilities: [chat], price_per_mtok: { input: 1, output: 2 } }] }
  - { name: an, provider: anthropic, base_url: "http://127.0.0.1:$MOCK", api_key: sk-bench,
      models: [{ name: m, context_window: 1000000, capabilities: [chat], price_per_mtok: { input: 1, output: 2 } }] }
routes:
  - { alias: chat, candidates: [{ upstream: up, model: m }] }
  - { alias: chat-an, candidates: [{ upstream: an, model: m }] }
tenants:
  - { id: plain, keys: [{ id: k1, sha256: "$DIGEST" }] }
  - id: governed
    limits: { rpm: 100000000, tpm: 4000000000, concurrency: 100000 }
    budgets: [{ window: day, usd: 1000000000 }]
    keys: [{ id: k2, sha256: "$(printf '%s' "$KEY-gov" | sha256sum | cut -d' ' -f1)" }]
EOF
start_ax() { # $1 = binary, $2 = AX_LOG ("" for the default); prints the address; the pid goes to $WORK/ax.pid
  rm -f "$WORK/ax.addr"
  if [ -n "$2" ]; then export AX_LOG="$2"; else unset AX_LOG; fi
  "$1" --config "$WORK/ax.yaml" --listen 127.0.0.1:0 --addr-file "$WORK/ax.addr" >/dev/null 2>"$WORK/ax.log" &
  echo $! > "$WORK/ax.pid"
  unset AX_LOG
  for _ in $(seq 200); do [ -s "$WORK/ax.addr" ] && break; sleep 0.05; done
  cat "$WORK/ax.addr"
}
stop_ax() { kill "$(cat "$WORK/ax.pid")"; wait "$(cat "$WORK/ax.pid")" 2>/dev/null || true; rm -f "$WORK/ax.pid"; }
script() { # $1 = messages, $2 = key, $3 = alias[, $4 = messages: an Anthropic caller]; a wrk script posting a request of that many messages
  local out="$WORK/post-$1-$2-$3-${4:-chat}.lua"
  python3 - "$1" "$2" "$3" "${4:-chat}" > "$out" <<'PY'
import json, sys
n, key, alias, api = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
text = "The quick brown fox jumps over the lazy dog while the agent reads the repository. " * 10
msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": text} for i in range(n)]
if api == "responses":
    body = json.dumps({"model": alias, "max_output_tokens": 100, "input": msgs})
else:
    body = json.dumps({"model": alias, "max_tokens": 100, "messages": msgs})
print('wrk.method = "POST"')
print("wrk.body = " + json.dumps(body))
print('wrk.headers["Content-Type"] = "application/json"')
if api == "responses":
    print('wrk.path = "/v1/responses"')
if api == "messages":
    print('wrk.path = "/v1/messages"')
    print('wrk.headers["x-api-key"] = "%s"' % key)
    print('wrk.headers["anthropic-version"] = "2023-06-01"')
else:
    print('wrk.headers["Authorization"] = "Bearer %s"' % key)
PY
  echo "$out"
}
run() { wrk_cpu "$@"; }
# nginx works in its (one) worker process, not the master.
worker() { pgrep -P "$(cat "$WORK/$1.pid")" | head -1; }
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); runs of ${DUR}s, wrk -t1 -c64; req/s and CPU µs per request"
if [ -n "$OTHER" ] && [ -n "${AX_SIZES_AB:-}" ]; then
  # A/B only: this build and the other at their defaults, same protocol, alternating for
  # AX_SIZES_AB rounds at each size (a drifting box then moves both columns alike).
  echo "| body | round | this build | other |"
  echo "|---|---:|---:|---:|"
  for n in 1 60 600; do
    plain=$(script "$n" "$KEY" chat); size=$(( $(wc -c < "$plain") / 1024 ))
    for r in $(seq "$AX_SIZES_AB"); do
      cells=""
      for bin in "$AX" "$OTHER"; do
        addr=$(start_ax "$bin" ""); pid=$(cat "$WORK/ax.pid")
        read -r q c < <(run "http://$addr/v1/chat/completions" "$plain" "$pid")
        stop_ax
        cells="$cells $q / $c |"
      done
      echo "| ~${size} KB | $r |$cells"
    done
  done
  exit 0
fi
HEAD='| body | nginx | nginx, access log | ax defaults | ax warn | ax governed | ax translated | ax messages → Anthropic | ax responses → OpenAI | ax messages → OpenAI |'
[ -n "$OTHER" ] && HEAD="$HEAD other defaults | other translated | other messages → OpenAI |"
echo "$HEAD"
echo "$HEAD" | awk -F'|' '{ s = "|---"; for (i = 3; i < NF; i++) s = s "|---:"; print s "|" }'
RATIOS=()
nginx_runs() {
  read -r nr nc < <(run "http://127.0.0.1:$PROXY/v1/chat/completions" "$plain" "$(worker proxy)")
  read -r lr lc < <(run "http://127.0.0.1:$PROXY_LOG/v1/chat/completions" "$plain" "$(worker proxylog)")
}
ax_runs() {
  addr=$(start_ax "$AX" ""); pid=$(cat "$WORK/ax.pid")
  read -r dr dc < <(run "http://$addr/v1/chat/completions" "$plain" "$pid")
  read -r gr gc < <(run "http://$addr/v1/chat/completions" "$gov" "$pid")
  read -r tr_ tc < <(run "http://$addr/v1/chat/completions" "$tr" "$pid")
  read -r mr mc < <(run "http://$addr/v1/messages" "$msg" "$pid")
  read -r rr rc < <(run "http://$addr/v1/responses" "$rsp" "$pid")
  read -r mor moc < <(run "http://$addr/v1/messages" "$mo" "$pid")
  stop_ax
  addr=$(start_ax "$AX" warn); pid=$(cat "$WORK/ax.pid")
  read -r wr wc < <(run "http://$addr/v1/chat/completions" "$plain" "$pid")
  stop_ax
}
for n in 1 60 600; do
  plain=$(script "$n" "$KEY" chat); gov=$(script "$n" "$KEY-gov" chat); tr=$(script "$n" "$KEY" chat-an)
  msg=$(script "$n" "$KEY" chat-an messages); rsp=$(script "$n" "$KEY" chat responses)
  mo=$(script "$n" "$KEY" chat messages)
  size=$(( $(wc -c < "$plain") / 1024 ))
  for round in $(seq "$ROUNDS"); do
    # Odd rounds measure nginx first, even rounds ax first: a box drifting during a round moves
    # the two sides of a ratio the other way in the next one.
    if [ $((round % 2)) -eq 1 ]; then nginx_runs; ax_runs; else ax_runs; nginx_runs; fi
    label="~${size} KB ($n msg)"; [ "$ROUNDS" -gt 1 ] && label="$label, round $round"
    row="| $label | $nr / $nc | $lr / $lc | $dr / $dc | $wr / $wc | $gr / $gc | $tr_ / $tc | $mr / $mc | $rr / $rc | $mor / $moc |"
    if [ -n "$OTHER" ]; then
      addr=$(start_ax "$OTHER" ""); pid=$(cat "$WORK/ax.pid")
      read -r or oc < <(run "http://$addr/v1/chat/completions" "$plain" "$pid")
      read -r otr otc < <(run "http://$addr/v1/chat/completions" "$tr" "$pid")
      read -r omr omc < <(run "http://$addr/v1/messages" "$mo" "$pid")
      stop_ax
      row="$row $or / $oc | $otr / $otc | $omr / $omc |"
    fi
    echo "$row"
    RATIOS+=("$size $(python3 -c "
n,l,d,w,t,m,r,mo=$nc,$lc,$dc,$wc,$tc,$mc,$rc,$moc; nr,dr=$nr,$dr
print('%.3f %.3f %.3f %.3f %.3f %.3f %.3f' % (w/n, d/l, t/n, dr/nr, m/d, r/n, mo/n))")")
  done
done
echo
[ "$ROUNDS" -gt 1 ] && echo "Each ratio is the median of the $ROUNDS rounds' own ratios (each round's two sides measured minutes apart at most; the rounds' spread in brackets)."
echo '| body | CPU: ax warn ÷ nginx | CPU: ax defaults ÷ nginx with access log | CPU: ax translated ÷ nginx | req/s: ax defaults ÷ nginx | CPU: messages → Anthropic ÷ chat → OpenAI | CPU: responses → OpenAI ÷ nginx | CPU: messages → OpenAI ÷ nginx |'
echo '|---|---:|---:|---:|---:|---:|---:|---:|'
printf '%s\n' "${RATIOS[@]}" | python3 -c "
import sys, statistics
rows = {}
for line in sys.stdin:
    size, *vals = line.split()
    rows.setdefault(size, []).append([float(v) for v in vals])
for size, rounds in rows.items():
    cells = []
    for col in zip(*rounds):
        cell = '%.2f' % statistics.median(col)
        if len(col) > 1:
            cell += ' (%.2f–%.2f)' % (min(col), max(col))
        cells.append(cell)
    print('| ~%s KB | %s |' % (size, ' | '.join(cells)))"
