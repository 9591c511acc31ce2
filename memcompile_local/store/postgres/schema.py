"""The PostgreSQL schema: the tables, their version, and how a database is checked and set up.

The database carries a ``memcompile_schema`` table with one row per applied version; the
largest is the schema's version. :func:`ensure_schema` creates or upgrades the tables inside
one transaction that holds a transaction-level advisory lock, so several servers starting at
once against an empty database create it exactly once, and a database written by a newer
version of the package is refused before anything is changed.

Every memory table is keyed by namespace first, as in the SQLite schema. Vectors are
``bytea`` (little-endian float32) and content-addressed: one ``vectors`` row per (vector
space, content address), shared by every namespace whose ``embeddings`` rows point at it.
The request cache and the ledger are store-wide, as in SQLite. Generations come from one
sequence, so a namespace forgotten and made again never repeats an old value. The service's
build queue, leases and session numbers are part of the schema here (SQLite creates them on
demand).
"""

from __future__ import annotations

import time

from ...errors import StoreError

SCHEMA_VERSION = 3
"""The largest ``memcompile_schema.version`` this code writes; a larger one is refused.

Version 3 added the ``changes`` table (each namespace's change log, ``store.base.ChangeStep``);
version 2 the import jobs and the server-side check function."""

SCHEMA_LOCK = 0x4D434C31  # "MCL1": the advisory lock key held while the schema is set up

VERSION_TABLE = "memcompile_schema"

GENERATION_SEQUENCE = "memcompile_generation"

CHECK_FUNCTION = "memcompile_check"

MEMORY_TABLES = (
    "namespaces", "packets", "extraction_markers", "descriptors", "cells", "meta", "capsules",
    "vectors", "embeddings", "generations", "changes",
)
LEDGER_TABLES = ("request_cache", "run_calls", "waste")
SERVICE_TABLES = ("service_build_queue", "service_build_leases", "service_sessions", "service_import_jobs")
OUR_TABLES = (*MEMORY_TABLES, *LEDGER_TABLES, "counters", *SERVICE_TABLES)

