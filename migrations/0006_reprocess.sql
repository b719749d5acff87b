-- Reprocess (ingest spec, "Reprocess"; issue 9 item 3): the one way a row of a class table is
-- ever updated. Rust never writes an UPDATE of an observation row: it calls this function,
-- which the writer role may execute (granted by sentinel_apply_reprocess_grants, called by
-- `sentinel db grants` after sentinel_apply_grants) though it may not UPDATE the tables.
--
-- The function writes only the canonical columns (value_num, value_bool, value_text), quality,
-- reason and registry_version, addressed by the full unique key. native_text is only ever
-- filled where it is NULL (a good text row's native lives in value_text until a new version
-- would move it; see core/src/reprocess.rs). native_num, unit_native, ingested_at, observed_at
-- and the key are never written. Fenced on the caller's epoch like every write. The rollup
-- invalidation triggers fire on INSERT only, so the caller refreshes the rollups over the
-- affected range explicitly, after its updates commit (the spec's order); and this function
-- leaves the minutes of the rows it updated in rollup_invalidation, as the trigger does for an
-- insert (under FOR SHARE on the watermark, for the same reason), so a reprocess that dies
-- between its updates and its refresh leaves no bucket stale for good: the running core's next
-- steps recompute those minutes and their closed hours.

CREATE FUNCTION sentinel_reprocess_apply(p_epoch integer, p_class text, p_instances text[],
  p_epochs integer[], p_seqs bigint[], p_ingested timestamptz[], p_value_num float8[],
  p_value_bool boolean[], p_value_text text[], p_native_fill text[], p_qualities text[],
  p_reasons text[], p_version integer)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
  origin constant timestamptz := TIMESTAMPTZ '1970-01-01 00:00:00+00';
  updated bigint;
  mark    timestamptz;
BEGIN
  PERFORM sentinel_rollup_fence(p_epoch);
  SELECT claimed_to INTO mark FROM rollup_watermark WHERE singleton FOR SHARE;
  IF p_class = 'measurement' THEN
    WITH changed AS (
      UPDATE observation_measurement o SET value_num = u.vn, value_bool = u.vb, value_text = u.vt,
        native_text = COALESCE(o.native_text, u.nf), quality = u.q::quality, reason = u.r,
        registry_version = p_version
      FROM unnest(p_instances, p_epochs, p_seqs, p_ingested, p_value_num, p_value_bool, p_value_text,
                  p_native_fill, p_qualities, p_reasons) AS u(di, se, ss, ia, vn, vb, vt, nf, q, r)
      WHERE o.driver_instance = u.di AND o.source_epoch = u.se AND o.source_seq = u.ss
        AND o.ingested_at = u.ia
      RETURNING o.observed_at
    ), invalidated AS (
      INSERT INTO rollup_invalidation (bucket)
        SELECT DISTINCT date_bin('1 minute', observed_at, origin) FROM changed
        WHERE mark IS NULL OR observed_at < mark
    )
    SELECT count(*) INTO updated FROM changed;
  ELSIF p_class = 'state' THEN
    WITH changed AS (
      UPDATE observation_state o SET value_num = u.vn, value_bool = u.vb, value_text = u.vt,
        native_text = COALESCE(o.native_text, u.nf), quality = u.q::quality, reason = u.r,
        registry_version = p_version
      FROM unnest(p_instances, p_epochs, p_seqs, p_ingested, p_value_num, p_value_bool, p_value_text,
                  p_native_fill, p_qualities, p_reasons) AS u(di, se, ss, ia, vn, vb, vt, nf, q, r)
      WHERE o.driver_instance = u.di AND o.source_epoch = u.se AND o.source_seq = u.ss
        AND o.ingested_at = u.ia
      RETURNING o.observed_at
    ), invalidated AS (
      INSERT INTO rollup_invalidation (bucket)
        SELECT DISTINCT date_bin('1 minute', observed_at, origin) FROM changed
        WHERE mark IS NULL OR observed_at < mark
    )
    SELECT count(*) INTO updated FROM changed;
  ELSIF p_class = 'diagnostic' THEN
    WITH changed AS (
      UPDATE observation_diagnostic o SET value_num = u.vn, value_bool = u.vb, value_text = u.vt,
        native_text = COALESCE(o.native_text, u.nf), quality = u.q::quality, reason = u.r,
        registry_version = p_version
      FROM unnest(p_instances, p_epochs, p_seqs, p_ingested, p_value_num, p_value_bool, p_value_text,
                  p_native_fill, p_qualities, p_reasons) AS u(di, se, ss, ia, vn, vb, vt, nf, q, r)
      WHERE o.driver_instance = u.di AND o.source_epoch = u.se AND o.source_seq = u.ss
        AND o.ingested_at = u.ia
      RETURNING o.observed_at
    ), invalidated AS (
      INSERT INTO rollup_invalidation (bucket)
        SELECT DISTINCT date_bin('1 minute', observed_at, origin) FROM changed
        WHERE mark IS NULL OR observed_at < mark
    )
    SELECT count(*) INTO updated FROM changed;
  ELSE
    RAISE EXCEPTION 'sentinel_reprocess_apply: unknown retention class %', p_class;
  END IF;
  RETURN updated;
END;
$$;

ALTER FUNCTION sentinel_reprocess_apply(integer, text, text[], integer[], bigint[], timestamptz[],
  float8[], boolean[], text[], text[], text[], text[], integer) SECURITY DEFINER;
ALTER FUNCTION sentinel_reprocess_apply(integer, text, text[], integer[], bigint[], timestamptz[],
  float8[], boolean[], text[], text[], text[], text[], integer) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_reprocess_apply(integer, text, text[], integer[], bigint[],
  timestamptz[], float8[], boolean[], text[], text[], text[], text[], integer) FROM PUBLIC;

-- Kept apart from sentinel_apply_grants (which each migration that adds a grant redefines) so
-- that this migration does not depend on another's definition of it.
CREATE FUNCTION sentinel_apply_reprocess_grants(writer text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
  EXECUTE format('GRANT EXECUTE ON FUNCTION sentinel_reprocess_apply(integer, text, text[], '
    'integer[], bigint[], timestamptz[], float8[], boolean[], text[], text[], text[], text[], '
    'integer) TO %I', writer);
END;
$$;
REVOKE EXECUTE ON FUNCTION sentinel_apply_reprocess_grants(text) FROM PUBLIC;
