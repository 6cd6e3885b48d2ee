-- Asks (RFC-0002:C-ASKS, the receiving side): one row per ask a run emitted, as proposed (its
-- run, emitting task, position `seq` in the run's emission order, key, workflow and parameters
-- as JSON) and as decided: `state` is `proposed` (not decided yet), `rejected` (no such pack,
-- or parameters outside its schema), `duplicate` (`duplicate_of` the ask that holds the key),
-- `held` (for a person), `admitted` (`launched_run`), `refused` (admitted, but the launch was
-- refused), or `dismissed` (by a person); `reason` says why. `decided_by` is the person who
-- admitted or dismissed it (NULL when the operator's policy decided).
CREATE TABLE asks (
    id TEXT PRIMARY KEY,
    team_id TEXT NOT NULL REFERENCES subjects (id),
    run_id TEXT NOT NULL REFERENCES runs (id),
    task TEXT NOT NULL,
    seq BIGINT NOT NULL,
    ask_key TEXT NOT NULL,
    workflow TEXT NOT NULL,
    params TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT,
    duplicate_of TEXT,
    launched_run TEXT,
    decided_by TEXT REFERENCES subjects (id),
    created_at BIGINT NOT NULL,
    decided_at BIGINT,
    UNIQUE (run_id, seq)
);
CREATE INDEX asks_key ON asks (team_id, ask_key);
CREATE INDEX asks_state ON asks (team_id, state);
