-- Sentinel schema, version 1 (ingest spec, "Schema", "Projection", "The registry is versioned
-- data"; DESIGN.md §3). Plain PostgreSQL 15: TimescaleDB hypertables become native declarative
-- range partitions by day on ingested_at. Only the store adapter (io/src/store/postgres.rs)
-- names the observation tables.

CREATE TYPE quality AS ENUM (
  'unknown','restored','live','stale','unavailable','bad','assumed');

-- One table per retention class, identical columns (ingest spec, "One hypertable per
-- retention class"). Partitioned on ingested_at, the bus-accept time, so partitions close
-- cleanly and a redelivery lands on the same unique-index entry.
CREATE TABLE observation_measurement (
  ingested_at       timestamptz  NOT NULL,   -- bus-accept time, never the core's clock
  point_id          text         NOT NULL,
  observed_at       timestamptz  NOT NULL,
  device_time       timestamptz,

  value_num         double precision,        -- canonical
  value_bool        boolean,
  value_text        text,                    -- canonical enum member / string
  native_num        double precision,
  native_text       text,                    -- raw device representation

  unit_native       text,
  quality           quality      NOT NULL,
  reason            text,
  detail            jsonb,

  changed           boolean      NOT NULL,
  registry_version  integer      NOT NULL,
  driver_instance   text         NOT NULL,
  source_epoch      integer      NOT NULL,
  source_seq        bigint       NOT NULL,
  skew_flagged      boolean      NOT NULL DEFAULT false
) PARTITION BY RANGE (ingested_at);

CREATE TABLE observation_state (LIKE observation_measurement INCLUDING DEFAULTS)
  PARTITION BY RANGE (ingested_at);
CREATE TABLE observation_diagnostic (LIKE observation_measurement INCLUDING DEFAULTS)
  PARTITION BY RANGE (ingested_at);

-- Defined on the parents so every partition inherits them. A unique index on a partitioned
-- table must contain the partition key, hence ingested_at in the dedup key (ingest spec,
-- "Where ingested_at comes from").
CREATE UNIQUE INDEX observation_measurement_key
  ON observation_measurement (driver_instance, source_epoch, source_seq, ingested_at);
CREATE INDEX observation_measurement_point
  ON observation_measurement (point_id, observed_at DESC);
CREATE UNIQUE INDEX observation_state_key
  ON observation_state (driver_instance, source_epoch, source_seq, ingested_at);
CREATE INDEX observation_state_point
  ON observation_state (point_id, observed_at DESC);
CREATE UNIQUE INDEX observation_diagnostic_key
  ON observation_diagnostic (driver_instance, source_epoch, source_seq, ingested_at);
CREATE INDEX observation_diagnostic_point
  ON observation_diagnostic (point_id, observed_at DESC);

-- Creates the daily partitions of all three class tables for [from_day, from_day + days).
-- Idempotent, and serialised by a transaction-scoped advisory lock so two concurrent callers
-- cannot race on the same CREATE. Lives in SQL so the adapter never builds DDL strings.
-- Bounds are UTC midnights whatever the session's TimeZone. Returns how many it created.
CREATE FUNCTION sentinel_ensure_partitions(from_day date, days integer)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
  cls      text;
  d        date;
  part     text;
  created  integer := 0;
BEGIN
  IF days IS NULL OR days < 0 OR days > 400 THEN
    RAISE EXCEPTION 'sentinel_ensure_partitions: days must be within 0..400, got %', days;
  END IF;
  FOR i IN 0 .. days - 1 LOOP
    d := from_day + i;
    FOREACH cls IN ARRAY ARRAY['measurement', 'state', 'diagnostic'] LOOP
      part := format('observation_%s_p%s', cls, to_char(d, 'YYYYMMDD'));
      IF to_regclass(part) IS NULL THEN
        -- Key: 'sentinel' partitions; any constant distinct from the single-writer lock.
        PERFORM pg_advisory_xact_lock(7310598112409645057);
        IF to_regclass(part) IS NULL THEN
          EXECUTE format(
            'CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
            part, 'observation_' || cls,
            to_char(d, 'YYYY-MM-DD') || ' 00:00:00+00',
            to_char(d + 1, 'YYYY-MM-DD') || ' 00:00:00+00');
          created := created + 1;
        END IF;
      END IF;
    END LOOP;
  END LOOP;
  RETURN created;
END;
$$;

-- For ad-hoc querying only; hot paths resolve the class and query its table.
CREATE VIEW observation AS
  SELECT 'measurement'::text AS retention_class, * FROM observation_measurement
  UNION ALL
  SELECT 'state'::text, * FROM observation_state
  UNION ALL
  SELECT 'diagnostic'::text, * FROM observation_diagnostic;

CREATE TABLE control_event (
  seq              bigserial   PRIMARY KEY,
  occurred_at      timestamptz NOT NULL,
  kind             text        NOT NULL,   -- quality_changed, command_*, availability, assignment, reprocess
  point_id         text,
  subject_key      text,                   -- driver_instance / device / component
  principal        text        NOT NULL,   -- who caused it
  core_epoch       integer     NOT NULL,   -- which core instance wrote it
  payload          jsonb       NOT NULL,
  registry_version integer     NOT NULL
);

CREATE TABLE registry_version (
  version      integer     PRIMARY KEY,
  loaded_at    timestamptz NOT NULL,
  git_sha      text        NOT NULL,
  content_hash text        NOT NULL
);

-- `canonical` keeps the exact canonical text that was hashed: jsonb normalises key order,
-- spacing and numbers, so it cannot give back the bytes the hash was computed over. The jsonb
-- column is for querying.
CREATE TABLE descriptor_blob (
  hash       text  PRIMARY KEY,          -- hex SHA-256 of the canonicalised descriptor
  descriptor jsonb NOT NULL,
  canonical  text  NOT NULL
);

CREATE TABLE point_descriptor (
  version   integer NOT NULL REFERENCES registry_version,
  point_id  text    NOT NULL,
  hash      text    NOT NULL REFERENCES descriptor_blob,
  PRIMARY KEY (version, point_id)
);

-- The projection's checkpoint (ingest spec, "Projection"), plus the key of the row that set
-- observed_at so the invariant-5 order key (observed_at, ingested_at, key) is complete.
CREATE TABLE point_state (
  point_id        text PRIMARY KEY,
  value_num       double precision,
  value_bool      boolean,
  value_text      text,
  quality         quality     NOT NULL,
  reason          text,
  observed_at     timestamptz,
  ingested_at     timestamptz,
  changed_at      timestamptz,          -- last value change past deadband
  quality_since   timestamptz NOT NULL,
  watermark_seq   bigint,               -- last control_event applied
  driver_instance text,
  source_epoch    integer,
  source_seq      bigint
);

-- Messages that could not become rows (stages 2, 4, 5). Keyed by the stream sequence, which is
-- identical on every redelivery, so a quarantined message is stored exactly once.
CREATE TABLE quarantine (
  stream        text        NOT NULL,
  stream_seq    bigint      NOT NULL,
  ingested_at   timestamptz NOT NULL,
  subject       text        NOT NULL,
  reason        text        NOT NULL,
  detail        text,
  payload       bytea,
  payload_bytes integer,
  core_epoch    integer     NOT NULL,
  recorded_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (stream, stream_seq)
);

-- The core epoch (core runtime spec, "single writer"): one row, incremented only on lock
-- acquisition; every write transaction verifies it under FOR SHARE.
CREATE TABLE core_epoch (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  epoch     integer NOT NULL CHECK (epoch >= 0)
);
INSERT INTO core_epoch (singleton, epoch) VALUES (true, 0);
