-- The controller's first schema (issue 12). Portable between SQLite and PostgreSQL: TEXT and
-- BIGINT only, identifiers are UUIDv7 strings made by the controller, times are Unix millis.

-- Users and teams are both subjects: a token belongs to a subject, a pack to a team.
CREATE TABLE subjects (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

-- A user's role in a team: viewer, editor, approver or admin.
CREATE TABLE memberships (
    team_id TEXT NOT NULL REFERENCES subjects (id),
    user_id TEXT NOT NULL REFERENCES subjects (id),
    role TEXT NOT NULL,
    PRIMARY KEY (team_id, user_id)
);

-- API tokens, stored as the SHA-256 of the token: the token itself is shown once.
CREATE TABLE tokens (
    hash TEXT PRIMARY KEY,
    subject_id TEXT NOT NULL REFERENCES subjects (id),
    created_at BIGINT NOT NULL
);

-- A registered pack: a team's name for a line of revisions (RFC-0002:C-PACK-BASE).
CREATE TABLE packs (
    id TEXT PRIMARY KEY,
    team_id TEXT NOT NULL REFERENCES subjects (id),
    name TEXT NOT NULL,
    current_digest TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (team_id, name)
);

-- Every revision a pack has had, current and prior: each keeps its stored tree.
CREATE TABLE pack_revisions (
    pack_id TEXT NOT NULL REFERENCES packs (id),
    seq BIGINT NOT NULL,
    digest TEXT NOT NULL,
    delivered_bytes BIGINT NOT NULL,
    ignored TEXT NOT NULL,
    subject_id TEXT NOT NULL REFERENCES subjects (id),
    created_at BIGINT NOT NULL,
    PRIMARY KEY (pack_id, seq)
);
CREATE INDEX pack_revisions_digest ON pack_revisions (digest);

-- One row per change, with the subject that made it.
CREATE TABLE audit (
    id TEXT PRIMARY KEY,
    at BIGINT NOT NULL,
    subject_id TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    detail TEXT NOT NULL
);
