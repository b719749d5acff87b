-- Sentinel schema, version 2: one row per acquisition of the single-writer lock and the cold
-- start that followed it (core runtime spec, "Restart time" and exit criteria: "Cold-start
-- duration, per startup step ... to measure and record rather than assert").
--
-- The row is inserted by the acquisition itself, on the lock session and in the same
-- statement as the epoch increment, so every epoch that was ever handed out has a row naming
-- the session that held it; `ready_at` and `steps` are filled in by a fenced write once the
-- consumer is bound. A row whose `ready_at` stays NULL is a start that failed after taking
-- the lock.
CREATE TABLE core_start (
  epoch            integer     PRIMARY KEY CHECK (epoch > 0),
  started_at       timestamptz NOT NULL,     -- when the lock was acquired (the server's clock)
  backend_pid      integer     NOT NULL,     -- the lock session's backend pid
  application_name text        NOT NULL,     -- the lock session's application_name
  ready_at         timestamptz,              -- when the startup timings were recorded
  -- The startup steps in the order they ran: [{"step": text, "duration_us": bigint}, ...].
  steps            jsonb       CHECK (steps IS NULL OR jsonb_typeof(steps) = 'array')
);
