-- The request explorer (GET /api/v1/requests) lists requests newest first, narrowed by tenant, key
-- or failure; a request id is found through the primary key, the rest walk usage_events_started.
CREATE INDEX usage_events_tenant_started ON usage_events (tenant, started_at);
CREATE INDEX usage_events_key_started ON usage_events (key_id, started_at);
CREATE INDEX usage_events_failed ON usage_events (started_at) WHERE error_code IS NOT NULL;
