-- healthlog store, schema 2 (issue 23; spec: the second half of healthlog-storage-spec.txt).
--
-- 1. The journal row learns what the second half measures: skipped entities (NULL means "not
--    measured": a fold by a parser that did not count them, or none yet; never filled in
--    here), the entity counters, the object coordinates behind the collision and incomparable
--    counters, the HAE headers kept for correlation (never identity), and the receiver's
--    intake id (journaling a spooled body twice is refused by its unique index).
ALTER TABLE delivery ADD COLUMN skipped_entities     INTEGER;
ALTER TABLE delivery ADD COLUMN entities             INTEGER;
ALTER TABLE delivery ADD COLUMN entities_written     INTEGER;
ALTER TABLE delivery ADD COLUMN entities_unchanged   INTEGER;
ALTER TABLE delivery ADD COLUMN provenance_updates   INTEGER;
ALTER TABLE delivery ADD COLUMN versions_retained    INTEGER;
ALTER TABLE delivery ADD COLUMN versions_differing   INTEGER;
ALTER TABLE delivery ADD COLUMN collision_objects    TEXT;  -- JSON [[metric, layer, hour_us], ...], bounded
ALTER TABLE delivery ADD COLUMN incomparable_objects TEXT;  -- the same, for incomparable key sets
ALTER TABLE delivery ADD COLUMN automation_name      TEXT;
ALTER TABLE delivery ADD COLUMN automation_id        TEXT;
ALTER TABLE delivery ADD COLUMN session_id           TEXT;
ALTER TABLE delivery ADD COLUMN intake_id            TEXT;
CREATE UNIQUE INDEX delivery_by_intake ON delivery (intake_id) WHERE intake_id IS NOT NULL;
CREATE INDEX delivery_by_automation ON delivery (automation_name, received_at_us);

-- 2. Entities with an id of their own, one row each (spec: "Хранение сущностей с собственным
--    идентификатором"). The content is the entity's bytes verbatim and is the LAST column, so
--    the decision table's read of hash, shape and provenance never touches its overflow pages:
--    `shape` is the version's coverage summary (top-level keys, emptiness, value shapes, array
--    lengths and non-empty elements), computed from the content before the write transaction.
--    Provenance is the delivery whose version lies here and its receipt time, raised to the
--    latest journal position among versions with this content; changed_at_us moves only when
--    the content does.
CREATE TABLE workout (
    id             TEXT    PRIMARY KEY,
    name           TEXT,
    start_us       INTEGER,
    end_us         INTEGER,
    tz_offset_min  INTEGER,
    duration_s     REAL,             -- NULL: the source sent none (0 is a real duration)
    content_hash   BLOB    NOT NULL, -- SHA-256 of the canonical content: a detector, not a key
    shape          TEXT    NOT NULL,
    delivery_id    INTEGER NOT NULL,
    received_at_us INTEGER NOT NULL,
    changed_at_us  INTEGER NOT NULL,
    content_bytes  INTEGER NOT NULL,
    content        BLOB    NOT NULL
);
CREATE INDEX workout_by_start ON workout (start_us);

CREATE TABLE record (
    kind           TEXT    NOT NULL, -- the section: stateOfMind, medications, symptoms, ...
    id             TEXT    NOT NULL,
    at_us          INTEGER,
    tz_offset_min  INTEGER,
    content_hash   BLOB    NOT NULL,
    shape          TEXT    NOT NULL,
    delivery_id    INTEGER NOT NULL,
    received_at_us INTEGER NOT NULL,
    changed_at_us  INTEGER NOT NULL,
    content_bytes  INTEGER NOT NULL,
    content        BLOB    NOT NULL,
    PRIMARY KEY (kind, id)
);
CREATE INDEX record_by_time ON record (kind, at_us);

-- 3. Schema 1 resolved point collisions by counting keys; schema 2 by sets (HEALTHLOG.md
--    "Completeness is by sets"), keeping the undominated candidates beside each winner, and it
--    covers sections and timestamp forms schema 1 failed or left partial. The vitrine is a
--    projection of the journal and the archive, so it is rebuilt from them: every object goes,
--    and every delivery with an archived body is pending again, to be refolded in journal order
--    by the next fold (`healthlog fold`, or `healthlog serve` at start). Counters stay until
--    that refold replaces them (spec: "Число точек у них до пересвёртки остаётся прежним").
DELETE FROM bucket;
UPDATE delivery SET parse_status = 'pending' WHERE body_sha256 IS NOT NULL;
