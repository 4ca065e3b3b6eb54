-- Operators who sign in through the OpenID Connect provider: `sso_subject` is "<issuer> <subject>",
-- how a returning operator is found; such an operator has no usable password ('!sso').
ALTER TABLE operators ADD COLUMN sso_subject text UNIQUE;
