-- Least privilege (core runtime spec, "single writer"; ARCHITECTURE.md, "Security model").
--
-- Three roles, each created by the operator (with whatever login method the site uses):
--   * the schema owner: whoever runs `sentinel migrate`; owns every object; runs migrations only;
--   * the core's writer: `sentinel run` and `sentinel registry load` connect as it;
--   * a reader: dashboards and `sentinel status` (reads only).
-- `sentinel db grants --writer ROLE --reader ROLE` calls sentinel_apply_grants below as the owner.

-- The writer creates partitions only through this function, which runs with its owner's rights,
-- so the writer needs no CREATE privilege anywhere. The search path is pinned to the one the
-- migration ran with, so a caller cannot redirect the unqualified names inside it.
ALTER FUNCTION sentinel_ensure_partitions(date, integer) SECURITY DEFINER;
ALTER FUNCTION sentinel_ensure_partitions(date, integer) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_ensure_partitions(date, integer) FROM PUBLIC;

-- Grants the writer and the reader exactly what they use, and nothing else. Idempotent: GRANT
-- of a privilege already held is a no-op. Revokes nothing (run it again after a migration that
-- adds a table: each such migration replaces this function with the new table in its lists).
--
-- Writer:
--   * observation_{measurement,state,diagnostic}: INSERT (the commit's ON CONFLICT DO NOTHING
--     needs no more) and SELECT (RETURNING, restart's log heads). No UPDATE, DELETE or TRUNCATE:
--     the log is append-only; `value_native` and `ingested_at` are never rewritten.
--   * quarantine, control_event (+ its sequence), descriptor_blob, point_descriptor: INSERT, SELECT.
--   * registry_version: INSERT, SELECT and UPDATE, the last only because a registry load takes
--     `LOCK TABLE registry_version IN EXCLUSIVE MODE` to serialise version numbers, which
--     PostgreSQL allows only to roles with UPDATE (no statement updates a row).
--   * point_state: INSERT, UPDATE, SELECT (the checkpoint upsert).
--   * core_epoch: SELECT, UPDATE (the increment at acquisition; FOR SHARE in the fence).
--   * core_start: INSERT, UPDATE, SELECT (the acquisition and its cold-start timings).
--   * _sqlx_migrations: SELECT (the schema version check at startup).
--   * sentinel_ensure_partitions: EXECUTE.
-- Reader: SELECT on the logs, the projection's checkpoint, the registry, the epoch and the cold
-- starts, and on quarantine without its payload column (raw device payloads stay with the core).
CREATE FUNCTION sentinel_apply_grants(writer text, reader text)
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
                 'point_descriptor TO %I', writer);
  EXECUTE format('GRANT SELECT, INSERT, UPDATE ON registry_version, point_state, core_start TO %I',
                 writer);
  EXECUTE format('GRANT SELECT, UPDATE ON core_epoch TO %I', writer);
  EXECUTE format('GRANT USAGE ON SEQUENCE control_event_seq_seq TO %I', writer);
  EXECUTE format('GRANT SELECT ON observation, _sqlx_migrations TO %I', writer);
  EXECUTE format('GRANT EXECUTE ON FUNCTION sentinel_ensure_partitions(date, integer) TO %I', writer);

  EXECUTE format('GRANT SELECT ON observation_measurement, observation_state, observation_diagnostic, '
                 'observation, control_event, registry_version, descriptor_blob, point_descriptor, '
                 'point_state, core_epoch, core_start, _sqlx_migrations TO %I', reader);
  EXECUTE format('GRANT SELECT (stream, stream_seq, ingested_at, subject, reason, detail, '
                 'payload_bytes, core_epoch, recorded_at) ON quarantine TO %I', reader);
END;
$$;
REVOKE EXECUTE ON FUNCTION sentinel_apply_grants(text, text) FROM PUBLIC;
