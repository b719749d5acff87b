UPDATE core_epoch SET epoch = 1, core_start = 7;
\timing on
DO $$
DECLARE
  pk integer;
  a record;
  total bigint := 0;
BEGIN
  FOR pk IN SELECT key FROM point_key ORDER BY key LIMIT 926 LOOP
    SELECT array_agg(i.driver_instance) di, array_agg(o.source_epoch) se, array_agg(o.source_seq) ss,
           array_agg(o.ingested_at) ia, array_agg(o.value_num + 1) vn, array_agg(o.value_bool) vb,
           array_agg(o.value_text) vt, array_agg(NULL::text) nf, array_agg('live'::text) q, array_agg(NULL::text) r,
           array_agg(p.point_id) pt, array_agg(o.observed_at) oa
      INTO a
      FROM observation_measurement_all o JOIN instance_key i ON i.key = o.instance_key JOIN point_key p ON p.key = o.point_key
      WHERE o.point_key = pk;
    total := total + sentinel_reprocess_apply(1, 7, 'measurement', a.di, a.se, a.ss, a.ia, a.vn, a.vb, a.vt, a.nf, a.q, a.r, 2, a.pt, a.oa);
  END LOOP;
  RAISE NOTICE 'updated %', total;
END;
$$;
