-- Sentinel schema, version 19: the record of packed hot days (issue 24 item 1, disk;
-- BENCHMARKS.md "The hot row's bytes: index layout and packing" and "Packing a closed hot day").
--
-- A daily partition filled in ingest order has both B-trees about half full (the point index
-- 38.5 B a row, the dedup key 70.9 B); once its day is closed and out of the stream's reach it
-- takes almost no inserts, and `REINDEX TABLE CONCURRENTLY` packs both. In PostgreSQL 15 that
-- statement runs only outside a transaction and a function and only as the table's owner, so
-- it is not a store operation of the core (whose writer role owns nothing) but an owner's
-- command, `sentinel db pack`, run by a daily timer (ops/systemd/sentinel-pack.timer). It
-- changes no row: every read answers the same before and after.
--
-- `hot_day_pack` is what it packed: one row per partition, replaced when the partition is
-- packed again. `writes` is the partition's count of inserted and updated tuples
-- (`pg_stat_get_tuples_inserted` + `pg_stat_get_tuples_updated`) read before the rebuild: a
-- partition whose count has moved since (a late row, a reprocess, a statistics reset) is due
-- again; one whose count has not is left alone, so the command is idempotent. Only the owner
-- writes the table (the command deletes the rows of partitions that no longer exist, compacted
-- days' included, so it holds at most the hot partitions); both roles read it.

CREATE TABLE hot_day_pack (
  partition text PRIMARY KEY CHECK (partition ~ '^observation_(measurement|state|diagnostic)_p[0-9]{8}$'),
  day timestamptz NOT NULL,
  packed_at timestamptz NOT NULL,
  rows bigint NOT NULL CHECK (rows >= 0),
  writes bigint NOT NULL CHECK (writes >= 0),
  heap_bytes bigint NOT NULL CHECK (heap_bytes >= 0),
  index_bytes_before bigint NOT NULL CHECK (index_bytes_before >= 0),
  index_bytes_after bigint NOT NULL CHECK (index_bytes_after >= 0),
  duration_ms bigint NOT NULL CHECK (duration_ms >= 0)
);

-- Whoever reads the class tables reads the record, so a database upgrades without granting
-- again.
DO $$
DECLARE
  grantee text;
BEGIN
  FOR grantee IN
    SELECT DISTINCT a.grantee::regrole::text FROM pg_class c, aclexplode(c.relacl) a
    WHERE c.oid = 'observation_measurement'::regclass AND a.privilege_type = 'SELECT'
      AND a.grantee <> 0 AND a.grantee <> c.relowner
  LOOP
    EXECUTE format('GRANT SELECT ON hot_day_pack TO %s', grantee);
  END LOOP;
END;
$$;

-- The grants list of 0016 with the pack record, which both roles read (`sentinel storage` shows
-- packed days; neither writes it).
CREATE OR REPLACE FUNCTION sentinel_apply_grants(writer text, reader text)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
  schema_name text := current_schema();
BEGIN
  IF writer IS NULL OR reader IS NULL OR writer = reader THEN
    RAISE EXCEPTION 'sentinel_apply_grants: the writer and the reader must be two named roles';
  END IF;
  EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I, %I', schema_name, writer, reader);

  EXECUTE format('GRANT SELECT, INSERT ON observation_measurement, observation_state, '
                 'observation_diagnostic, quarantine, control_event, descriptor_blob, '
                 'point_descriptor, point_key, instance_key TO %I', writer);
  EXECUTE format('GRANT SELECT, INSERT, UPDATE ON registry_version, point_state, core_start TO %I',
                 writer);
  EXECUTE format('GRANT SELECT, UPDATE ON core_epoch TO %I', writer);
  EXECUTE format('GRANT USAGE ON SEQUENCE control_event_seq_seq TO %I', writer);
  EXECUTE format('GRANT SELECT ON observation, observation_measurement_named, observation_state_named, '
                 'observation_diagnostic_named, _sqlx_migrations TO %I', writer);
  EXECUTE format('GRANT SELECT ON observation_measurement_compact, observation_state_compact, '
                 'observation_diagnostic_compact, observation_measurement_compacted, '
                 'observation_state_compacted, observation_diagnostic_compacted, observation_measurement_all, '
                 'observation_state_all, observation_diagnostic_all TO %I, %I', writer, reader);
  EXECUTE format('GRANT SELECT ON rollup_1m_compact, rollup_1m_compact_mask, rollup_1m_compacted, '
                 'rollup_1m_all TO %I, %I', writer, reader);
  EXECUTE format('GRANT SELECT ON hot_day_pack TO %I, %I', writer, reader);
  EXECUTE format('GRANT EXECUTE ON FUNCTION sentinel_ensure_partitions(date, integer) TO %I', writer);
  EXECUTE format('GRANT SELECT ON rollup_1m, rollup_1h, rollup_1m_avg, rollup_1h_avg, '
                 'rollup_watermark, retention_mark TO %I', writer);
  EXECUTE format('GRANT EXECUTE ON FUNCTION '
                 'sentinel_rollup_refresh_range(integer, bigint, timestamptz, timestamptz), '
                 'sentinel_rollup_claim(integer, bigint, timestamptz, integer, integer), '
                 'sentinel_rollup_apply(integer, bigint), '
                 'sentinel_retention_drop(integer, bigint, text, timestamptz, timestamptz, text, timestamptz), '
                 'sentinel_move_point_class(integer, bigint, text, text, text, timestamptz), '
                 'sentinel_compact_day(integer, bigint, text, timestamptz, timestamptz, integer, timestamptz, text), '
                 'sentinel_compact_rollup_day(integer, bigint, timestamptz, timestamptz, integer, text) TO %I', writer);

  EXECUTE format('GRANT SELECT ON observation_measurement, observation_state, observation_diagnostic, '
                 'observation, observation_measurement_named, observation_state_named, '
                 'observation_diagnostic_named, point_key, instance_key, '
                 'control_event, registry_version, descriptor_blob, point_descriptor, '
                 'point_state, core_epoch, core_start, _sqlx_migrations, rollup_1m, rollup_1h, '
                 'rollup_1m_avg, rollup_1h_avg, rollup_watermark, retention_mark TO %I', reader);
  EXECUTE format('GRANT SELECT (stream, stream_seq, ingested_at, subject, reason, detail, '
                 'payload_bytes, core_epoch, recorded_at) ON quarantine TO %I', reader);
END;
$$;
REVOKE EXECUTE ON FUNCTION sentinel_apply_grants(text, text) FROM PUBLIC;
