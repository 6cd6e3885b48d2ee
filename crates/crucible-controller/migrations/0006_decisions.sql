-- Human decisions (issue 14; RFC-0002:C-HUMAN-DECISION, C-DECISION-EVIDENCE): at most one request
-- per run and route. `request` is what the run's engine opened it with (its questions, evidence,
-- digest, times and note bound, as JSON); `expires_ms` is its `expires_at` in milliseconds, kept
-- from the first open. `state` is `open`, `answered` or `withdrawn` (an open request past
-- `expires_ms` reads as expired); `answer` is the first accepted answer, as JSON, and
-- `answered_by` its subject.
CREATE TABLE decisions (
    run_id TEXT NOT NULL REFERENCES runs (id),
    route TEXT NOT NULL,
    request TEXT NOT NULL,
    digest TEXT NOT NULL,
    expires_ms BIGINT NOT NULL,
    state TEXT NOT NULL,
    answer TEXT,
    answered_by TEXT REFERENCES subjects (id),
    created_at BIGINT NOT NULL,
    PRIMARY KEY (run_id, route)
);
CREATE INDEX decisions_state ON decisions (state);
