-- OCI publication (RFC-0002:C-PACK-PUBLISH): one row per published or attempted pack digest.
-- A registered, imported or draft-graduated revision whose digest has no row here is
-- unpublished. `registry` is the repository URL the row was made against: a controller started
-- with another registry, or none, deletes the rows of any other (a reset to unpublished).
-- `state` is pending (being tried; `last_error` the last transient failure), published
-- (`manifest_digest`, `layers`, and for a pack on a base `base_layer_shared`: 1 when the base's
-- files are the first layer, 0 when the base was no longer held and the pack went as one), or
-- failed (`last_error`, permanent: retried only when an editor asks).
CREATE TABLE publications (
    digest TEXT PRIMARY KEY,
    registry TEXT NOT NULL,
    state TEXT NOT NULL,
    manifest_digest TEXT,
    layers BIGINT,
    base_layer_shared BIGINT,
    last_error TEXT,
    attempts BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
