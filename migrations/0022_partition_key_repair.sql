-- Sentinel schema, version 22: no hot partition without its dedup key (issue 24 follow-up to
-- migration 0020).
--
-- Since 0020 the class tables have no partitioned unique index: each hot daily partition has
-- its own `<partition>_key (instance_key, source_epoch, source_seq)`, and the commit's
-- `INSERT … ON CONFLICT DO NOTHING` is exactly-once only because every partition it routes a
-- row to has one. `sentinel_ensure_partitions` makes it with each partition it creates, but a
-- hot partition made any other way (an operator's `CREATE TABLE … PARTITION OF`, a restore, a
-- tool's leftover) has none, and a redelivered message routed there is stored twice. Here:
--
--   * `sentinel_hot_partition_keys()`: every hot partition (every child of the three class
--     tables, whatever its name; the compacted partitions are children of the `_compact`
--     tables, migration 0015, and are not listed), its class, its bounds (`-infinity` /
--     `infinity` for MINVALUE / MAXVALUE, and both for a DEFAULT partition, which says it is
--     one) and whether it has its dedup key: a valid, immediate, non-partial unique index on
--     exactly those three columns, whatever its name. A read of the catalogue only (invoker's
--     rights, so PUBLIC keeps EXECUTE as on every plain function here): the store calls it at
--     boot, and `sentinel storage` as the reader. `sentinel_hot_partition_has_key(oid)` is its
--     test of one table.
--   * `sentinel_hot_partition_key(part)` (0020's, the owner's) makes the key only when the
--     partition lacks it, and says why it cannot: an index named `<partition>_key` that is not
--     the key, or rows already holding duplicate keys (SQLSTATE SN002; the error's table is
--     the partition, its message names the partition and how many keys are duplicated, never
--     a key's values). Returns whether it made one.
--   * `sentinel_ensure_partitions` (SECURITY DEFINER, as before, so the writer still makes
--     nothing itself) makes no daily partition for a day another hot partition of the class
--     already holds (the overlap failed the call before), and makes the key of every hot
--     partition overlapping the days it covers that lacks it, under the partition lock, with
--     a WARNING naming it; a partition whose key cannot be made fails the call (SN002), so
--     nothing the call made is kept. The store's boot calls it for a day of each partition the
--     function above lists (store-pg `partitions.rs`), and refuses to start on SN002. The
--     check costs the call a catalogue read of every hot partition's indexes (13–17 ms over
--     306 partitions on the shared 2-core VM, against about 2 ms for the rest of a call that
--     makes nothing); the bounds are deparsed only when a key is missing.
--
-- No grant changes: the writer keeps EXECUTE on `sentinel_ensure_partitions` only.

-- Whether the table `rel` has the dedup key: a catalogue read, every name qualified so it needs
-- no pinned search path.
CREATE FUNCTION sentinel_hot_partition_has_key(rel oid) RETURNS boolean
LANGUAGE sql STABLE
AS $$
  SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_index x
     WHERE x.indrelid = rel AND x.indisunique AND x.indisvalid AND x.indisready
       AND x.indimmediate AND x.indpred IS NULL AND x.indexprs IS NULL AND x.indnkeyatts = 3
       AND (SELECT pg_catalog.array_agg(a.attname::text ORDER BY a.attname::text)
              FROM pg_catalog.unnest((x.indkey::int2[])[0:2]) k(attnum)
              JOIN pg_catalog.pg_attribute a ON a.attrelid = rel AND a.attnum = k.attnum)
           = ARRAY['instance_key', 'source_epoch', 'source_seq'])
$$;

CREATE FUNCTION sentinel_hot_partition_keys()
RETURNS TABLE (class text, part text, from_at timestamptz, to_at timestamptz, is_default boolean,
               has_key boolean)
LANGUAGE sql STABLE
AS $$
  SELECT substr(p.relname::text, length('observation_') + 1),
         c.relname::text,
         CASE WHEN c.relpartbound IS NULL OR b.bound[1] IS NULL THEN '-infinity'::timestamptz
              WHEN b.bound[1] = 'MINVALUE' THEN '-infinity'::timestamptz
              ELSE trim(BOTH '''' FROM b.bound[1])::timestamptz END,
         CASE WHEN c.relpartbound IS NULL OR b.bound[2] IS NULL THEN 'infinity'::timestamptz
              WHEN b.bound[2] = 'MAXVALUE' THEN 'infinity'::timestamptz
              ELSE trim(BOTH '''' FROM b.bound[2])::timestamptz END,
         b.bound IS NULL,
         sentinel_hot_partition_has_key(c.oid)
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    JOIN pg_class p ON p.oid = i.inhparent
    LEFT JOIN LATERAL (SELECT regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                           '^FOR VALUES FROM \((.*)\) TO \((.*)\)$') AS bound) b ON true
   WHERE p.relnamespace = current_schema()::regnamespace
     AND p.relname IN ('observation_measurement', 'observation_state', 'observation_diagnostic')
