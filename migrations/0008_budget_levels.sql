-- Budgets at every level: a key's own budgets and per-alias limits, and groups of tenants
-- (an organization, a department) whose budgets pool their members' spend. A tenant names its
-- groups in its spec (`groups`).
ALTER TABLE api_keys ADD COLUMN alias_limits jsonb, ADD COLUMN budgets jsonb;

CREATE TABLE tenant_groups (
    id         text PRIMARY KEY,
    spec       jsonb NOT NULL,                   -- budgets (protocol GroupSpec)
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
