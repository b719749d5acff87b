-- healthlog store, schema 1 (spec: healthlog-storage-spec.txt, points half; HEALTHLOG.md).
--
-- delivery: the journal. `id` is the journal position. The body lives in the archive under
-- body_sha256 (NULL only for a body refused before archiving, e.g. over the size limit).
-- Counters are NULL until a fold measured them; a rebuild starts them empty.
CREATE TABLE delivery (
    id                INTEGER PRIMARY KEY,
    received_at_us    INTEGER NOT NULL,
    layer             TEXT    NOT NULL,
    body_sha256       TEXT,
    body_bytes        INTEGER NOT NULL,
    parse_status      TEXT    NOT NULL DEFAULT 'pending'
                      CHECK (parse_status IN ('pending', 'parsed', 'partial', 'failed')),
    uncovered         TEXT,     -- JSON array of section names, never their contents
    uncovered_dropped INTEGER,
    error             TEXT,     -- a reason without body content
    metrics           INTEGER,
    points            INTEGER,
    coordinates       INTEGER,
    objects_written   INTEGER,
    objects_unchanged INTEGER,
    collisions        INTEGER,
    incomparable      INTEGER,
    unit_mismatches   INTEGER,
    sealed_changes    INTEGER,
    folded_at_us      INTEGER
);
CREATE INDEX delivery_by_status ON delivery (parse_status, id);

-- bucket: hourly objects, one per metric + layer + UTC hour. WITHOUT ROWID: the row, payload
-- included, lives in the primary-key tree, so catalog questions must be answered by the
-- covering index below and never by a scan of this table (spec: "Перечисление разрезов не
-- читает содержимое объектов"). A column that joins a catalog answer joins the index in the
-- same change.
CREATE TABLE bucket (
    metric      TEXT    NOT NULL,
    layer       TEXT    NOT NULL,
    hour_us     INTEGER NOT NULL,
    units       TEXT    NOT NULL,
    first_us    INTEGER NOT NULL,
    last_us     INTEGER NOT NULL,
    point_count INTEGER NOT NULL,
    hash        BLOB    NOT NULL,   -- SHA-256 of the canonical content: a change detector, not a key
    sealed      INTEGER NOT NULL DEFAULT 0,
    delivery_id INTEGER NOT NULL,   -- the delivery that created the object; never raised
    payload     BLOB    NOT NULL,   -- gzip of [[start_us,end_us,POINT],...], points verbatim
    PRIMARY KEY (metric, layer, hour_us)
) WITHOUT ROWID;
CREATE INDEX bucket_catalog ON bucket (metric, layer, hour_us, first_us, last_us, point_count);
