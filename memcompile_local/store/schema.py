"""The store's schema: the tables, the version marks in the file header, and how a file is
checked, created or upgraded.

A store file carries ``PRAGMA application_id`` = :data:`APPLICATION_ID` and ``PRAGMA user_version``
= :data:`SCHEMA_VERSION`. :func:`inspect_schema` only reads, so a file can be judged (a foreign
SQLite database, a store from a newer version) before anything about it is changed;
:func:`create_schema` and :func:`upgrade_schema` run inside the caller's write transaction.
"""

from __future__ import annotations

import sqlite3

from ..errors import StoreError
from .ledger import LEDGER_SCHEMA_SQL, LEDGER_TABLES

SCHEMA_VERSION = 6
"""Value of ``PRAGMA user_version`` written by this code; a larger value is refused.

Version 6 added the ``changes`` table (each namespace's change log, ``store.base.ChangeStep``).
Version 5 let a turn carry an agent id and metadata. Version 4 added the ``capsules`` table (budgeted pre-query retention, retention/).

Version 2 added the ``generations`` and ``counters`` tables. Version 3 made embeddings
content-addressed: one ``vectors`` row per (vector space, content address), and ``embeddings``
rows that map a namespace's document keys to those rows. An older file is upgraded in place when
it is opened for writing; its embeddings are dropped in the upgrade (they are derived data, and
the embedder identities that keyed them changed too), so the next build embeds them again."""

APPLICATION_ID = 0x4D434C31  # "MCL1": marks the file as a memcompile-local store
"""Value of ``PRAGMA application_id`` in every store file."""

# The memories. Composite keys start with the namespace so that every namespaced lookup and the
# per-namespace deletes of forget() are index range scans.
MEMORY_SCHEMA_SQL = """
CREATE TABLE namespaces (
    namespace   TEXT PRIMARY KEY,
    created_at  REAL NOT NULL
) WITHOUT ROWID;

CREATE TABLE packets (
    namespace      TEXT NOT NULL,
    packet_id      TEXT NOT NULL,
    ordinal        INTEGER NOT NULL,
    session_index  INTEGER NOT NULL,
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
    created_at      REAL NOT NULL,
    PRIMARY KEY (namespace, descriptor_set, packet_id),
    FOREIGN KEY (namespace, packet_id) REFERENCES packets (namespace, packet_id) ON DELETE CASCADE
) WITHOUT ROWID;

CREATE TABLE descriptors (
    namespace         TEXT NOT NULL,
    descriptor_set    TEXT NOT NULL,
    descriptor_id     TEXT NOT NULL,
    packet_id         TEXT NOT NULL,
    claim_index       INTEGER NOT NULL,
    text              TEXT NOT NULL,
    speaker           TEXT NOT NULL,
    session_index     INTEGER NOT NULL,
    session_time      TEXT NOT NULL,
    people_json       TEXT NOT NULL,
    keywords_json     TEXT NOT NULL,
    event_time        TEXT NOT NULL,
    interaction_time  TEXT NOT NULL,
    n_tokens          INTEGER NOT NULL,
    needs_profile     INTEGER NOT NULL,
    negated           INTEGER NOT NULL,
    event_json        TEXT NOT NULL,
    PRIMARY KEY (namespace, descriptor_set, descriptor_id),
    FOREIGN KEY (namespace, packet_id) REFERENCES packets (namespace, packet_id) ON DELETE CASCADE
);
CREATE INDEX descriptors_by_packet ON descriptors (namespace, descriptor_set, packet_id, claim_index);

CREATE TABLE cells (
    namespace            TEXT NOT NULL,
    layout_id            TEXT NOT NULL,
    cell_id              INTEGER NOT NULL,
    descriptor_ids_json  TEXT NOT NULL,
    tokens               INTEGER NOT NULL,
    people_json          TEXT NOT NULL,
    keywords_json        TEXT NOT NULL,
    session_min          INTEGER NOT NULL,
    session_max          INTEGER NOT NULL,
    title                TEXT NOT NULL,
    has_time             INTEGER NOT NULL,
    PRIMARY KEY (namespace, layout_id, cell_id)
);


CREATE TABLE meta (
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
"""

