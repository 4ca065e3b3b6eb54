#!/usr/bin/env bash
# The demo seed of deploy/local.sh, on its own so that a test can run it against a control plane:
# creates what is missing and never changes what exists, so an operator's edit survives a rerun.
#   bash deploy/seed.sh CONTROL_PLANE_URL STATE_DIR
# Logs in as `admin` with the password in STATE_DIR/admin.password. Seeds:
#   - upstreams mock-fast and mock-large (in-process mocks that answer chat, streams, tool calls,
#     JSON output, images and embeddings);
#   - routes chat-default (80/20 over both) and embed-default (embeddings on mock-fast);
#   - tenant demo ($5 a day) and its key. The key's plaintext is kept in STATE_DIR/demo.key (mode
#     600, the only copy) and its id in STATE_DIR/demo.key.id; when that key is no longer active on
#     the control plane (a new database, a revoked key), a new one is issued and kept.
# Prints nothing but errors.
set -euo pipefail
CP=${1:?control plane URL}
STATE=${2:?state directory}
JAR=$(mktemp)
trap 'rm -f "$JAR"' EXIT
CSRF=$(curl -sf -c "$JAR" "$CP/api/v1/login" -H 'content-type: application/json' \
  -d "{\"username\":\"admin\",\"password\":\"$(cat "$STATE/admin.password")\"}" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["csrf_token"])')
api() { curl -sf -b "$JAR" -H "x-csrf-token: $CSRF" -H 'content-type: application/json' -X "$1" "$CP/api/v1$2" ${3:+-d "$3"}; }
# names LIST_PATH FIELD KEY: the KEY of every entry of the list at LIST_PATH's FIELD, one a line.
names() { api GET "$1" | python3 -c "import json,sys; [print(x['$3']) for x in json.load(sys.stdin)['$2']]"; }
missing() { ! grep -qxF "$2" <<<"$1"; }

upstream() { # NAME MODEL LATENCY_MS REPLY_TOKENS PRICE_IN PRICE_OUT
  api PUT "/upstreams/$1" "$(cat <<EOF
{"provider":"mock","mock":{"latency_ms":$3,"reply_tokens":$4,"tool_calls":true,"tool_arguments":"{\"city\":\"Paris\"}"},
 "models":[{"name":"$2","context_window":32000,"capabilities":["chat","streaming","tools","json","vision"],
            "price_per_mtok":{"input":$5,"output":$6}},
           {"name":"$2-embed","context_window":8192,"capabilities":["embeddings"],"price_per_mtok":{"input":0.02,"output":0}}]}
EOF
)" >/dev/null
}
have=$(names /upstreams upstreams name)
missing "$have" mock-fast && upstream mock-fast mock-small 20 24 0.10 0.40
missing "$have" mock-large && upstream mock-large mock-large 60 40 3.00 15.00
have=$(names /routes routes alias)
missing "$have" chat-default && api PUT /routes/chat-default '{"strategy":"weighted","candidates":[
  {"upstream":"mock-fast","model":"mock-small","weight":80},{"upstream":"mock-large","model":"mock-large","weight":20}]}' >/dev/null
missing "$have" embed-default && api PUT /routes/embed-default \
  '{"candidates":[{"upstream":"mock-fast","model":"mock-small-embed"}]}' >/dev/null
have=$(names /tenants tenants id)
missing "$have" demo && api PUT /tenants/demo '{"allowed_aliases":["*"],"budgets":[{"window":"day","usd":5.0}]}' >/dev/null

active=$(api GET /tenants/demo/keys | python3 -c "import json,sys; [print(k['id']) for k in json.load(sys.stdin)['keys'] if k['status'] == 'active']")
if [ ! -s "$STATE/demo.key" ] || [ ! -s "$STATE/demo.key.id" ] || missing "$active" "$(cat "$STATE/demo.key.id")"; then
  created=$(api POST /tenants/demo/keys '{}')
  (umask 077
   python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])' <<<"$created" > "$STATE/demo.key"
   python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' <<<"$created" > "$STATE/demo.key.id")
fi
