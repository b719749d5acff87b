-- The command outbox at restart (issue 21 item 3): a core that died between the commit of a
-- `command_issued` event and its publish re-sends it after restart, when no `command_result`
-- answers it (Store::load_unanswered_commands). That read looks up, per writable point, its
-- newest command and any answer after it; this partial index holds only those two kinds, so
-- the read costs a few index probes per point however long the control log grows.

CREATE INDEX control_event_commands_by_point ON control_event (point_id, seq)
  WHERE kind IN ('command_issued', 'command_result');
