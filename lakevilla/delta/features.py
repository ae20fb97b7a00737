"""Which Delta protocol features lakevilla honours, and the check that refuses the rest.

Legacy protocol versions enable a feature by version number, but the feature is
only *active* when the table uses it (e.g. change data feed only when
``delta.enableChangeDataFeed`` is true), so we refuse on use, not on version.
Column mapping is read and written (``column_mapping.py``: files, partition values and
statistics under physical names; ``mapping_changes.py``: ids for new columns, rename, drop).
In-commit timestamps are stamped by the log as it writes a commit (``ict.py``), V2 checkpoints
written by
``checkpoint.py``; a clustered table is written without clustering (its ``delta.clustering``
domain is kept), a widened one in its current types. A change data feed is written
(``engines/change_data.py``: ``cdc`` actions and ``_change_data/`` files in the statement's
commit, by both engines) and read by ``lake.changes`` (``past/changes.py``). Identity columns
(``identity.py``) and row tracking (``row_tracking.py``) are written. ``_last_checkpoint``
carries lakevilla's ``lakevilla.joinFrom`` in Delta's ``tags`` map (a string map any client may
fill and others ignore: ``isolation/join_from.py``).
What a feature's tables hold after random statements is checked against delta-rs
(``tests/statements/test_feature_differential.py``).
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from ..errors import UnsupportedTableFeatureError
from . import column_mapping
from .actions import Metadata, Protocol
from .schema import field_metadata_keys

# deletionVectors: read (deleted rows are skipped) and written: on a table that asks for them,
# DELETE, UPDATE, MERGE and an overwrite's replaced rows mark rows in new DVs (inline, or a DV
# file when large: engines/dv_rewrite.py); otherwise statements rewrite the files they change
# (their removes carry the DV); OPTIMIZE purges DVs
READER_FEATURES = {"timestampNtz", "vacuumProtocolCheck", "deletionVectors", "columnMapping",
                   "typeWidening", "typeWidening-preview", "variantType", "variantType-preview",
                   "v2Checkpoint"}
WRITER_FEATURES = {"appendOnly", "invariants", "checkConstraints", "timestampNtz",
                   "vacuumProtocolCheck", "changeDataFeed", "generatedColumns", "identityColumns",
                   "domainMetadata", "deletionVectors", "inCommitTimestamp", "v2Checkpoint",
                   "clustering", "typeWidening", "rowTracking", "columnMapping"}
# Features whose tables lakevilla reads but does not write (yet), and why.
_READ_ONLY = {"typeWidening-preview": "lakevilla reads tables widened under the preview feature "
                                      "but writes only those of the stable typeWidening"}
# Writer features we accept only while the table does not actually use them. CHECK constraints,
# invariants and generated columns are enforced on every written row (``delta.constraints``;
# the engines compute a generated column the data does not give).
_INACTIVE_ONLY: set[str] = set()


# Properties that switch a feature on (so a table that sets one uses it).
_ENABLED_BY = {"delta.enableChangeDataFeed": "changeDataFeed",
               "delta.enableDeletionVectors": "deletionVectors",
               "delta.enableRowTracking": "rowTracking",
               "delta.enableInCommitTimestamps": "inCommitTimestamp",
               "delta.enableTypeWidening": "typeWidening"}


def _active_legacy_features(md: Metadata) -> dict[str, str]:
    """Features a table uses, detected from its metadata."""
    active: dict[str, str] = {}
    cfg = {k.lower(): v for k, v in md.configuration.items()}
    meta_keys = field_metadata_keys(md.schema_string)
    if cfg.get("delta.columnmapping.mode", "none").lower() != "none":
        active["columnMapping"] = f"delta.columnMapping.mode={cfg['delta.columnmapping.mode']}"
    for key, feature in _ENABLED_BY.items():
        if cfg.get(key.lower(), "false").lower() == "true":
            active[feature] = f"{key}=true"
    if cfg.get("delta.checkpointpolicy", "classic").lower() == "v2":
        active["v2Checkpoint"] = "delta.checkpointPolicy=v2"
    if any(k.startswith("delta.constraints.") for k in cfg):
        active["checkConstraints"] = "CHECK constraints are defined"
    if "delta.invariants" in meta_keys:
        active["invariants"] = "column invariants are defined"
    if "delta.generationExpression" in meta_keys:
        active["generatedColumns"] = "generated columns are defined"
    if any(k.startswith("delta.identity.") for k in meta_keys):
        active["identityColumns"] = "identity columns are defined"
    return active


def check_readable(table: str, protocol: Protocol, metadata: Metadata | None) -> None:
    if protocol.min_reader_version > 3:
        raise UnsupportedTableFeatureError(table, f"readerVersion {protocol.min_reader_version}")
    if protocol.min_reader_version == 3:
        for f in protocol.reader_features or []:
            if f not in READER_FEATURES:
                raise UnsupportedTableFeatureError(table, f)
    if metadata is not None:
        column_mapping.mode(table, protocol, metadata)  # read (but an unknown mode is refused)


def _check_writer_features(table: str, protocol: Protocol, known: set[str]) -> None:
    if protocol.min_writer_version > 7:
        raise UnsupportedTableFeatureError(table, f"writerVersion {protocol.min_writer_version}")
    if protocol.min_writer_version == 7:
        for f in protocol.writer_features or []:
            if f not in known:
                raise UnsupportedTableFeatureError(table, f, _READ_ONLY.get(f, ""))


def check_writable(table: str, protocol: Protocol, metadata: Metadata) -> None:
    check_readable(table, protocol, metadata)
    _check_writer_features(table, protocol, WRITER_FEATURES)
    active = _active_legacy_features(metadata)
    for f in sorted(active):
        if f in _INACTIVE_ONLY or f not in WRITER_FEATURES:
            detail = "; ".join(x for x in (active[f], _READ_ONLY.get(f)) if x)
            raise UnsupportedTableFeatureError(table, f, detail)


# Features whose files the abandoned-file sweep accounts for beside what it writes itself.
_SWEEP_KNOWS = WRITER_FEATURES


def check_sweepable(table: str, protocol: Protocol, metadata: Metadata) -> None:
    """The abandoned-file sweep deletes what no action references, so it must know every kind
    of action that can reference a file: refused for a feature it does not know (at writer
    version 7). ``cdc`` actions' ``_change_data/`` files are known (named by commits only)."""
    check_readable(table, protocol, metadata)
    _check_writer_features(table, protocol, _SWEEP_KNOWS)


