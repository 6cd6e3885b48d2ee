-- Engines outside the controller (issues 14 and 17; docs/controller.md, "Engines outside the
-- controller"). `executor` says who executes a run: `local` (this controller's embedded engine,
-- resumed by it after a restart) or `remote` (an engine elsewhere, a Kubernetes Job's pod or a
-- `plan run` on another machine, which reaches the controller only by requests it initiates;
-- this controller never executes nor resumes it).
ALTER TABLE runs ADD COLUMN executor TEXT NOT NULL DEFAULT 'local';

-- Run tokens: a bearer token scoped to one remote run, stored as its SHA-256 like an API token
-- (the token itself is handed once, to whoever dispatches the run). It authenticates only that
-- run's engine, for that run's decisions and session log, and only while the run is recorded
-- `running`.
CREATE TABLE run_tokens (
    hash TEXT PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (id),
    created_at BIGINT NOT NULL
);
CREATE INDEX run_tokens_run ON run_tokens (run_id);
