-- The pushed document, kept as the exact JSON text that was validated, so pushing a version is a
-- read of text (no JSONB decode and re-encode of a multi-megabyte document per push).
ALTER TABLE config_versions ADD COLUMN document_json text;
