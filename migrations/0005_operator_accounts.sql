-- Operator accounts managed from the admin API: an operator can be disabled (its sessions end at
-- once and it cannot log in), and one given a generated one-time password must choose its own
-- before it may do anything else.
ALTER TABLE operators
    ADD COLUMN disabled             boolean NOT NULL DEFAULT false,
    ADD COLUMN must_change_password boolean NOT NULL DEFAULT false;