# Content-addressed vectors (version 3). ``space`` names the vector space (an embedder identity),
# ``content`` the content address (the sha256 of the embedded text, or of the vector bytes when the
# caller names no text); each is stored once and shared by every namespace whose ``embeddings``
# rows point at it. A vector no ``embeddings`` row points at is deleted with the last reference.
EMBEDDING_SCHEMA_SQL = """
CREATE TABLE vectors (
    id       INTEGER PRIMARY KEY,
    space    TEXT NOT NULL,
    content  TEXT NOT NULL,
    dim      INTEGER NOT NULL,
    vector   BLOB NOT NULL,
    UNIQUE (space, content)
);

CREATE TABLE embeddings (
    namespace  TEXT NOT NULL,
    model_id   TEXT NOT NULL,
    key        TEXT NOT NULL,
    vector_id  INTEGER NOT NULL REFERENCES vectors (id),
    PRIMARY KEY (namespace, model_id, key)
) WITHOUT ROWID;
CREATE INDEX embeddings_by_vector ON embeddings (vector_id);
"""

# Per-namespace generations (see MemoryStore.generation) and store-wide counters.
GENERATION_SCHEMA_SQL = """
CREATE TABLE generations (
    namespace   TEXT PRIMARY KEY,
    generation  INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE counters (
    name   TEXT PRIMARY KEY,
    value  INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO counters (name, value) VALUES ('generation', 0);
"""

# Retained evidence capsules (version 4): what a retention writer kept for a namespace under a
# budget, one row per capsule; ``body`` is the capsule as JSON (Capsule.to_dict, its sources
# among them, so deleting a turn can delete the capsules cut from it).
CAPSULE_SCHEMA_SQL = """
CREATE TABLE capsules (
    namespace   TEXT NOT NULL,
    capsule_id  TEXT NOT NULL,
    writer      TEXT NOT NULL,
    budget      INTEGER NOT NULL,
    body        TEXT NOT NULL,
    PRIMARY KEY (namespace, capsule_id)
) WITHOUT ROWID;
"""

# Each namespace's change log (version 6): one row per (generation step, kind of write, detail),
# written in the transaction of the write it describes (``store.base.ChangeStep``). ``previous``
# chains a step to the one before, so a reader can tell a complete log from one with a gap;
# ``cell_ids`` lists the Cells a ``cells`` write changed (JSON; NULL: the whole layout).
# Only the last CHANGE_LOG_KEEP steps of a namespace are kept; a forget deletes them all.
CHANGES_SCHEMA_SQL = """
CREATE TABLE changes (
    namespace      TEXT NOT NULL,
    generation     INTEGER NOT NULL,
    previous       INTEGER,
    kind           TEXT NOT NULL,
    detail         TEXT NOT NULL,
    first_ordinal  INTEGER,
    last_ordinal   INTEGER,
    cell_ids       TEXT,
    PRIMARY KEY (namespace, generation, kind, detail)
) WITHOUT ROWID;
"""

CHANGE_LOG_KEEP = 1024
"""Generation steps of one namespace kept in its change log; a view older than the oldest kept
step is read again whole (its catch-up cannot tell what happened before)."""

SCHEMA_SQL = (MEMORY_SCHEMA_SQL + EMBEDDING_SCHEMA_SQL + LEDGER_SCHEMA_SQL + GENERATION_SCHEMA_SQL
              + CAPSULE_SCHEMA_SQL + CHANGES_SCHEMA_SQL)
"""Every statement that makes an empty file a store of :data:`SCHEMA_VERSION`."""

# Statements that turn a version-1 file into a version-2 one (the generation tables, and one
# generation per existing namespace).
_UPGRADE_1_TO_2 = (
    "CREATE TABLE generations (namespace TEXT PRIMARY KEY, generation INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID",
    "INSERT INTO generations (namespace, generation) "
    "SELECT namespace, ROW_NUMBER() OVER (ORDER BY namespace) FROM namespaces",
    "INSERT INTO counters (name, value) SELECT 'generation', COUNT(*) FROM namespaces",
)

