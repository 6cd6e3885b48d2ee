-- Kubernetes dispatch (issue 17). `target` is the Kubernetes target a run was dispatched to
-- (NULL: the controller's own executor, `local`). `dispatched_at` is set once every object of
-- the run exists in the cluster: from then on a restarted controller only watches its Job (a
-- Job gone is the run's failure, never a reason to create it again). `cleaned_at` is set once
-- the run's objects were deleted after it ended.
ALTER TABLE runs ADD COLUMN target TEXT;
ALTER TABLE runs ADD COLUMN dispatched_at BIGINT;
ALTER TABLE runs ADD COLUMN cleaned_at BIGINT;
