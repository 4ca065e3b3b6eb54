#!/usr/bin/env bash
# What the Responses API's response store costs a turn (issue 22's measure), ax at its defaults
# with a private Redis as the store, wrk -t1 -c64, bodies of ~1 KB and ~50 KB:
#
#   bash tests/bench/store.sh [seconds-per-run]
#
#   - store: false, no previous_response_id: the store is not used;
#   - store: true (the default): the response is kept (one MULTI of HSET + PEXPIRE);
#   - store: true and previous_response_id (a response made before the run) written by this data
#     plane: the chain is remembered (no read), the new response kept;
#   - the same with a previous response written by another data plane (a second process): the
#     chain is read (one Lua walk), then the new response kept;
#   - every request continuing a different response this data plane never saw (seeded into Redis
#     before the run): every turn reads its conversation (one walk) and sends its write behind its
#     answer, so it waits on Redis once; 6 commands per request (the walk's EVALSHA and the HMGET it
#     runs, the MULTI's 4) say every write landed.
# Reported: req/s, the data plane's CPU µs per request (/proc), wrk's median latency, the Redis
# commands per request (Redis's total_commands_processed over the run ÷ requests: a turn's write is
# one MULTI of HSET + PEXPIRE, 4 commands in one round trip, waited for before the answer's end
# unless the turn read Redis; a walk is one EVALSHA, counted with the HMGET it runs per link), and
# the round trips a turn waits for. Loopback only; bounded by wrk's -d; everything started here is
# stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${1:-8}
source tests/bench/mock.sh
bench_setup store nginx wrk python3 redis-server redis-cli curl
MOCK=$(free_port); REDIS=$(free_port)
start_mock "$WORK" "$MOCK"
start_redis "$WORK" "$REDIS"
KEY=ax-bench-key
cat > "$WORK/ax.yaml" <<EOF
server: { redis_url: "redis://127.0.0.1:$REDIS" }
upstreams:
  - { name: up, provider: openai, base_url: "http://127.0.0.1:$MOCK/v1", api_key: sk-bench,
      models: [{ name: m, context_window: 1000000, capabilities: [chat], price_per_mtok: { input: 1, output: 2 } }] }
routes:
  - { alias: chat, candidates: [{ upstream: up, model: m }] }
tenants:
  - { id: plain, keys: [{ id: k1, sha256: "$(printf '%s' "$KEY" | sha256sum | cut -d' ' -f1)" }] }
EOF
for ax in ax ax2; do
  "$AX" --config "$WORK/ax.yaml" --listen 127.0.0.1:0 --addr-file "$WORK/$ax.addr" >/dev/null 2>"$WORK/$ax.log" &
  echo $! > "$WORK/$ax.pid"
  for _ in $(seq 200); do [ -s "$WORK/$ax.addr" ] && break; sleep 0.05; done
