-- Restart from a snapshot, not from the start of the log (issue 21 items 5 and 6).
--
-- Open claims: each point_desired row also holds the point's open claims after the change it
-- records (a JSON array, at most 64, one per holder: holder, band, priority, value, since and
-- until in UTC microseconds), written in the same fenced transaction as the claim's control
-- event (Store::write_arbitration), so the row is the claims' snapshot as of control_seq and
-- nothing later in the log changes them. Rows written before this migration hold none (the
-- claims they had were dropped by the restart that preceded it, as they always were).
ALTER TABLE point_desired ADD COLUMN claims jsonb NOT NULL DEFAULT '[]'::jsonb;

-- Restart step 4's replay reads each point's newest control event (Store::load_control_heads),
-- one probe per point however long the log, rather than the log from the lowest watermark.
CREATE INDEX control_event_by_point ON control_event (point_id, seq);

-- The open verifications at restart (Store::load_open_verifications): beside the command
-- index of 0009, the verdicts by point, so "no verdict after the result" is a probe too.
CREATE INDEX control_event_verdicts_by_point ON control_event (point_id, seq)
  WHERE kind IN ('command_verified', 'command_diverged');
