-- Launches and their runs (issue 12). A run is recorded, in state `running`, before it is
-- dispatched, so a controller that restarts resumes exactly the runs it was executing
-- (RFC-0002:C-PLAYBOOK-RESUME). `digest` is the pack the run was delivered (RFC-0002:C-PACK-BASE:
-- a launch records the digest it runs); `source` says how the launch named it; `request` is the
-- launch as accepted (parameters, settings, capabilities, ceilings), as JSON. `dispatches`
-- counts how often this controller handed the run to an engine: 1, plus 1 per resumption.
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    team_id TEXT NOT NULL REFERENCES subjects (id),
    subject_id TEXT NOT NULL REFERENCES subjects (id),
    digest TEXT NOT NULL,
    source TEXT NOT NULL,
    request TEXT NOT NULL,
    state TEXT NOT NULL,
    outcome TEXT,
    verdict TEXT,
    reason TEXT,
    dispatches BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    ended_at BIGINT
);
CREATE INDEX runs_team ON runs (team_id);
CREATE INDEX runs_state ON runs (state);
CREATE INDEX runs_digest ON runs (digest);
