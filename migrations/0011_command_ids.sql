-- The operator's reads of the command plane (issue 21 item 10): `sentinel why COMMAND_ID` finds
-- every control event a request or command id names (its claim, its refusal, the command, its
-- answers, timeouts and verification), and `sentinel desired` finds each writable point's open
-- claims. Both would scan the whole log, which is kept forever, without these partial indexes.

CREATE INDEX control_event_by_command_id ON control_event ((payload->>'command_id'), seq)
  WHERE payload ? 'command_id';

CREATE INDEX control_event_claims_by_point ON control_event (point_id, (payload->>'holder'), seq)
  WHERE kind IN ('claim_set', 'claim_released');
