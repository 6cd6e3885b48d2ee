-- Sharing a pack with another team (issue 12, docs/decisions.md): one row per (pack, team) the
-- pack's own team shared it with, read-only. The receiving team's members read the pack (every
-- revision, current and prior) and may launch it; nothing else of the owning team's is visible
-- to them. Removing the row (unshare) makes the pack "not found" to them again.
CREATE TABLE pack_shares (
    pack_id TEXT NOT NULL REFERENCES packs (id),
    team_id TEXT NOT NULL REFERENCES subjects (id),
    subject_id TEXT NOT NULL REFERENCES subjects (id),
    created_at BIGINT NOT NULL,
    PRIMARY KEY (pack_id, team_id)
);
CREATE INDEX pack_shares_team ON pack_shares (team_id);