done
URL="http://$(cat "$WORK/ax.addr")"
URL2="http://$(cat "$WORK/ax2.addr")"
sleep 1.5 # the fleet's first connection
script() { # $1 = messages, $2 = store (true/false), $3 = previous response id or ""
  local out="$WORK/post-$1-$2-${3:-none}.lua"
  python3 - "$1" "$2" "$3" "$KEY" > "$out" <<'PY'
import json, sys
n, store, prev, key = int(sys.argv[1]), sys.argv[2] == "true", sys.argv[3], sys.argv[4]
text = "The quick brown fox jumps over the lazy dog while the agent reads the repository. " * 10
msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": text} for i in range(n)]
body = {"model": "chat", "max_output_tokens": 100, "input": msgs, "store": store}
if prev:
    body["previous_response_id"] = prev
print('wrk.method = "POST"')
print('wrk.path = "/v1/responses"')
print("wrk.body = " + json.dumps(json.dumps(body)))
print('wrk.headers["Content-Type"] = "application/json"')
print('wrk.headers["Authorization"] = "Bearer %s"' % key)
PY
  echo "$out"
}
# seeded N: N responses of tenant `plain` put straight into Redis, their ids in $WORK/seeded.ids.
seeded() {
  python3 - "$1" "$WORK/seeded.ids" <<'PY' | redis-cli -p "$REDIS" --pipe >/dev/null
import os, sys
n, ids = int(sys.argv[1]), open(sys.argv[2], "w")
resp = b'{"id":"x","object":"response","status":"completed","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hello!"}]}]}'
def cmd(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)
w = sys.stdout.buffer
for _ in range(n):
    conv, own = os.urandom(8).hex(), os.urandom(16).hex()
    ids.write("resp_%s%s\n" % (conv, own))
    key = ("ax:resp:{%s}:%s" % (conv, own)).encode()
    w.write(cmd(b"HSET", key, b"t", b"plain", b"p", b"", b"i", b'"first turn"', b"r", resp))
    w.write(cmd(b"PEXPIRE", key, b"3600000"))
PY
}
# walking SCRIPT: a copy of a wrk script whose every request continues the next seeded id.
walking() {
  local out="${1%.lua}-walking.lua"
  { cat "$1"
    cat <<EOF
-- wrk's warm-up run takes the second half of the ids, the measured run the first: no id twice.
ids, next_id = {}, 0
for line in io.lines("$WORK/seeded.ids") do ids[#ids + 1] = line end
if os.getenv("WRK_WARMUP") then next_id = math.floor(#ids / 2) end
request = function()
  next_id = next_id % #ids + 1
  local body = wrk.body:gsub('"previous_response_id": "[^"]*"', '"previous_response_id": "' .. ids[next_id] .. '"')
  return wrk.format(nil, nil, nil, body)
end
EOF
  } > "$out"
  echo "$out"
}
commands() { redis-cli -p "$REDIS" info stats | awk -F: '/^total_commands_processed/ { print $2 + 0 }'; }
run() { # $1 = script; prints "rps cpu_us_per_request p50 redis_commands_per_request"
  WRK_WARMUP=1 wrk -t1 -c64 -d1s -s "$1" "$URL" >/dev/null 2>&1 || true
  local t0 t1 c0 c1 out pid
  pid=$(cat "$WORK/ax.pid")
  t0=$(ticks "$pid"); c0=$(commands)
  out=$(wrk -t1 -c64 -d"${DUR}s" --latency -s "$1" "$URL")
  t1=$(ticks "$pid"); c1=$(commands)
  echo "$out" | grep -q "Non-2xx" && { echo "non-2xx answers: $out" >&2; exit 1; }
  echo "$out" | awk -v dt=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" -v dc=$((c1 - c0)) '
    /requests in/ { n = $1 } /^Requests\/sec/ { rps = $2 } /^ +50%/ { p50 = $2 }
    END { printf "%.0f %.1f %s %.2f\n", rps, dt / hz * 1e6 / n, p50, dc / n }'
}
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); runs of ${DUR}s, wrk -t1 -c64"
echo
echo '| body | store | req/s | CPU µs/req | p50 | Redis commands/req | round trips a turn waits for |'
echo '|---|---|---:|---:|---:|---:|---:|'
for n in 1 60; do
  size=$(python3 -c "print(max(1, round(len('The quick brown fox jumps over the lazy dog while the agent reads the repository. ' * 10) * $n / 1024)))")
  first() { curl -s "$1/v1/responses" -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
    -d '{"model":"chat","input":"first turn"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'; }
  here=$(first "$URL"); there=$(first "$URL2")
  seeded $(( (n == 1 ? 40000 : 12000) * (DUR + 2) )) # more than the run can use: no id comes twice
  for mode in "false:" "true:" "true:$here" "true:$there" "walk:$there"; do
    store=${mode%%:*}; prev=${mode#*:}
    if [ "$store" = walk ]; then
      read -r rps cpu p50 cmds < <(run "$(walking "$(script "$n" true "$prev")")")
    else
      read -r rps cpu p50 cmds < <(run "$(script "$n" "$store" "$prev")")
    fi
    case "$mode" in
      false:) what="off (store: false)"; trips=0 ;;
      true:) what="on"; trips=1 ;;
      "true:$here") what="on + previous_response_id written by this data plane"; trips=1 ;;
      "true:$there") what="on + previous_response_id written by another data plane (read once, then remembered)"; trips=1 ;;
      *) what="on + a previous_response_id this data plane never saw, every request (each reads Redis; its write goes behind its answer)"; trips=1 ;;
    esac
    echo "| ~${size} KB | $what | $rps | $cpu | $p50 | $cmds | $trips |"
  done
done
echo
echo "Redis memory after the runs: $(redis-cli -p "$REDIS" info memory | awk -F: '/^used_memory_human/ { print $2 }' | tr -d '\r')"