def protocol_for(schema: pa.Schema, configuration: dict[str, str] | None = None,
                 identity: bool = False) -> Protocol:
    """The protocol a new table needs: the legacy (1, 2), writer 3 when it defines CHECK
    constraints, and reader 3 / writer 7 with ``timestampNtz`` when a column is a timestamp
    without time zone (Delta allows those only with that feature; constraints then become the
    ``checkConstraints`` writer feature). An identity column (``identity``, or its field
    metadata) adds the ``identityColumns`` writer feature."""
    def ntz(t: pa.DataType) -> bool:
        if pa.types.is_timestamp(t):
            return t.tz is None
        if pa.types.is_struct(t):
            return any(ntz(t.field(i).type) for i in range(t.num_fields))
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return ntz(t.value_type)
        if pa.types.is_map(t):
            return ntz(t.key_type) or ntz(t.item_type)
        return False

    base = (Protocol(3, 7, ["timestampNtz"], ["timestampNtz"]) if any(ntz(f.type) for f in schema)
            else Protocol(1, 2))
    if identity or any(k.startswith(b"delta.identity.") for f in schema
                       for k in (f.metadata or {})):
        base = _at_writer_7(base)  # not legacy writer 6: it would imply column mapping
        base = dataclasses.replace(base, writer_features=[*(base.writer_features or []),
                                                          "identityColumns"])
    return upgraded(base, configuration or {})


# The writer features a legacy writer version implies (PROTOCOL.md, "Table Features").
_LEGACY_WRITER = {2: ["appendOnly", "invariants"], 3: ["checkConstraints"],
                  4: ["changeDataFeed", "generatedColumns"], 5: ["columnMapping"],
                  6: ["identityColumns"]}


def as_table_features(protocol: Protocol) -> Protocol:
    """``protocol`` at reader 3 / writer 7, its legacy versions' features listed."""
    if protocol.min_writer_version == 7 and protocol.min_reader_version == 3:
        return protocol
    writer = list(protocol.writer_features or []) if protocol.min_writer_version == 7 else [
        f for v in sorted(_LEGACY_WRITER) if v <= protocol.min_writer_version
        for f in _LEGACY_WRITER[v]]
    reader = (list(protocol.reader_features or []) if protocol.min_reader_version == 3
              else ["columnMapping"] if protocol.min_reader_version == 2 else [])
    return Protocol(3, 7, reader, writer)


def _with_reader_feature(protocol: Protocol, feature: str) -> Protocol:
    """``protocol`` at reader 3 / writer 7 with ``feature`` among its reader features."""
    protocol = as_table_features(protocol)
    if feature in (protocol.reader_features or []):
        return protocol
    return dataclasses.replace(protocol,
                               reader_features=[*(protocol.reader_features or []), feature])


def _at_writer_7(protocol: Protocol) -> Protocol:
    """``protocol`` at writer 7 for a writer-only feature: the reader version stays."""
    if protocol.min_writer_version == 7:
        return protocol
    return dataclasses.replace(as_table_features(protocol),
                               min_reader_version=protocol.min_reader_version,
                               reader_features=protocol.reader_features)


