#!/usr/bin/env bash
# Instructions per request under callgrind, at ax's default configuration and log level, for a
# non-stream chat request (~1 KB body) and a 50-event stream, behind the harness's mock upstream:
#
#   bash tests/bench/callgrind.sh [seconds-per-run] [ax-dataplane binary ...]
#
# Without binaries it builds and measures target/release/ax-dataplane; with several it measures
# each in turn (an A/B of two builds). Per binary and case: ax under `valgrind --tool=callgrind`
# with one serving thread, three warm-up requests, `callgrind_control -z`, `wrk -t1` for the given
# seconds, `callgrind_control -d`; the dump's total instructions ÷ the requests wrk counted.
# AX_CG_MESSAGES=60 sends a conversation of that many messages (~50 KB at 60) instead of one;
# AX_CG_ALIAS=chat-an sends it to an Anthropic upstream (the translated path) instead of the
# OpenAI one (the same-protocol fast path); AX_CG_CASES=false (or true) measures only non-stream
# (or the stream); AX_CG_API=messages sends it as an Anthropic caller (POST /v1/messages with
# anthropic-version; with AX_CG_ALIAS=chat-an, forwarded to the Anthropic upstream), and
# AX_CG_API=responses as a Responses caller (POST /v1/responses, the messages as `input`: translated
# for the OpenAI upstream, and kept in the process's response store, as `store` is by default);
# AX_CG_IMAGE=<KB> (with AX_CG_API=messages) ends the conversation with a tool call whose result
# is a text and a base64 image of that size (Claude Code's `Read` of a screenshot);
# AX_CG_API=gemini sends it as a Gemini caller (POST /v1beta/models/<alias>:generateContent, or
# :streamGenerateContent?alt=sse; the messages as `contents`): AX_CG_ALIAS=chat-ge forwards it to
# the Gemini upstream, chat (the default) translates it for the OpenAI one;
# AX_CG_KEEP=<dir> keeps the dumps; AX_CG_DEBUG=1 shows the warm-up answers; AX_CG_GOVERN=local
# (or redis) sends as a tenant with rate limits and a day budget, governed in the process (or
# fleet-wide through the Redis at 127.0.0.1:6379, with leases).
# Loopback only; every run is bounded; everything started here is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${1:-10}
MESSAGES=${AX_CG_MESSAGES:-1}
ALIAS=${AX_CG_ALIAS:-chat}
CASES=${AX_CG_CASES:-false true}
API=${AX_CG_API:-chat}
GOVERN=${AX_CG_GOVERN:-}
shift || true
BINS=("$@")
for tool in valgrind callgrind_control wrk curl; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install -y valgrind wrk curl" >&2; exit 2; }
done
cargo build --release --locked -p ax-bench >/dev/null 2>&1
if [ ${#BINS[@]} -eq 0 ]; then
  cargo build --release --locked -p ax-dataplane --bin ax-dataplane >/dev/null 2>&1
  BINS=(target/release/ax-dataplane)
fi
WORK=$(mktemp -d /tmp/ax-callgrind.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
target/release/ax-bench mock --addr-file "$WORK/mock.addr" --events 50 --gap-ms 1 &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$WORK/mock.addr" ] && break; sleep 0.05; done
MOCK=$(cat "$WORK/mock.addr")
KEY=ax-bench-key
SERVER=""
[ "$GOVERN" = redis ] && SERVER="server: { redis_url: \"redis://127.0.0.1:6379\", redis_prefix: \"cg-$$\" }"
cat > "$WORK/ax.yaml" <<EOF
$SERVER
upstreams:
  - { name: up, provider: openai, base_url: "http://$MOCK/v1", api_key: sk-bench,
      models: [{ name: m, context_window: 1000000, capabilities: [chat, streaming, vision], price_per_mtok: { input: 1, output: 2 } }] }
  - { name: an, provider: anthropic, base_url: "http://$MOCK", api_key: sk-bench,
      models: [{ name: m, context_window: 1000000, capabilities: [chat, streaming, vision], price_per_mtok: { input: 1, output: 2 } }] }
  - { name: ge, provider: gemini, base_url: "http://$MOCK", api_key: sk-bench,
      models: [{ name: m, context_window: 1000000, capabilities: [chat, streaming, vision], price_per_mtok: { input: 1, output: 2 } }] }
routes:
  - { alias: chat, candidates: [{ upstream: up, model: m }] }
  - { alias: chat-an, candidates: [{ upstream: an, model: m }] }
  - { alias: chat-ge, candidates: [{ upstream: ge, model: m }] }
tenants:
  - { id: plain, keys: [{ id: k1, sha256: "$(printf '%s' "$KEY" | sha256sum | cut -d' ' -f1)" }] }
  - id: governed
    limits: { rpm: 100000000, tpm: 4000000000, concurrency: 100000 }
    budgets: [{ window: day, usd: 1000000000 }]
    keys: [{ id: k2, sha256: "$(printf '%s' "$KEY-gov" | sha256sum | cut -d' ' -f1)" }]
EOF
[ -n "$GOVERN" ] && KEY="$KEY-gov"
body() { # $1 = stream (true|false)
  python3 - "$1" "$MESSAGES" "$ALIAS" "$API" "${AX_CG_IMAGE:-0}" <<'PY'
import json, sys
text = "The quick brown fox jumps over the lazy dog while the agent reads the repository. " * 10
msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": text} for i in range(int(sys.argv[2]))]
if int(sys.argv[5]) > 0 and sys.argv[4] == "messages":
    if msgs and msgs[-1]["role"] == "assistant":
        msgs.append({"role": "user", "content": text})
    image = {"type": "base64", "media_type": "image/png", "data": "iVBO" * (int(sys.argv[5]) * 256)}
    msgs.append({"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "shot.png"}}]})
    msgs.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
        {"type": "text", "text": "shot.png"}, {"type": "image", "source": image}]}]})
if sys.argv[4] == "gemini":
    contents = [{"role": "user" if m["role"] == "user" else "model", "parts": [{"text": m["content"]}]} for m in msgs]
    print(json.dumps({"contents": contents, "generationConfig": {"maxOutputTokens": 100}}))
elif sys.argv[4] == "responses":
    print(json.dumps({"model": sys.argv[3], "max_output_tokens": 100, "stream": sys.argv[1] == "true", "input": msgs}))
else:
    print(json.dumps({"model": sys.argv[3], "max_tokens": 100, "stream": sys.argv[1] == "true", "messages": msgs}))
PY
}
for s in false true; do
  body "$s" > "$WORK/body-$s.json"
  python3 - "$WORK/body-$s.json" "$KEY" "$API" > "$WORK/post-$s.lua" <<'PY'
