-- Registry-trusted dispatch targets marked through the API (issue 17, RFC-0002:C-PACK-PUBLISH:
-- a target is registry-trusted when the platform administrators own it or one of them marks
-- it). One row per target a platform admin last marked (`trusted` 1) or unmarked (0), with who
-- and when; the change itself is in the audit log. A target whose entry in the operator's
-- targets file sets `registry_trusted` is decided by the file and cannot be marked; a target
-- with neither is not trusted. Rows of targets no longer configured are kept and apply again
-- if the name comes back.
CREATE TABLE target_trust (
    name TEXT PRIMARY KEY,
    trusted BIGINT NOT NULL,
    subject_id TEXT NOT NULL REFERENCES subjects (id),
    updated_at BIGINT NOT NULL
);