$$;
ALTER FUNCTION sentinel_hot_partition_keys() SET search_path FROM CURRENT;

-- 0020's, now making the key only where it is missing and saying why it cannot (internal; the
-- owner's). The return type changes, so it is made again.
DROP FUNCTION sentinel_hot_partition_key(text);
CREATE FUNCTION sentinel_hot_partition_key(part text) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
  duplicated bigint;
BEGIN
  IF (SELECT h.has_key FROM sentinel_hot_partition_keys() h WHERE h.part = $1) THEN
    RETURN false;
  END IF;
  IF to_regclass(format('%I', part || '_key')) IS NOT NULL THEN
    RAISE EXCEPTION 'hot partition % has an index named %, which is not its dedup key '
                    '(instance_key, source_epoch, source_seq): drop it, and the key is made at the next start',
                    part, part || '_key'
      USING ERRCODE = 'SN002', TABLE = part;
  END IF;
  BEGIN
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (instance_key, source_epoch, source_seq) '
                   'WITH (fillfactor = 100)', part || '_key', part);
  EXCEPTION WHEN unique_violation THEN
    -- PostgreSQL's own message names a duplicated key's values; this one names the partition
    -- and the count only.
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %I GROUP BY instance_key, source_epoch, source_seq '
                   'HAVING count(*) > 1) d', part) INTO duplicated;
    RAISE EXCEPTION 'hot partition % holds % duplicated dedup keys (instance_key, source_epoch, source_seq), '
                    'so its unique key cannot be made', part, duplicated
      USING ERRCODE = 'SN002', TABLE = part;
  END;
  RETURN true;
END;
$$;
ALTER FUNCTION sentinel_hot_partition_key(text) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_hot_partition_key(text) FROM PUBLIC;

-- 0020's function, also making the missing key of every hot partition overlapping its days.
CREATE OR REPLACE FUNCTION sentinel_ensure_partitions(from_day date, days integer)
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
      IF to_regclass(part) IS NULL
         AND (d::timestamp AT TIME ZONE 'UTC') >= sentinel_kept_from('observation_' || cls) THEN
        PERFORM pg_advisory_xact_lock(7310598112409645057);
        -- A partition made some other way that holds the day (a restore's, under its own
        -- name) takes its rows: none is made beside it (PostgreSQL would refuse the overlap).
        IF to_regclass(part) IS NULL AND NOT EXISTS (
             SELECT 1 FROM sentinel_hot_partition_keys() h
              WHERE h.class = cls AND NOT h.is_default
                AND h.from_at < ((d + 1)::timestamp AT TIME ZONE 'UTC')
                AND h.to_at > (d::timestamp AT TIME ZONE 'UTC')) THEN
          EXECUTE format(
            'CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
            part, 'observation_' || cls,
            to_char(d, 'YYYY-MM-DD') || ' 00:00:00+00',
            to_char(d + 1, 'YYYY-MM-DD') || ' 00:00:00+00');
          PERFORM sentinel_hot_partition_key(part);
          created := created + 1;
        END IF;
      END IF;
    END LOOP;
  END LOOP;
  -- A hot partition made some other way, in these days, gets its key here. The bounds (the
  -- deparse is most of the list's cost) are read only when some partition lacks its key.
  IF days > 0 AND EXISTS (
       SELECT 1 FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
        WHERE p.relnamespace = current_schema()::regnamespace
          AND p.relname IN ('observation_measurement', 'observation_state', 'observation_diagnostic')
          AND NOT sentinel_hot_partition_has_key(i.inhrelid)) THEN
    FOR part IN
      SELECT h.part FROM sentinel_hot_partition_keys() h
       WHERE NOT h.has_key
         AND h.from_at < ((from_day + days)::timestamp AT TIME ZONE 'UTC')
         AND h.to_at > (from_day::timestamp AT TIME ZONE 'UTC')
       ORDER BY h.part
    LOOP
      PERFORM pg_advisory_xact_lock(7310598112409645057);
      IF to_regclass(format('%I', part)) IS NOT NULL AND sentinel_hot_partition_key(part) THEN
        RAISE WARNING 'made the missing dedup key of hot partition %', part;
      END IF;
    END LOOP;
  END IF;
  RETURN created + sentinel_ensure_rollup_partitions(from_day, days);
END;
$$;

-- CREATE OR REPLACE resets SECURITY DEFINER and SET (owner and grants are kept): as 0005.
ALTER FUNCTION sentinel_ensure_partitions(date, integer) SECURITY DEFINER;
ALTER FUNCTION sentinel_ensure_partitions(date, integer) SET search_path FROM CURRENT;