import json, sys
print('wrk.method = "POST"')
print("wrk.body = " + json.dumps(open(sys.argv[1]).read()))
print('wrk.headers["Content-Type"] = "application/json"')
print('wrk.headers["Authorization"] = "Bearer %s"' % sys.argv[2])
if sys.argv[3] == "messages":
    print('wrk.headers["anthropic-version"] = "2023-06-01"')
PY
done
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
echo "| binary | case | requests | instructions per request |"
echo "|---|---|---:|---:|"
for bin in "${BINS[@]}"; do
  exe=$(realpath "$bin")
  for s in $CASES; do
    port=$(free_port)
    (cd "$WORK" && AX_THREADS=1 exec valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.out" \
      "$exe" --config "$WORK/ax.yaml" --listen "127.0.0.1:$port") >/dev/null 2>"$WORK/ax.log" &
    pid=$!
    PIDS+=($pid)
    url="http://127.0.0.1:$port/v1/chat/completions"
    [ "$API" = messages ] && url="http://127.0.0.1:$port/v1/messages"
    [ "$API" = responses ] && url="http://127.0.0.1:$port/v1/responses"
    [ "$API" = gemini ] && [ "$s" = false ] && url="http://127.0.0.1:$port/v1beta/models/$ALIAS:generateContent"
    [ "$API" = gemini ] && [ "$s" = true ] && url="http://127.0.0.1:$port/v1beta/models/$ALIAS:streamGenerateContent?alt=sse"
    for _ in $(seq 300); do curl -s -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.1; done
    for _ in 1 2 3; do
      [ -n "${AX_CG_DEBUG:-}" ] && curl -s -i -H "Authorization: Bearer $KEY" -H "content-type: application/json" -H "anthropic-version: 2023-06-01" --data-binary "@$WORK/body-$s.json" "$url" | head -12 >&2
      curl -sf -o /dev/null -H "Authorization: Bearer $KEY" -H 'content-type: application/json' \
        -H 'anthropic-version: 2023-06-01' --data-binary "@$WORK/body-$s.json" "$url"
    done
    callgrind_control -z "$pid" >/dev/null 2>&1
    conns=1; [ "$s" = true ] && conns=10
    n=$(wrk -t1 -c"$conns" -d"${DUR}s" --timeout 30s -s "$WORK/post-$s.lua" "$url" | awk '/requests in/ { print $1 }')
    callgrind_control -d "$pid" >/dev/null 2>&1
    sleep 1
    # The dump (cg.out.1) holds what ran since the zeroing; the file written at exit is not read.
    total=$(cat "$WORK"/cg.out.* | awk '/^summary:/ { s += $2 } /^totals:/ { t += $2 } END { print (t ? t : s) }')
    kill "$pid"; wait "$pid" 2>/dev/null || true
    # AX_CG_KEEP=<dir> keeps each dump there (for callgrind_annotate).
    if [ -n "${AX_CG_KEEP:-}" ]; then
      mkdir -p "$AX_CG_KEEP"
      cp "$WORK"/cg.out.1 "$AX_CG_KEEP/$(basename "$bin")-$s-$MESSAGES-$ALIAS.out" 2>/dev/null || true
    fi
    rm -f "$WORK"/cg.out*
    case=non-stream; [ "$s" = true ] && case="stream, 50 events"
    [ "$MESSAGES" != 1 ] && case="$case, $MESSAGES messages"
    [ "$ALIAS" != chat ] && case="$case, $ALIAS"
    [ "$API" != chat ] && case="$case, /v1/$API"
    [ -n "$GOVERN" ] && case="$case, governed ($GOVERN)"
    [ -n "${AX_CG_IMAGE:-}" ] && case="$case, a ${AX_CG_IMAGE} KB image"
    echo "| $bin | $case | $n | $(( total / n )) |"
  done
done
