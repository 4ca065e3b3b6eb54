-- Usage records the database refused (or that could not be read), kept with the reason instead of
-- failing the node's whole batch: one bad record never stops a node's metering. `line` is the
-- record as received (bytes: it may hold what text columns refuse); `digest` (sha256 of node and
-- line) makes a batch offered again after a crash add nothing twice.
CREATE TABLE usage_dead_letters (
    id          bigserial PRIMARY KEY,
    node        text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    request_id  text,
    reason      text NOT NULL,
    line        bytea NOT NULL,
    digest      text NOT NULL UNIQUE
);
CREATE INDEX usage_dead_letters_node ON usage_dead_letters (node, received_at);

-- One row per open websocket from a data plane to a control-plane replica, so every replica can
-- tell whether a node is connected (to any replica) and how many processes share its token. A row
-- whose last_seen is old belongs to a replica that died; it stops counting after 30 s.
CREATE TABLE node_connections (
    id           text PRIMARY KEY,
    node         text NOT NULL REFERENCES data_planes(id) ON DELETE CASCADE,
    replica      text NOT NULL,
    peer         text NOT NULL,
    connected_at timestamptz NOT NULL DEFAULT now(),
    last_seen    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX node_connections_node ON node_connections (node, last_seen);

-- Login throttling takes its slot before the password is checked: a row is written first (as a
-- failure) and removed when the password was right.
CREATE INDEX login_failures_at ON login_failures (at);
