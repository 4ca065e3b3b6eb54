#!/usr/bin/env bash
# One-command local stack: Postgres (the running one on 127.0.0.1:5432, else a private cluster
# under .ax-local/pg), migrations, a demo seed (admin login; deploy/seed.sh: a tenant with a key,
# mock upstreams, chat and embedding routes; only what is missing, so a rerun keeps an operator's
# changes), the control plane and one data plane. Ctrl-C stops what it started.
#   bash deploy/local.sh            (ports: control plane 8090, data plane 8080)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE="$ROOT/.ax-local"
mkdir -p "$STATE"
cd "$ROOT"
export AX_LOG=${AX_LOG:-warn}
CP_PORT=${CP_PORT:-8090}
DP_PORT=${DP_PORT:-8080}
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM

echo "==> building (release)"
cargo build --release --quiet -p ax-dataplane -p ax-controlplane
echo "==> admin UI (ui/build.sh: wasm32 target and wasm-bindgen-cli are installed if missing)"
bash ui/build.sh
BIN="$ROOT/target/release"

echo "==> PostgreSQL"
if psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -tAc 'select 1' >/dev/null 2>&1; then
  PGURL_BASE="postgres://postgres@127.0.0.1:5432"
  psql -h 127.0.0.1 -U postgres -d postgres -tAc "select 1 from pg_database where datname = 'ax_local'" | grep -q 1 ||
    psql -h 127.0.0.1 -U postgres -d postgres -qc 'create database ax_local'
else
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  if [ -z "$PGBIN" ]; then
    echo "    installing Debian's postgresql package"; (apt-get update -qq && apt-get install -y -qq postgresql) >/dev/null
    PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  fi
  RUNAS=(); [ "$(id -u)" = 0 ] && RUNAS=(runuser -u postgres --)
  if [ ! -f "$STATE/pg/PG_VERSION" ]; then
    mkdir -p "$STATE/pg"; [ "$(id -u)" = 0 ] && chown postgres "$STATE/pg"
    "${RUNAS[@]}" "$PGBIN/initdb" -D "$STATE/pg" -U postgres --auth=trust >/dev/null
  fi
  "${RUNAS[@]}" "$PGBIN/pg_ctl" -D "$STATE/pg" -o "-p 5433 -k /tmp -c listen_addresses=127.0.0.1" -l "$STATE/pg.log" -w start >/dev/null
  PIDS+=("$(head -1 "$STATE/pg/postmaster.pid")")
  psql -h 127.0.0.1 -p 5433 -U postgres -d postgres -tAc "select 1 from pg_database where datname = 'ax_local'" | grep -q 1 ||
    psql -h 127.0.0.1 -p 5433 -U postgres -d postgres -qc 'create database ax_local'
  PGURL_BASE="postgres://postgres@127.0.0.1:5433"
fi
export DATABASE_URL="$PGURL_BASE/ax_local"

# A development master key, kept beside the stack (production: a secret store).
[ -f "$STATE/master.key" ] || (umask 077; head -c 32 /dev/urandom | base64 > "$STATE/master.key")
export AX_MASTER_KEY=$(cat "$STATE/master.key")
export AX_COOKIE_SECURE=0

echo "==> migrations, admin login"
"$BIN/ax-controlplane" migrate
[ -f "$STATE/admin.password" ] || (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' > "$STATE/admin.password")
AX_ADMIN_PASSWORD=$(cat "$STATE/admin.password") "$BIN/ax-controlplane" admin create admin --role admin >/dev/null

echo "==> control plane on 127.0.0.1:$CP_PORT"
"$BIN/ax-controlplane" serve --listen "127.0.0.1:$CP_PORT" --ui-dir ui/dist 2>"$STATE/controlplane.log" &
PIDS+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$CP_PORT/healthz" >/dev/null && break; sleep 0.1; done

echo "==> demo seed (only what is missing: an operator's changes stay)"
bash deploy/seed.sh "http://127.0.0.1:$CP_PORT" "$STATE"
[ -f "$STATE/node.token" ] || "$BIN/ax-controlplane" node create local-1 > "$STATE/node.token"

echo "==> data plane on 127.0.0.1:$DP_PORT"
AX_NODE_TOKEN=$(cat "$STATE/node.token") "$BIN/ax-dataplane" --control-plane "http://127.0.0.1:$CP_PORT" \
  --state-dir "$STATE/dataplane" --listen "127.0.0.1:$DP_PORT" 2>"$STATE/dataplane.log" &
PIDS+=($!)
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$DP_PORT/v1/models" -H "authorization: Bearer $(cat "$STATE/demo.key")" | grep -q chat-default && break
  sleep 0.1
done

cat <<MSG

ax is running.
  Admin UI:    http://127.0.0.1:$CP_PORT/            login: admin / $(cat "$STATE/admin.password")
  Admin API:   http://127.0.0.1:$CP_PORT/api/v1   (OpenAPI: /api/openapi.json)   login: admin / $(cat "$STATE/admin.password")
  Data plane:  http://127.0.0.1:$DP_PORT/v1      key: $(cat "$STATE/demo.key")
  Logs:        $STATE/*.log

  A chat:
  curl -s http://127.0.0.1:$DP_PORT/v1/chat/completions -H 'authorization: Bearer $(cat "$STATE/demo.key")' \\
       -H 'content-type: application/json' -d '{"model":"chat-default","messages":[{"role":"user","content":"Hello!"}]}'
  A tool call (the mock calls the tool it is offered):
  curl -s http://127.0.0.1:$DP_PORT/v1/chat/completions -H 'authorization: Bearer $(cat "$STATE/demo.key")' \\
       -H 'content-type: application/json' -d '{"model":"chat-default","messages":[{"role":"user","content":"Weather in Paris?"}],
         "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}'
  An embedding:
  curl -s http://127.0.0.1:$DP_PORT/v1/embeddings -H 'authorization: Bearer $(cat "$STATE/demo.key")' \\
       -H 'content-type: application/json' -d '{"model":"embed-default","input":"ax routes every request"}'

Ctrl-C stops it.
MSG
wait
