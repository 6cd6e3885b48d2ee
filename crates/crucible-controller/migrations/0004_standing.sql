-- Standing launches (issue 13; RFC-0002:C-RUN-HISTORY): a team's launch that fires on a schedule
-- or by hand, each firing an ordinary launch. `pack` is a digest (pinned) or `draft:NAME` (the
-- draft's latest saved version that compiles at each firing: never stored as a digest here,
-- RFC-0002:C-PACK-BASE). `request` is the launch every firing makes (parameters, settings,
-- capabilities, both ceilings), as JSON. `cron` and `timezone` are the schedule (NULL cron:
-- fired by hand only); `cursor_at` is the schedule position (Unix millis on the controller's
-- clock): the scheduled times after it are the ones not yet considered. `daily_max_cost` is the
-- series' spend cap per calendar day in `timezone`, in micro-USD (NULL: none). A deleted
-- standing launch keeps its row (its runs still name it), and its name is free again.
CREATE TABLE standing (
    id TEXT PRIMARY KEY,
    team_id TEXT NOT NULL REFERENCES subjects (id),
    subject_id TEXT NOT NULL REFERENCES subjects (id),
    name TEXT NOT NULL,
    pack TEXT NOT NULL,
    request TEXT NOT NULL,
    cron TEXT,
    timezone TEXT NOT NULL,
    daily_max_cost BIGINT,
    paused BIGINT NOT NULL,
    cursor_at BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    deleted_at BIGINT
);
CREATE UNIQUE INDEX standing_name ON standing (team_id, name) WHERE deleted_at IS NULL;

-- Each firing and what became of it: `launched` (its run), `skipped` (a run of the series was
-- still running, or the daily spend cap was reached) or `refused` (the launch was refused, as
-- POST /v1/launches would refuse it), with why. `trigger` is `schedule`, `catch-up` (the
-- controller was down over one or more scheduled times: fired once) or `manual`; `scheduled_for`
-- is the scheduled time it stands for, `missed` how many scheduled times it stands for.
CREATE TABLE firings (
    id TEXT PRIMARY KEY,
    standing_id TEXT NOT NULL REFERENCES standing (id),
    at BIGINT NOT NULL,
    trigger_kind TEXT NOT NULL,
    scheduled_for BIGINT,
    missed BIGINT NOT NULL,
    result TEXT NOT NULL,
    run_id TEXT,
    reason TEXT
);
CREATE INDEX firings_standing ON firings (standing_id);

-- A run a standing launch fired belongs to its series; any other run to none.
ALTER TABLE runs ADD COLUMN series_id TEXT;
CREATE INDEX runs_series ON runs (series_id);
