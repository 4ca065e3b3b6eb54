-- Versions are stored once, as the exact JSON text that was validated and is pushed
-- (`document_json`); the JSONB copy doubled the write of every commit (3 MB for a 10,000-alias
-- configuration) and is no longer written. lz4 compresses the text faster than the default pglz
-- where the server supports it.
ALTER TABLE config_versions ALTER COLUMN document DROP NOT NULL;
DO $$
BEGIN
    ALTER TABLE config_versions ALTER COLUMN document_json SET COMPRESSION lz4;
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'lz4 is not available; document_json keeps the default compression';
END $$;
