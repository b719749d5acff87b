-- The order the core applied its commits in (issue 14: a derived reading is a function of the
-- log). The core runs up to `inflight_batches_max` commits at once, so the order transactions
-- commit in is not the order the core folds their rows in; the core applies commit reports in
-- batch order, and each row records its batch's place in that order:
--   applied = core_epoch * 2^32 + batch id (the core's counter, from 1 at every start).
-- Epochs only grow and every write is fenced by the current one, so `applied` orders every row
-- the way the cores that wrote them applied them; within one batch the core folds rows in
-- (observed_at, ingested_at, key) order. Restart step 5 replays derived-point inputs in this
-- order to derive again exactly the readings a crash lost. NULL for rows written before this
-- migration (they sort first). Adding a nullable column without a default rewrites nothing.
ALTER TABLE observation_measurement ADD COLUMN applied bigint;
ALTER TABLE observation_state ADD COLUMN applied bigint;
ALTER TABLE observation_diagnostic ADD COLUMN applied bigint;
