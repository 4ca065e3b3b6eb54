-- The overview's recent traffic (GET /reports/recent) reads the last minutes of usage_events by
-- time; the primary key (request_id, started_at) cannot serve that range.
CREATE INDEX usage_events_started ON usage_events (started_at);