def upgraded(protocol: Protocol, configuration: dict[str, str]) -> Protocol:
    """The protocol a table needs once its properties are ``configuration``: a CHECK constraint
    needs writer version 3 (the ``checkConstraints`` feature at version 7), ``delta.appendOnly``
    version 2 (``appendOnly``), ``delta.enableDeletionVectors`` the ``deletionVectors`` reader
    and writer feature (so reader 3 / writer 7), as do ``delta.checkpointPolicy=v2``
    (``v2Checkpoint``) and ``delta.enableTypeWidening`` (``typeWidening``);
    ``delta.enableInCommitTimestamps`` the ``inCommitTimestamp`` writer feature (writer 7),
    ``delta.enableChangeDataFeed`` version 4 (``changeDataFeed``),
    ``delta.enableRowTracking`` the ``rowTracking`` and ``domainMetadata`` writer features;
    ``delta.feature.<name>=supported`` lists that feature; ``delta.columnMapping.mode`` needs
    reader 2 / writer 5 (or the ``columnMapping`` feature on a table already at reader 3 /
    writer 7). Delta upgrades a protocol, never downgrades."""
    cfg = {k.lower(): v for k, v in configuration.items()}
    need: dict[str, int] = {}
    if cfg.get("delta.enableincommittimestamps", "false").lower() == "true":
        protocol = _at_writer_7(protocol)
        need["inCommitTimestamp"] = 7
    for key, value, feature in (("delta.checkpointpolicy", "v2", "v2Checkpoint"),
                                ("delta.enabletypewidening", "true", "typeWidening")):
        if cfg.get(key, "").lower() == value:
            protocol = _with_reader_feature(protocol, feature)
            need[feature] = 7
    if any(k.startswith("delta.constraints.") for k in cfg):
        need["checkConstraints"] = 3
    if cfg.get("delta.appendonly", "false").lower() == "true":
        need["appendOnly"] = 2
    if cfg.get("delta.enablechangedatafeed", "false").lower() == "true":
        need["changeDataFeed"] = 4
    if cfg.get("delta.enabledeletionvectors", "false").lower() == "true":
        protocol = as_table_features(protocol)
        if "deletionVectors" not in (protocol.reader_features or []):
            protocol = dataclasses.replace(
                protocol, reader_features=[*(protocol.reader_features or []), "deletionVectors"])
        need["deletionVectors"] = 7
    if cfg.get("delta.enablerowtracking", "false").lower() == "true":
        protocol = _at_writer_7(protocol)  # rowTracking needs domainMetadata (writer only)
        need["rowTracking"] = need["domainMetadata"] = 7
    for key, value in configuration.items():  # Delta's explicit ``delta.feature.<name>``
        if key.lower().startswith("delta.feature.") and value.lower() in ("supported", "enabled"):
            name = key[len("delta.feature."):]
            protocol = (_with_reader_feature(protocol, name) if name in READER_FEATURES
                        else _at_writer_7(protocol))
            need[name] = 7  # one lakevilla does not write is then refused by check_writable
    if cfg.get("delta.columnmapping.mode", "none").lower() in ("name", "id"):
        # reader 2 / writer 5, or the reader and writer feature once on table features
        if protocol.min_writer_version == 7:
            protocol = _with_reader_feature(protocol, "columnMapping")
            need["columnMapping"] = 7
        else:
            protocol = dataclasses.replace(
                protocol, min_reader_version=max(protocol.min_reader_version, 2))
            need["columnMapping"] = 5
    if protocol.min_writer_version == 7:
        have = list(protocol.writer_features or [])
        more = [f for f in sorted(need) if f not in have]
        return dataclasses.replace(protocol, writer_features=have + more) if more else protocol
    writer = max([protocol.min_writer_version, *need.values()])
    if writer == protocol.min_writer_version:
        return protocol
    return dataclasses.replace(protocol, min_writer_version=writer)


def writes_deletion_vectors(protocol: Protocol, metadata: Metadata) -> bool:
    """Whether a DELETE or UPDATE should mark rows deleted instead of rewriting files: the table
    asks for it (``delta.enableDeletionVectors``) and its protocol has the feature."""
    cfg = {k.lower(): v for k, v in metadata.configuration.items()}
    return (cfg.get("delta.enabledeletionvectors", "false").lower() == "true"
            and "deletionVectors" in (protocol.writer_features or []))


def writes_change_data(metadata: Metadata) -> bool:
    """Whether every statement must log its change rows (``delta.enableChangeDataFeed``)."""
    return {k.lower(): v for k, v in metadata.configuration.items()}.get(
        "delta.enablechangedatafeed", "false").lower() == "true"


def is_append_only(metadata: Metadata) -> bool:
    return {k.lower(): v for k, v in metadata.configuration.items()}.get(
        "delta.appendonly", "false").lower() == "true"
