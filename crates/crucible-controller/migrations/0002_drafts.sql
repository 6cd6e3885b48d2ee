-- Drafts (RFC-0002:C-PACK-BASE): a team's named line of saved versions. `latest` is the last
-- version number given out: saving takes the next one with one UPDATE … RETURNING, which both
-- backends serialize on the row, so concurrent saves of one draft get distinct versions.
CREATE TABLE drafts (
    id TEXT PRIMARY KEY,
    team_id TEXT NOT NULL REFERENCES subjects (id),
    name TEXT NOT NULL,
    latest BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (team_id, name)
);

-- One saved version: its flattened tree's digest and, when saved on a base, the provenance
-- (base digest, the overlay's own digest, every overlay path and whether it replaced a base
-- file, as JSON). Only `digest` keeps a stored tree.
CREATE TABLE draft_versions (
    draft_id TEXT NOT NULL REFERENCES drafts (id),
    version BIGINT NOT NULL,
    digest TEXT NOT NULL,
    base_digest TEXT,
    overlay_digest TEXT,
    overlay_paths TEXT,
    delivered_bytes BIGINT NOT NULL,
    ignored TEXT NOT NULL,
    subject_id TEXT NOT NULL REFERENCES subjects (id),
    created_at BIGINT NOT NULL,
    PRIMARY KEY (draft_id, version)
);
CREATE INDEX draft_versions_digest ON draft_versions (digest);
