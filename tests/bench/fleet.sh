#!/usr/bin/env bash
# Fleet-wide governance at full speed (issue 24's measure): one ax at its defaults, a tenant with
# rpm, tpm and concurrency limits (far above the load) and a day budget, governed locally and
# governed through Redis (leases), beside the same ax ungoverned, in one run:
#
#   bash tests/bench/fleet.sh [seconds-per-run] [rounds]
#
# Each round runs wrk -t1 -c64 with a ~1 KB body against: ungoverned; governed, local; governed,
# through Redis; governed through Redis with `exact: true` (one round trip per request). CPU per
# request is ax's utime + stime from /proc over the run ÷ the requests wrk counted; Redis commands
# are the calls `INFO commandstats` counts (a Lua script is one call, not the commands it runs) in
# a Redis started here for the run, ÷ the requests. Loopback only, bounded by wrk's -d; what is
# started here is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${1:-8}
ROUNDS=${2:-3}
source tests/bench/mock.sh
bench_setup fleet nginx wrk python3 redis-server redis-cli
MOCK=$(free_port); REDIS=$(free_port)
start_mock "$WORK" "$MOCK"
start_redis "$WORK" "$REDIS"
KEY=ax-bench-key
digest() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
config() { # $1 = file, $2 = server settings, $3 = "exact: true," or ""
  cat > "$1" <<EOF
server: { $2 }
upstreams:
  - { name: up, provider: openai, base_url: "http://127.0.0.1:$MOCK/v1", api_key: sk-bench,
      models: [{ name: m, context_window: 1000000, capabilities: [chat], price_per_mtok: { input: 1, output: 2 } }] }
routes:
  - { alias: chat, candidates: [{ upstream: up, model: m }] }
tenants:
  - { id: plain, keys: [{ id: k1, sha256: "$(digest "$KEY")" }] }
  - id: governed
    limits: { $3 rpm: 100000000, tpm: 4000000000, concurrency: 100000 }
    budgets: [{ window: day, usd: 1000000000, $3 }]
    keys: [{ id: k2, sha256: "$(digest "$KEY-gov")" }]
EOF
}
config "$WORK/local.yaml" "" ""
config "$WORK/redis.yaml" "redis_url: \"redis://127.0.0.1:$REDIS\", replicas: 3" ""
config "$WORK/exact.yaml" "redis_url: \"redis://127.0.0.1:$REDIS\", replicas: 3" "exact: true,"
sed -i 's/, }]/ }]/' "$WORK/local.yaml" "$WORK/redis.yaml"
script() { # $1 = key; a wrk script posting a ~1 KB chat request
  python3 - "$1" > "$WORK/post-$1.lua" <<'PY'
import json, sys
text = "The quick brown fox jumps over the lazy dog while the agent reads the repository. " * 10
body = json.dumps({"model": "chat", "max_tokens": 100, "messages": [{"role": "user", "content": text}]})
print('wrk.method = "POST"')
print("wrk.body = " + json.dumps(body))
print('wrk.headers["Content-Type"] = "application/json"')
print('wrk.headers["Authorization"] = "Bearer %s"' % sys.argv[1])
PY
  echo "$WORK/post-$1.lua"
}
# Scripts' own commands are counted by Redis too: left out, with INFO itself.
commands() { redis-cli -p "$REDIS" INFO commandstats | awk -F'[:,=]' '
  BEGIN { split("info hset hget hdel hincrby pexpire time del incrby exists set", l, " "); for (i in l) skip[l[i]] = 1 }
  /^cmdstat_/ { name = substr($1, 9); if (!(name in skip)) n += $3 } END { print n + 0 }'; }
run() { # $1 = config, $2 = key; prints "rps cpu_us_per_request redis_commands_per_request"
  rm -f "$WORK/ax.addr"
  "$AX" --config "$1" --listen 127.0.0.1:0 --addr-file "$WORK/ax.addr" >/dev/null 2>"$WORK/ax.log" &
  echo $! > "$WORK/ax.pid"
  for _ in $(seq 200); do [ -s "$WORK/ax.addr" ] && break; sleep 0.05; done
  local url="http://$(cat "$WORK/ax.addr")/v1/chat/completions" pid s t0 t1 c0 c1 out
  pid=$(cat "$WORK/ax.pid"); s=$(script "$2")
  wrk -t1 -c64 -d2s -s "$s" "$url" >/dev/null 2>&1 || true
  c0=$(commands); t0=$(ticks "$pid")
  out=$(wrk -t1 -c64 -d"${DUR}s" -s "$s" "$url")
  t1=$(ticks "$pid"); c1=$(commands)
  kill "$pid"; wait "$pid" 2>/dev/null || true; rm -f "$WORK/ax.pid"
  echo "$out" | grep -q "Non-2xx" && { echo "non-2xx answers: $out" >&2; exit 1; }
  echo "$out" | awk -v dt=$((t1 - t0)) -v hz="$(getconf CLK_TCK)" -v dc=$((c1 - c0)) '
    /requests in/ { n = $1 } /^Requests\/sec/ { rps = $2 }
    END { printf "%.0f %.1f %.4f\n", rps, dt / hz * 1e6 / n, dc / n }'
}
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); runs of ${DUR}s, wrk -t1 -c64, ~1 KB body, ax at its defaults"
echo "| round | ungoverned req/s / CPU µs | local | Redis (leases) | Redis commands a request | Redis exact | commands a request (exact) | Redis ÷ local req/s |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for r in $(seq "$ROUNDS"); do
  read -r pr pc _ < <(run "$WORK/local.yaml" "$KEY")
  read -r lr lc _ < <(run "$WORK/local.yaml" "$KEY-gov")
  read -r rr rc rn < <(run "$WORK/redis.yaml" "$KEY-gov")
  read -r er ec en < <(run "$WORK/exact.yaml" "$KEY-gov")
  echo "| $r | $pr / $pc | $lr / $lc | $rr / $rc | $rn | $er / $ec | $en | $(python3 -c "print('%.2f' % ($rr / $lr))") |"
done