_VERSION_1 = f"""
CREATE TABLE namespaces (
    namespace   TEXT PRIMARY KEY,
    created_at  DOUBLE PRECISION NOT NULL
);
CREATE TABLE packets (
    namespace      TEXT NOT NULL,
    packet_id      TEXT NOT NULL,
    ordinal        BIGINT NOT NULL,
    session_index  BIGINT NOT NULL,
    session_id     TEXT NOT NULL,
    session_time   TEXT NOT NULL,
    speaker        TEXT NOT NULL,
    content        TEXT NOT NULL,
    image_caption  TEXT,
    image_query    TEXT,
    sha256         TEXT NOT NULL,
    agent_id       TEXT,
    metadata_json  TEXT,
    PRIMARY KEY (namespace, packet_id),
    UNIQUE (namespace, ordinal)
);
CREATE TABLE extraction_markers (
    namespace       TEXT NOT NULL,
    descriptor_set  TEXT NOT NULL,
    packet_id       TEXT NOT NULL,
    n_descriptors   INTEGER NOT NULL,
    created_at      DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (namespace, descriptor_set, packet_id),
    FOREIGN KEY (namespace, packet_id) REFERENCES packets (namespace, packet_id) ON DELETE CASCADE
);
CREATE TABLE descriptors (
    namespace         TEXT NOT NULL,
    descriptor_set    TEXT NOT NULL,
    descriptor_id     TEXT NOT NULL,
    packet_id         TEXT NOT NULL,
    claim_index       BIGINT NOT NULL,
    text              TEXT NOT NULL,
    speaker           TEXT NOT NULL,
    session_index     BIGINT NOT NULL,
    session_time      TEXT NOT NULL,
    people_json       TEXT NOT NULL,
    keywords_json     TEXT NOT NULL,
    event_time        TEXT NOT NULL,
    interaction_time  TEXT NOT NULL,
    n_tokens          BIGINT NOT NULL,
    needs_profile     INTEGER NOT NULL,
    negated           INTEGER NOT NULL,
    event_json        TEXT NOT NULL,
    PRIMARY KEY (namespace, descriptor_set, descriptor_id),
    FOREIGN KEY (namespace, packet_id) REFERENCES packets (namespace, packet_id) ON DELETE CASCADE
);
CREATE INDEX descriptors_by_packet ON descriptors (namespace, descriptor_set, packet_id, claim_index);
CREATE INDEX descriptors_by_namespace_packet ON descriptors (namespace, packet_id);
CREATE TABLE cells (
    namespace            TEXT NOT NULL,
    layout_id            TEXT NOT NULL,
    cell_id              BIGINT NOT NULL,
    descriptor_ids_json  TEXT NOT NULL,
    tokens               BIGINT NOT NULL,
    people_json          TEXT NOT NULL,
    keywords_json        TEXT NOT NULL,
    session_min          BIGINT NOT NULL,
    session_max          BIGINT NOT NULL,
    title                TEXT NOT NULL,
    has_time             INTEGER NOT NULL,
    PRIMARY KEY (namespace, layout_id, cell_id)
);
CREATE TABLE meta (
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    PRIMARY KEY (namespace, key)
);
CREATE TABLE capsules (
    namespace   TEXT NOT NULL,
    capsule_id  TEXT NOT NULL,
    writer      TEXT NOT NULL,
    budget      BIGINT NOT NULL,
    body        TEXT NOT NULL,
    PRIMARY KEY (namespace, capsule_id)
);
CREATE TABLE vectors (
    id       BIGSERIAL PRIMARY KEY,
    space    TEXT NOT NULL,
    content  TEXT NOT NULL,
    dim      INTEGER NOT NULL,
    vector   BYTEA NOT NULL,
    UNIQUE (space, content)
);
CREATE TABLE embeddings (
    namespace  TEXT NOT NULL,
    model_id   TEXT NOT NULL,
    key        TEXT NOT NULL,
    vector_id  BIGINT NOT NULL REFERENCES vectors (id),
    PRIMARY KEY (namespace, model_id, key)
);
CREATE INDEX embeddings_by_vector ON embeddings (vector_id);
CREATE TABLE generations (
    namespace   TEXT PRIMARY KEY,
    generation  BIGINT NOT NULL
);
CREATE SEQUENCE {GENERATION_SEQUENCE} AS BIGINT MINVALUE 0 START WITH 1;
CREATE TABLE counters (
    name   TEXT PRIMARY KEY,
    value  BIGINT NOT NULL
);
CREATE TABLE request_cache (
    key                TEXT PRIMARY KEY,
    namespace          TEXT,
    stage              TEXT NOT NULL,
    identity_json      TEXT NOT NULL,
    response_json      TEXT NOT NULL,
    prompt_tokens      BIGINT NOT NULL,
    completion_tokens  BIGINT NOT NULL,
    created_at         DOUBLE PRECISION NOT NULL
);
CREATE INDEX request_cache_by_namespace ON request_cache (namespace, stage);
CREATE TABLE run_calls (
    run_id  TEXT NOT NULL,
    key     TEXT NOT NULL REFERENCES request_cache (key) ON DELETE CASCADE,
    PRIMARY KEY (run_id, key)
);
CREATE INDEX run_calls_by_key ON run_calls (key);
CREATE TABLE waste (
    id                 BIGSERIAL PRIMARY KEY,
    run_id             TEXT,
    namespace          TEXT,
    stage              TEXT NOT NULL,
    prompt_tokens      BIGINT NOT NULL,
    completion_tokens  BIGINT NOT NULL,
    reason             TEXT NOT NULL,
    created_at         DOUBLE PRECISION NOT NULL
);
CREATE INDEX waste_by_run ON waste (run_id, stage);
CREATE INDEX waste_by_namespace ON waste (namespace);
CREATE TABLE service_build_queue (
    namespace      TEXT PRIMARY KEY,
    pending_turns  BIGINT NOT NULL,
    seq            BIGINT NOT NULL,
    enqueued_at    DOUBLE PRECISION NOT NULL,
    attempts       INTEGER NOT NULL DEFAULT 0,
    not_before     DOUBLE PRECISION NOT NULL DEFAULT 0,
    last_error     TEXT
);
CREATE TABLE service_build_leases (
    namespace   TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    expires_at  DOUBLE PRECISION NOT NULL
);
CREATE TABLE service_sessions (
    namespace      TEXT NOT NULL,
    session_id     TEXT NOT NULL,
    session_index  BIGINT NOT NULL,
    PRIMARY KEY (namespace, session_id)
)
"""

