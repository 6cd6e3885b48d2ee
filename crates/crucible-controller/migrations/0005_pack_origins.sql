-- Where each pack revision came from (RFC-0002:C-PACK-BASE): `registered` (an uploaded tree),
-- `imported` (another controller's delivery archive) or `draft` (published from a draft
-- version; `source` names it as `draft:NAME version N`). A revision published from a version
-- saved on a base carries that version's provenance, as draft_versions records it; a
-- registered or imported revision never names a base.
ALTER TABLE pack_revisions ADD COLUMN origin TEXT NOT NULL DEFAULT 'registered';
ALTER TABLE pack_revisions ADD COLUMN source TEXT;
ALTER TABLE pack_revisions ADD COLUMN base_digest TEXT;
ALTER TABLE pack_revisions ADD COLUMN overlay_digest TEXT;
ALTER TABLE pack_revisions ADD COLUMN overlay_paths TEXT;