# Version 2 to 3: the per-namespace vectors give way to content-addressed ones. The old rows are
# not carried over: their keys hold a truncated text hash, not the full content address.
_UPGRADE_2_TO_3 = (
    "DROP TABLE IF EXISTS embeddings",
    "DROP TABLE IF EXISTS vectors",
    *(s.strip() for s in EMBEDDING_SCHEMA_SQL.split(";") if s.strip()),
)

VERSION_1_TABLES = frozenset(
    {"namespaces", "packets", "extraction_markers", "descriptors", "cells", "embeddings", "meta",
     *LEDGER_TABLES}
)
VERSION_2_TABLES = VERSION_1_TABLES | {"generations", "counters"}
VERSION_3_TABLES = VERSION_2_TABLES | {"vectors"}
VERSION_5_TABLES = VERSION_3_TABLES | {"capsules"}
OUR_TABLES = VERSION_5_TABLES | {"changes"}
"""The tables every store of :data:`SCHEMA_VERSION` has (other tables, e.g. the service's, may exist)."""


def _statements(sql: str) -> list[str]:
    return [s for s in sql.split(";") if s.strip()]


def inspect_schema(c: sqlite3.Connection, path: str) -> int:
    """The schema version of the open file, after checking that it is a store; reads only.

    Returns 0 for an empty database (no tables: a new store may be created in it). Raises
    :class:`StoreError` naming ``path`` for an SQLite file with other tables, a foreign
    ``application_id``, a version newer than this code, or missing tables.
    """
    version = c.execute("PRAGMA user_version").fetchone()[0]
    tables = {r[0] for r in c.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path}: store schema version {version} is newer than this code supports "
            f"({SCHEMA_VERSION}); upgrade memcompile-local to open it"
        )
    app = c.execute("PRAGMA application_id").fetchone()[0]
    if version == 0 and app == 0:
        if tables:
            raise StoreError(
                f"{path}: is an SQLite file with other tables ({', '.join(sorted(tables)[:5])}); "
                "expected an empty file or a memcompile-local store"
            )
        return 0
    if app != APPLICATION_ID:
        raise StoreError(
            f"{path}: application_id {app:#x} is not a memcompile-local store (expected {APPLICATION_ID:#x})"
        )
    missing = ({1: VERSION_1_TABLES, 2: VERSION_2_TABLES, 3: VERSION_3_TABLES, 4: VERSION_5_TABLES,
                5: VERSION_5_TABLES}.get(version, OUR_TABLES)) - tables
    if version == 0 or missing:
        raise StoreError(f"{path}: store is missing tables {sorted(missing) or sorted(OUR_TABLES)}")
    return int(version)


def create_schema(c: sqlite3.Connection) -> None:
    """Create every table in an empty file and mark it (inside the caller's write transaction)."""
    # executescript would COMMIT the caller's transaction first; run the statements one by one.
    for stmt in _statements(SCHEMA_SQL):
        c.execute(stmt)
    c.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def upgrade_schema(c: sqlite3.Connection, version: int) -> None:
    """Bring a store of an older ``version`` to :data:`SCHEMA_VERSION` (in the caller's transaction)."""
    if version == 1:
        for stmt in _UPGRADE_1_TO_2:
            c.execute(stmt)
        version = 2
    if version == 2:
        for stmt in _UPGRADE_2_TO_3:
            c.execute(stmt)
        version = 3
    if version == 3:
        # IF NOT EXISTS: a file marked older that already has the table (written by newer code
        # and marked back) keeps its rows.
        for stmt in _statements(CAPSULE_SCHEMA_SQL.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS")):
            c.execute(stmt)
        version = 4
    if version == 4:
        # Version 5: a turn may name its agent and carry the caller's metadata (both optional).
        have = {r[1] for r in c.execute("PRAGMA table_info(packets)")}
        for column in ("agent_id", "metadata_json"):
            if column not in have:
                c.execute(f"ALTER TABLE packets ADD COLUMN {column} TEXT")
        version = 5
    if version == 5:
        # Version 6: the change log. It starts empty: a view loaded before the upgrade is read
        # again whole once, and every write from now on is logged.
        for stmt in _statements(CHANGES_SCHEMA_SQL.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS")):
            c.execute(stmt)
        version = 6
    c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
