-- The request explorer's other filters: a search by alias, by upstream or by an error code walks
-- its own index newest first. Without them, a filter that matches nothing walked the whole time
-- index (3 million rows: 0.7 s for an alias, docs/BENCHMARKS.md); searches are also cut off
-- after 3 s (`search_too_broad`) for combinations no index serves.
CREATE INDEX usage_events_alias_started ON usage_events (alias, started_at);
CREATE INDEX usage_events_upstream_started ON usage_events (upstream, started_at);
CREATE INDEX usage_events_error_started ON usage_events (error_code, started_at) WHERE error_code IS NOT NULL;
