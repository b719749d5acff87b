-- Sentinel schema, version 12: each acquisition's start identity (issue 25 item 3).
--
-- A core announces a random start identity to its drivers with its epoch, so that two starts
-- at one epoch (an epoch repeated after a database failover that lost the increment) can be
-- told apart on the bus. The row of the acquisition records it beside the epoch, written with
-- the cold-start timings (fenced), so the log says which start held each epoch. NULL for a
-- start that recorded none (a maintenance command, or a core from before identities). At most
-- 2^53 - 1: JSON's exact integers, as on the wire.
ALTER TABLE core_start
  ADD COLUMN core_start bigint CHECK (core_start IS NULL OR core_start BETWEEN 1 AND 9007199254740991);
