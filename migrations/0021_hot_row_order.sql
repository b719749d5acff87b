-- Sentinel schema, version 21: the hot row's columns in alignment order (issue 24, disk;
-- BENCHMARKS.md "The hot row's heap tuple in alignment order").
--
-- A hot raw row kept migration 0001's column order with 0014's integer keys in place:
-- `point_key` (4 B) sat between two timestamps and `source_seq` (8 B) after three 4-byte
-- columns, so each paid 4 bytes of alignment padding, and a tuple of the stages bench's mix
-- was 120 B (126.1 B a row on its pages). Each class table is rewritten with its columns 8-byte
-- first (`ingested_at`, `observed_at`, `source_seq`, `value_num`, `native_num`, `device_time`,
-- `applied`), then 4-byte (`point_key`, `instance_key`, `source_epoch`, `registry_version`,
-- `quality`), then 1-byte (`changed`, `skew_flagged`, `value_bool`), then the variable-length
-- ones (`unit_native`, `value_text`, `native_text`, `reason`, `detail`), where no column pads.
-- Same names, types, nullability and defaults: only `attnum` changes.
--
-- PostgreSQL cannot reorder columns in place, so for each class table the migration renames
-- the table and its daily partitions aside, creates the table again under its name with the
-- same partition key, creates each partition again with its name, bounds and storage
-- parameters, copies its rows (a sequential read of the old partition, so the rows keep their
-- physical, ingest, order), drops the old table and creates every index again from its
-- definition as `pg_get_indexdef` gave it before (the parents' partitioned indexes `ON ONLY`,
-- every partition's own, each attached to its parent index as it was), so whatever index set
-- the migrations before this one left — migration 0020's per-partition dedup indexes included
-- — comes back under the same names. Owners, grants (read from the old ACLs, so a database
-- upgrades without granting again), comments, migration 0004's rollup-invalidation triggers
-- (made again after the copy, which invalidates nothing) and the views that depend on the tables
-- (`observation_<class>_all`, `_named`, the `observation` view: each recreated from its own
-- `pg_get_viewdef`, which names every column, so the positional UNION ALL of hot and decoded
-- compacted rows keeps its order) come back as they were. Anything the migration does not know
-- how to carry over (a constraint besides NOT NULL, an internal or disabled trigger, a policy, a
-- rule, an inheritance child, extended statistics, a publication, column-level statistics
-- targets, compression or grants, a tablespace, a sub-partitioned partition, a materialized
-- view, an unexpected column) is refused with an error before anything changes, so the
-- migration never drops what it cannot rebuild. A partition's invalid index (what an
-- interrupted `sentinel db pack` leaves, `…_ccnew`) is not carried over. The compacted tables (`observation_<class>_compact`) are not touched.
--
-- Only one SQL function relied on the hot table's column positions: the class move's insert of
-- decoded compacted rows into the target hot table, which now names its columns.
--
-- It runs under the single-writer lock `sentinel migrate` holds; the rows are rewritten once
-- and every index is built sorted (so a day's B-trees come out packed, as `sentinel db pack`
-- leaves them); its time per GB of hot table is measured in BENCHMARKS.md. Old and new tables
-- both exist until it commits, so it needs free disk of about the hot tables' size, and as much
-- again for the write-ahead log of the copy and the index builds. `hot_day_pack`
-- keeps its records, but a rebuilt partition's write count restarts with the copy, so `sentinel
-- db pack` may find a closed day due once more and pack it again, which changes nothing.

DO $migrate$
DECLARE
  new_order constant text[] := ARRAY[
    'ingested_at', 'observed_at', 'source_seq', 'value_num', 'native_num', 'device_time', 'applied',
    'point_key', 'instance_key', 'source_epoch', 'registry_version', 'quality',
    'changed', 'skew_flagged', 'value_bool',
    'unit_native', 'value_text', 'native_text', 'reason', 'detail'];
  parents constant text[] := ARRAY['observation_measurement', 'observation_state', 'observation_diagnostic'];
  parent     text;
  cols       text;
  coldefs    text;
  r          record;
  a          record;
  tm         record;
  n          bigint;
  rels       oid[];
BEGIN
  -- Every relation rewritten: the three parents and their partitions.
  SELECT array_agg(c.oid) INTO rels FROM pg_class c
   WHERE c.oid = ANY (ARRAY(SELECT to_regclass(p)::oid FROM unnest(parents) p))
      OR c.oid IN (SELECT i.inhrelid FROM pg_inherits i
                    WHERE i.inhparent = ANY (ARRAY(SELECT to_regclass(p)::oid FROM unnest(parents) p)));

  -- Refusals, before anything changes.
  FOREACH parent IN ARRAY parents LOOP
    IF (SELECT array_agg(attname::text ORDER BY attname) FROM pg_attribute
         WHERE attrelid = parent::regclass AND attnum > 0 AND NOT attisdropped)
       IS DISTINCT FROM (SELECT array_agg(x ORDER BY x) FROM unnest(new_order) x) THEN
      RAISE EXCEPTION '0021: % does not have exactly the columns this migration orders', parent;
    END IF;
  END LOOP;
  IF EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = ANY (rels)
              AND (c.relkind NOT IN ('r', 'p') OR c.relrowsecurity OR c.relhasrules
                   OR c.relreplident <> 'd' OR c.reltablespace <> 0 OR c.relpersistence <> 'p'
                   OR (c.relkind = 'p' AND c.relname <> ALL (parents)))) THEN
    RAISE EXCEPTION '0021: a class table or partition has rules, row security, a replica identity, '
                    'a tablespace, sub-partitions or is unlogged; not rewritten';
  END IF;
  IF EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = ANY (rels))
     OR EXISTS (SELECT 1 FROM pg_inherits WHERE inhparent = ANY (rels) AND inhrelid <> ALL (rels))
     OR EXISTS (SELECT 1 FROM pg_statistic_ext WHERE stxrelid = ANY (rels))
     OR EXISTS (SELECT 1 FROM pg_policy WHERE polrelid = ANY (rels))
     OR EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = ANY (rels) AND (tgisinternal OR tgenabled <> 'O'))
     OR EXISTS (SELECT 1 FROM pg_publication_rel WHERE prrelid = ANY (rels))
     OR EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = ANY (rels) AND attnum > 0 AND NOT attisdropped
                 AND (attacl IS NOT NULL OR attstattarget <> -1
                      OR attcompression <> '' OR attidentity <> '' OR attgenerated <> ''))
     OR EXISTS (SELECT 1 FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
                 WHERE x.indrelid = ANY (rels) AND (i.reltablespace <> 0
                   OR EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.oid))) THEN
    RAISE EXCEPTION '0021: a class table carries a constraint, an internal or disabled trigger, an '
                    'inheritance child, extended statistics, a '
                    'policy, a publication, column-level statistics targets, compression or grants, or an index in a tablespace or of a '
                    'constraint; '
                    'not rewritten';
  END IF;

  -- The views over the tables, and the views over those, with what each needs to be made again.
  CREATE TEMP TABLE m0021_view ON COMMIT DROP AS
    WITH RECURSIVE dep(oid, depth) AS (
      SELECT DISTINCT w.ev_class, 1 FROM pg_depend d JOIN pg_rewrite w ON w.oid = d.objid
       WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass
         AND d.refobjid = ANY (rels) AND w.ev_class <> ALL (rels)
      UNION ALL
      SELECT w.ev_class, dep.depth + 1 FROM dep JOIN pg_depend d ON d.refobjid = dep.oid
        JOIN pg_rewrite w ON w.oid = d.objid
       WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass
         AND w.ev_class <> dep.oid)
    SELECT c.oid, format('%I.%I', s.nspname, c.relname) AS name, c.relkind, max(dep.depth) AS depth,
           pg_get_viewdef(c.oid) AS def, c.reloptions, pg_get_userbyid(c.relowner) AS owner, c.relacl
      FROM dep JOIN pg_class c ON c.oid = dep.oid JOIN pg_namespace s ON s.oid = c.relnamespace
     GROUP BY c.oid, s.nspname, c.relname, c.relkind, c.reloptions, c.relowner, c.relacl;
  IF EXISTS (SELECT 1 FROM m0021_view WHERE relkind <> 'v') THEN
    RAISE EXCEPTION '0021: a materialized view depends on a class table; not rewritten';
  END IF;
  CREATE TEMP TABLE m0021_comment ON COMMIT DROP AS
    SELECT d.objoid, d.objsubid, d.description FROM pg_description d
     WHERE d.classoid = 'pg_class'::regclass AND d.objoid IN (SELECT oid FROM m0021_view);
  IF EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid IN (SELECT oid FROM m0021_view))
     OR EXISTS (SELECT 1 FROM pg_depend d JOIN pg_rewrite w ON w.oid = d.objid
                 WHERE d.classid = 'pg_rewrite'::regclass AND d.refobjid IN (SELECT oid FROM m0021_view)
                   AND w.ev_class NOT IN (SELECT oid FROM m0021_view) AND w.ev_class <> d.refobjid) THEN
    RAISE EXCEPTION '0021: a view over the class tables has a trigger or a dependent this migration missed';
  END IF;
  FOR r IN SELECT name FROM m0021_view ORDER BY depth DESC, name LOOP
    EXECUTE format('DROP VIEW %s', r.name);
  END LOOP;

  FOREACH parent IN ARRAY parents LOOP
    -- What the table is, before it goes.
    CREATE TEMP TABLE m0021_part ON COMMIT DROP AS
      SELECT c.oid, c.relname::text AS name, pg_get_expr(c.relpartbound, c.oid) AS bound, c.reloptions,
             pg_get_userbyid(c.relowner) AS owner, c.relacl, obj_description(c.oid, 'pg_class') AS comment
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
       WHERE i.inhparent = parent::regclass;
    CREATE TEMP TABLE m0021_index ON COMMIT DROP AS
      SELECT x.indexrelid AS oid, i.relname::text AS name, x.indrelid AS table_oid,
             pg_get_indexdef(x.indexrelid) AS def, obj_description(x.indexrelid, 'pg_class') AS comment,
             (SELECT p.relname::text FROM pg_inherits h JOIN pg_class p ON p.oid = h.inhparent
               WHERE h.inhrelid = x.indexrelid) AS attached_to,
             x.indrelid = parent::regclass AS on_parent
        FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
       WHERE (x.indrelid = parent::regclass OR x.indrelid IN (SELECT oid FROM m0021_part))
         -- A partition's invalid index is what an interrupted `REINDEX CONCURRENTLY` (the
         -- pack) leaves behind (`…_ccnew`): not carried over.
         AND (x.indisvalid OR i.relkind = 'I');
    -- The triggers (migration 0004's rollup invalidation on each parent), made again once the
    -- rows are copied: the copy invalidates no rollup. A partition's clone of its parent's row
    -- trigger (`tgparentid`) comes back with the parent's.
    CREATE TEMP TABLE m0021_trigger ON COMMIT DROP AS
      SELECT t.tgname::text AS name, c.relname::text AS table_name, pg_get_triggerdef(t.oid) AS def,
             obj_description(t.oid, 'pg_trigger') AS comment
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
       WHERE (t.tgrelid = parent::regclass OR t.tgrelid IN (SELECT oid FROM m0021_part)) AND t.tgparentid = 0;
    CREATE TEMP TABLE m0021_col_comment ON COMMIT DROP AS
      SELECT a2.attname::text AS col, d.description FROM pg_description d
        JOIN pg_attribute a2 ON a2.attrelid = d.objoid AND a2.attnum = d.objsubid
       WHERE d.classoid = 'pg_class'::regclass AND d.objoid = parent::regclass AND d.objsubid > 0;
    SELECT pg_get_partkeydef(c.oid) AS key,
           c.reloptions, pg_get_userbyid(c.relowner) AS owner, c.relacl,
           obj_description(c.oid, 'pg_class') AS comment
      INTO tm FROM pg_class c WHERE c.oid = parent::regclass;
    SELECT string_agg(format('%I %s%s%s', t.attname, format_type(t.atttypid, t.atttypmod),
                             CASE WHEN t.attnotnull THEN ' NOT NULL' ELSE '' END,
                             COALESCE(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '')), ', ' ORDER BY o.i),
           string_agg(format('%I', t.attname), ', ' ORDER BY o.i)
      INTO coldefs, cols
      FROM unnest(new_order) WITH ORDINALITY AS o(name, i)
      JOIN pg_attribute t ON t.attrelid = parent::regclass AND t.attname = o.name
      LEFT JOIN pg_attrdef d ON d.adrelid = t.attrelid AND d.adnum = t.attnum;

    -- Aside, then again under the same names, the rows copied partition by partition.
    EXECUTE format('ALTER TABLE %I RENAME TO %I', parent, parent || '_0021old');
    FOR r IN SELECT name FROM m0021_part LOOP
      EXECUTE format('ALTER TABLE %I RENAME TO %I', r.name, r.name || '_0021old');
    END LOOP;
    EXECUTE format('CREATE TABLE %I (%s) PARTITION BY %s%s', parent, coldefs, tm.key,
                   COALESCE(' WITH (' || array_to_string(tm.reloptions, ', ') || ')', ''));
    FOR r IN SELECT * FROM m0021_part ORDER BY name LOOP
      EXECUTE format('CREATE TABLE %I PARTITION OF %I %s%s', r.name, parent, r.bound,
                     COALESCE(' WITH (' || array_to_string(r.reloptions, ', ') || ')', ''));
      EXECUTE format('INSERT INTO %I (%s) SELECT %s FROM %I', r.name, cols, cols, r.name || '_0021old');
      GET DIAGNOSTICS n = ROW_COUNT;
      RAISE NOTICE '0021: % rows of %', n, r.name;
    END LOOP;
    EXECUTE format('DROP TABLE %I', parent || '_0021old');

    -- Every index as it was defined, the parents' first, each partition's attached to its own.
    FOR r IN SELECT * FROM m0021_index ORDER BY NOT on_parent, name LOOP
      EXECUTE r.def;
      IF r.attached_to IS NOT NULL THEN
        EXECUTE format('ALTER INDEX %I ATTACH PARTITION %I', r.attached_to, r.name);
      END IF;
      IF r.comment IS NOT NULL THEN
        EXECUTE format('COMMENT ON INDEX %I IS %L', r.name, r.comment);
      END IF;
    END LOOP;

    FOR r IN SELECT * FROM m0021_trigger ORDER BY table_name, name LOOP
      EXECUTE r.def;
      IF r.comment IS NOT NULL THEN
        EXECUTE format('COMMENT ON TRIGGER %I ON %I IS %L', r.name, r.table_name, r.comment);
      END IF;
    END LOOP;

    -- Owners, grants and comments.
    FOR r IN SELECT parent AS name, tm.owner AS owner, tm.relacl AS relacl, tm.comment AS comment
             UNION ALL SELECT name, owner, relacl, comment FROM m0021_part LOOP
      IF r.owner <> current_user THEN
        EXECUTE format('ALTER TABLE %I OWNER TO %I', r.name, r.owner);
      END IF;
      IF r.comment IS NOT NULL THEN
        EXECUTE format('COMMENT ON TABLE %I IS %L', r.name, r.comment);
      END IF;
      IF r.relacl IS NOT NULL THEN
        EXECUTE format('REVOKE ALL ON %I FROM PUBLIC', r.name);
        FOR a IN SELECT * FROM aclexplode(r.relacl) x LOOP
          EXECUTE format('GRANT %s ON %I TO %s%s', a.privilege_type, r.name,
                         CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
                         CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
      END IF;
    END LOOP;
    FOR r IN SELECT * FROM m0021_col_comment LOOP
      EXECUTE format('COMMENT ON COLUMN %I.%I IS %L', parent, r.col, r.description);
    END LOOP;
    DROP TABLE m0021_part, m0021_index, m0021_trigger, m0021_col_comment;
  END LOOP;

  -- The views, each as it was defined (by name, every column listed), owners, grants, comments.
  FOR r IN SELECT * FROM m0021_view ORDER BY depth, name LOOP
    EXECUTE format('CREATE VIEW %s%s AS %s', r.name,
                   COALESCE(' WITH (' || array_to_string(r.reloptions, ', ') || ')', ''), r.def);
    IF r.owner <> current_user THEN
      EXECUTE format('ALTER VIEW %s OWNER TO %I', r.name, r.owner);
    END IF;
    IF r.relacl IS NOT NULL THEN
      EXECUTE format('REVOKE ALL ON %s FROM PUBLIC', r.name);
      FOR a IN SELECT * FROM aclexplode(r.relacl) x LOOP
        EXECUTE format('GRANT %s ON %s TO %s%s', a.privilege_type, r.name,
                       CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
                       CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
      END LOOP;
    END IF;
    FOR a IN SELECT * FROM m0021_comment c WHERE c.objoid = r.oid LOOP
      IF a.objsubid = 0 THEN
        EXECUTE format('COMMENT ON VIEW %s IS %L', r.name, a.description);
      ELSE
        EXECUTE format('COMMENT ON COLUMN %s.%I IS %L', r.name,
                       (SELECT attname FROM pg_attribute WHERE attrelid = r.name::regclass AND attnum = a.objsubid),
                       a.description);
      END IF;
    END LOOP;
  END LOOP;
END;
$migrate$;

-- The class move of 0015: the decoded compacted rows go into the target hot table by column name
-- (it inserted them by position, in the order the hot table had before this migration).
CREATE OR REPLACE FUNCTION sentinel_move_point_class(epoch integer, p_core_start bigint, point text, to_class text,
  principal text, occurred_at timestamptz,
  OUT moved bigint, OUT observed_from timestamptz, OUT observed_to timestamptz, OUT seq bigint)
LANGUAGE plpgsql
AS $$
DECLARE
  cls       text;
  n         bigint;
  lo_ing    timestamptz;
  hi_ing    timestamptz;
  lo_obs    timestamptz;
  hi_obs    timestamptz;
  d         date;
  target    text := 'observation_' || to_class;
  version   integer;
  froms     jsonb := '{}'::jsonb;
  pkey      integer;
  n_packed  bigint;
BEGIN
  PERFORM sentinel_rollup_fence(epoch, p_core_start);
  IF to_class IS NULL OR to_class NOT IN ('measurement', 'state', 'diagnostic') THEN
    RAISE EXCEPTION 'sentinel_move_point_class: unknown retention class %', to_class;
  END IF;
  moved := 0;
  SELECT k.key INTO pkey FROM point_key k WHERE k.point_id = point;
  IF pkey IS NULL THEN
    RETURN;   -- a point with no key has no rows
  END IF;
  FOREACH cls IN ARRAY ARRAY['measurement', 'state', 'diagnostic'] LOOP
    CONTINUE WHEN cls = to_class;
    EXECUTE format('SELECT count(*), min(ingested_at), max(ingested_at), min(observed_at), max(observed_at) '
                   'FROM %I WHERE point_key = $1', 'observation_' || cls || '_all')
      INTO n, lo_ing, hi_ing, lo_obs, hi_obs USING pkey;
    CONTINUE WHEN n = 0;
    IF lo_ing < sentinel_kept_from(target) THEN
      RAISE EXCEPTION 'point % has rows ingested at % in class %, before the first day class % still keeps (%)',
        point, lo_ing, cls, to_class, sentinel_kept_from(target);
    END IF;
    d := (lo_ing AT TIME ZONE 'UTC')::date;
    WHILE d <= (hi_ing AT TIME ZONE 'UTC')::date LOOP
      PERFORM sentinel_ensure_partitions(d, LEAST(400, (hi_ing AT TIME ZONE 'UTC')::date - d + 1));
      d := d + 400;
    END LOOP;
    -- Hot rows move as they are; compacted ones are decoded and land hot in the target (its
    -- day may be compacted again).
    EXECUTE format('WITH gone AS (DELETE FROM %I WHERE point_key = $1 RETURNING *) '
                   'INSERT INTO %I SELECT * FROM gone', 'observation_' || cls, target) USING pkey;
    GET DIAGNOSTICS n = ROW_COUNT;
    EXECUTE format('INSERT INTO %I (ingested_at, point_key, observed_at, device_time, value_num, '
                   'value_bool, value_text, native_num, native_text, unit_native, quality, reason, detail, '
                   'changed, registry_version, instance_key, source_epoch, source_seq, skew_flagged, applied) '
                   'SELECT ingested_at, point_key, observed_at, device_time, value_num, '
                   'value_bool, value_text, native_num, native_text, unit_native, quality, reason, detail, '
                   'changed, registry_version, instance_key, source_epoch, source_seq, skew_flagged, applied '
                   'FROM %I WHERE point_key = $1', target, 'observation_' || cls || '_compacted') USING pkey;
    GET DIAGNOSTICS n_packed = ROW_COUNT;
    EXECUTE format('DELETE FROM %I WHERE point_key = $1', 'observation_' || cls || '_compact') USING pkey;
    n := n + n_packed;
    moved := moved + n;
    froms := froms || jsonb_build_object(cls, n);
    observed_from := LEAST(observed_from, lo_obs);
    observed_to := GREATEST(observed_to, hi_obs);
  END LOOP;
  IF moved = 0 THEN
    RETURN;
  END IF;
  -- Both grains over the moved range, rounded outward (the recompute clips at the marks).
  PERFORM sentinel_rollup_recompute('1m', date_bin('1 minute', observed_from, TIMESTAMPTZ '1970-01-01 00:00:00+00'),
    date_bin('1 minute', observed_to, TIMESTAMPTZ '1970-01-01 00:00:00+00') + interval '1 minute');
  PERFORM sentinel_rollup_recompute('1h', date_bin('1 hour', observed_from, TIMESTAMPTZ '1970-01-01 00:00:00+00'),
    date_bin('1 hour', observed_to, TIMESTAMPTZ '1970-01-01 00:00:00+00') + interval '1 hour');
  SELECT COALESCE(max(v.version), 0) INTO version FROM registry_version v;
  INSERT INTO control_event (occurred_at, kind, point_id, subject_key, principal, core_epoch, payload, registry_version)
    VALUES (occurred_at, 'class_moved', point, NULL, principal, epoch,
            jsonb_build_object('from', froms, 'to', to_class, 'rows', moved,
              'observed_from', observed_from, 'observed_to', observed_to),
            version)
    RETURNING control_event.seq INTO seq;
END;
$$;


-- CREATE OR REPLACE resets these; its grants (ACL) are kept.
ALTER FUNCTION sentinel_move_point_class(integer, bigint, text, text, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION sentinel_move_point_class(integer, bigint, text, text, text, timestamptz) SET search_path FROM CURRENT;