# Version 2: batch-import job status in the database, so that every replica answers for a job
# (service.imports); a version 1 store gains the table in place.
_VERSION_2 = """
CREATE TABLE service_import_jobs (
    namespace     TEXT NOT NULL,
    job_id        TEXT NOT NULL,
    owner         TEXT NOT NULL,
    state         TEXT NOT NULL,
    body          TEXT NOT NULL,
    heartbeat_at  DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (namespace, job_id)
);
CREATE INDEX service_import_jobs_unfinished ON service_import_jobs (owner) WHERE state IN ('queued', 'running')
"""

# Also version 2: a check that a statement makes on the server, so that a write whose result
# nobody waits for can still refuse itself (the transaction then fails at its next sync). Kept
# apart from the text above, which is split on semicolons.
_CHECK_FUNCTION = (
    f"CREATE FUNCTION {CHECK_FUNCTION}(ok BOOLEAN, message TEXT) RETURNS BOOLEAN LANGUAGE plpgsql AS "
    "$$ BEGIN IF ok IS NOT TRUE THEN RAISE EXCEPTION USING MESSAGE = message, ERRCODE = 'check_violation'; "
    "END IF; RETURN TRUE; END $$")

# Version 3: each namespace's change log, one row per (generation, kind of write, detail); a
# transaction is one generation step here, so the writes of one transaction share its rows'
# generation and ``previous`` (the namespace's generation before it). A database of version 2
# gains the table empty: views loaded before are read again whole once.
_VERSION_3 = """
CREATE TABLE changes (
    namespace      TEXT NOT NULL,
    generation     BIGINT NOT NULL,
    previous       BIGINT,
    kind           TEXT NOT NULL,
    detail         TEXT NOT NULL,
    first_ordinal  BIGINT,
    last_ordinal   BIGINT,
    cell_ids       TEXT,
    PRIMARY KEY (namespace, generation, kind, detail)
)
"""

CHANGE_LOG_KEEP = 1024
"""Change-log entries of one namespace kept (each write deletes the older ones, see the store)."""

# version -> the statements that bring version - 1 to it
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: tuple(s.strip() for s in _VERSION_1.split(";") if s.strip()),
    2: (*(s.strip() for s in _VERSION_2.split(";") if s.strip()), _CHECK_FUNCTION),
    3: (_VERSION_3.strip(),),
}


def _tables(c) -> set[str]:
    return {r[0] for r in c.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")}


def read_version(c, where: str) -> int:
    """The schema version of the database ``c`` is connected to (0: no store yet); reads only.

    Raises :class:`StoreError` naming ``where`` for a version newer than this code, or for a
    database that holds tables of ours without the version table (not a store of ours).
    """
    tables = _tables(c)
    if VERSION_TABLE not in tables:
        clash = sorted(set(OUR_TABLES) & tables)
        if clash:
            raise StoreError(
                f"{where}: the database has tables named like a store's ({', '.join(clash[:5])}) but no "
                f"{VERSION_TABLE} table; expected an empty database or a memcompile-local store")
        return 0
    row = c.execute(f"SELECT MAX(version) FROM {VERSION_TABLE}").fetchone()
    version = int(row[0] or 0)
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{where}: store schema version {version} is newer than this code supports "
            f"({SCHEMA_VERSION}); upgrade memcompile-local to open it")
    missing = sorted(set(OUR_TABLES) - tables) if version == SCHEMA_VERSION else []
    if missing:
        raise StoreError(f"{where}: store is missing tables {missing}")
    return version


def ensure_schema(conn, where: str, *, create: bool) -> int:
    """Create or upgrade the schema on ``conn`` (a psycopg connection outside any transaction);
    returns the version found before. ``create=False``: an empty database is an error."""
    with conn.transaction():
        version = read_version(conn, where)
        if version == SCHEMA_VERSION:
            return version
        if version == 0 and not create:
            raise StoreError(f"{where}: the database holds no store (a read never creates one)")
        # Another process may be doing the same: wait for its transaction, then look again.
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        version = read_version(conn, where)
        if version == 0:
            conn.execute(f"CREATE TABLE {VERSION_TABLE} (version INTEGER PRIMARY KEY, "
                         "applied_at DOUBLE PRECISION NOT NULL)")
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for stmt in MIGRATIONS[target]:
                conn.execute(stmt)
            conn.execute(f"INSERT INTO {VERSION_TABLE} (version, applied_at) VALUES (%s, %s)",
                         (target, time.time()))
    return version
