"""Every CLI command's ``--json`` output: one JSON object in the shape README.md documents."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from lakevilla.cli import main as cli
from lakevilla.store import FaultInjectingStore, FaultPlan, SimulatedCrash

T = pa.schema([("id", pa.int64()), ("value", pa.int64())])


def as_json(capsys, *argv: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = cli([*argv, "--json"])
    out = capsys.readouterr().out
    assert len(out.strip().splitlines()) == 1, out  # one object, nothing else on stdout
    return code, json.loads(out)


def test_every_command_speaks_json(local_backend, capsys):
    lake = local_backend.lake()
    for t in ("a", "b"):
        lake.create_table(t, T)
    lake.store.put("a/orphan.parquet", b"PAR1")
    dying = local_backend.lake(store=FaultInjectingStore(local_backend.store(), FaultPlan(
        crash_after=1, kinds=("put_if_absent",), predicate=lambda k, key: key.startswith("_lakevilla/txns/"))))
    txn = dying.begin("R,CT")
    txn.insert("a", {"id": [1], "value": [1]})
    txn.insert("b", {"id": [1], "value": [1]})
    with pytest.raises(SimulatedCrash):
        txn.commit()
    root = local_backend.uri

    assert as_json(capsys, "tables", root) == (0, {"tables": ["a", "b"]})
    code, rec = as_json(capsys, "recover", root)
    assert code == 0 and rec["records_rolled_forward"] == [txn.attempt] and rec["acted"] == 1
    assert rec["committed"] == rec["freed"] == rec["running"] == [] and rec["tables_scanned"] == 2
    code, hist = as_json(capsys, "history", root, "a")
    assert code == 0 and hist["table"] == "a"
    assert [(v["version"], v["operation"], v["adds"]) for v in hist["versions"]] == [
        (0, "CREATE TABLE", 0), (1, "LAKEVILLA MARKER", 0), (2, "WRITE", 1)]
    assert hist["versions"][1]["lakevilla"]["kind"] == "marker"
    assert hist["versions"][2]["lakevilla"]["attempt"] == txn.attempt
    assert as_json(capsys, "abandoned", root, "--min-age", "0", "--force") == (
        0, {"files": [{"table": "a", "key": "a/orphan.parquet"}], "deleted": False})
    code, done = as_json(capsys, "cleanup", root, "--older-than", "0", "--force")
    assert code == 0 and (done["records"], done["sublogs"], done["global_entries"]) == (1, 2, 0)
    code, st = as_json(capsys, "status", root)
    assert code == 0 and st["v"] == 1 and {t["name"] for t in st["tables"]} == {"a", "b"}
    code, err = as_json(capsys, "history", root, "../etc")
    assert code == 2 and err["error"]["type"] == "InvalidTableNameError" and "escapes" in err["error"]["message"]
