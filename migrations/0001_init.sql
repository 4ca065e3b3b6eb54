-- ax control plane schema. Times are timestamptz; money is integer micro-USD (bigint).

CREATE TABLE operators (
    id            bigserial PRIMARY KEY,
    username      text NOT NULL UNIQUE,
    password_hash text NOT NULL,                 -- argon2id PHC string
    role          text NOT NULL CHECK (role IN ('admin', 'operator', 'finance')),
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE sessions (
    token_digest text PRIMARY KEY,               -- sha256 of the cookie value; the value is never stored
    operator_id  bigint NOT NULL REFERENCES operators(id) ON DELETE CASCADE,
    csrf_token   text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
CREATE INDEX sessions_expiry ON sessions (expires_at);

-- Failed logins, for throttling (per username and per client address).
CREATE TABLE login_failures (
    id       bigserial PRIMARY KEY,
    username text NOT NULL,
    client   text NOT NULL,
    at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX login_failures_user ON login_failures (username, at);
CREATE INDEX login_failures_client ON login_failures (client, at);

CREATE TABLE tenants (
    id         text PRIMARY KEY,
    spec       jsonb NOT NULL,                   -- allowed_aliases, limits, budgets (protocol TenantSpec minus keys)
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    id         text PRIMARY KEY,
    tenant_id  text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    digest     text NOT NULL UNIQUE,             -- hex sha256 of the key; the key itself is never stored
    prefix     text NOT NULL,                    -- first characters, to recognise a key in lists
    status     text NOT NULL CHECK (status IN ('active', 'revoked')),
    expires_at timestamptz,
    limits     jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);

CREATE TABLE upstreams (
    name           text PRIMARY KEY,
    spec           jsonb NOT NULL,               -- provider, base_url, timeouts, limits, ... (no key, no models)
    key_ciphertext bytea,                        -- AES-256-GCM(master key #key_id, upstream API key)
    key_nonce      bytea,
    key_id         text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE upstream_models (
    upstream text NOT NULL REFERENCES upstreams(name) ON DELETE CASCADE,
    name     text NOT NULL,
    spec     jsonb NOT NULL,                     -- context window, capabilities, prices
    PRIMARY KEY (upstream, name)
);

CREATE TABLE routes (
    alias      text PRIMARY KEY,
    spec       jsonb NOT NULL,                   -- strategy, fallbacks, timeouts, failover, limits (no candidates)
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE route_candidates (
    alias    text NOT NULL REFERENCES routes(alias) ON DELETE CASCADE,
    position int NOT NULL,
    upstream text NOT NULL,
    model    text NOT NULL,
    weight   int NOT NULL CHECK (weight >= 0),
    priority int NOT NULL DEFAULT 0,
    enabled  boolean NOT NULL DEFAULT true,
    PRIMARY KEY (alias, position)
);

-- Every committed change is a version: the compiled document (upstream keys left out), its hash.
CREATE TABLE config_versions (
    version      bigint PRIMARY KEY,
    content_hash text NOT NULL,
    document     jsonb NOT NULL,
    author       text NOT NULL,
    summary      text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE data_planes (
    id              text PRIMARY KEY,
    token_digest    text NOT NULL UNIQUE,
    applied_version bigint,
    last_error      text,
    last_seen       timestamptz,
    health          jsonb,
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE audit_log (
    id       bigserial PRIMARY KEY,
    operator text NOT NULL,
    action   text NOT NULL,
    target   text NOT NULL,
    before   jsonb,
    after    jsonb,
    at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_log_at ON audit_log (at DESC);

-- Usage: one row per request, idempotent on request id. Partitioned by month (retention = drop a
-- partition); the partition key must be in the primary key, and a record's started_at never changes.
CREATE TABLE usage_events (
    request_id      text NOT NULL,
    started_at      timestamptz NOT NULL,
    tenant          text NOT NULL,
    key_id          text NOT NULL,
    alias           text NOT NULL,
    upstream        text NOT NULL,
    model           text NOT NULL,
    status          int NOT NULL,
    error_code      text,
    prompt_tokens   bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    cached_tokens   bigint NOT NULL,
    cache_write_tokens bigint NOT NULL,
    cost_micro_usd  bigint NOT NULL,
    latency_ms      bigint NOT NULL,
    record          jsonb NOT NULL,              -- the whole record, as the data plane wrote it
    node            text NOT NULL,
    PRIMARY KEY (request_id, started_at)
) PARTITION BY RANGE (started_at);
CREATE TABLE usage_events_default PARTITION OF usage_events DEFAULT;

-- Daily rollups, maintained in the same transaction as the insert; reports read these.
CREATE TABLE usage_daily (
    day               date NOT NULL,
    tenant            text NOT NULL,
    alias             text NOT NULL,
    model             text NOT NULL,
    key_id            text NOT NULL,
    requests          bigint NOT NULL,
    errors            bigint NOT NULL,
    prompt_tokens     bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    cached_tokens     bigint NOT NULL,
    cache_write_tokens bigint NOT NULL,
    cost_micro_usd    bigint NOT NULL,
    PRIMARY KEY (day, tenant, alias, model, key_id)
);
CREATE INDEX usage_daily_tenant ON usage_daily (tenant, day);
