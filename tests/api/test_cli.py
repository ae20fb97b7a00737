"""Every CLI command's ``--json`` output: one JSON object in the shape README.md documents."""

from __future__ import annotations

import json
import time

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
        crash_after=1, kinds=("put_if_absent",),
        predicate=lambda k, key: key.startswith("_lakevilla/txns/"))))
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
    # newest first
    assert [(v["version"], v["operation"], v["marker"]) for v in hist["versions"]] == [
        (2, "WRITE", False), (1, "LAKEVILLA MARKER", True), (0, "CREATE TABLE", False)]
    assert (hist["versions"][0]["attempt"] == txn.attempt
            and hist["versions"][0]["features"] == "R,CT")
    assert all(abs(v["timestamp"] - time.time()) < 600 for v in hist["versions"])  # seconds, not ms
    assert as_json(capsys, "abandoned", root, "--min-age", "0", "--force") == (
        0, {"files": [{"table": "a", "key": "a/orphan.parquet"}], "deleted": False})
    code, done = as_json(capsys, "cleanup", root, "--older-than", "0", "--force")
    assert code == 0 and (done["records"], done["sublogs"], done["global_entries"]) == (1, 2, 0)
    code, st = as_json(capsys, "status", root)
    assert code == 0 and st["v"] == 1 and {t["name"] for t in st["tables"]} == {"a", "b"}
    code, err = as_json(capsys, "history", root, "../etc")
    assert (code == 2 and err["error"]["type"] == "InvalidTableNameError"
            and "escapes" in err["error"]["message"])


# -- errors: one line (or one JSON object), exit status 2, no traceback, nothing written ------

def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = cli(list(argv))
    except SystemExit as e:  # argparse's own exits (usage errors, --version)
        code = int(e.code or 0)
    got = capsys.readouterr()
    return code, got.out, got.err


@pytest.mark.parametrize("argv, kind, named", [
    (["status", "{missing}"], "LakeNotFoundError", "no lake at file://{missing}"),
    (["tables", "{missing}"], "LakeNotFoundError", "no lake at"),
    (["history", "{missing}", "orders"], "LakeNotFoundError", "no lake at"),
    (["history", "{root}", "nosuch"], "TableNotFoundError", "'nosuch'"),
    (["--storage-options", "{bad", "tables", "{root}"], "InvalidArgumentError",
     "--storage-options is not valid JSON"),
    (["--storage-options", "[1]", "tables", "{root}"], "InvalidArgumentError",
     "must be a JSON object"),
    (["abandoned", "{root}", "--min-age", "0"], "InvalidArgumentError", "Pass --force only if"),
    (["cleanup", "{root}", "--older-than", "5"], "InvalidArgumentError",
     "--older-than 5s is shorter"),
    (["tables", "{afile}"], "StorageError", "is a file, not a folder"),
    (["status"], "UsageError", "required: root"),
])
def test_every_error_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, argv, kind, named):
    from tests.api.test_first_hour import tree

    lake = __import__("lakevilla").Lake(str(tmp_path / "lake"))
    lake.create_table("a", T)
    lake.close()
    (tmp_path / "afile").write_bytes(b"x")
    paths = {"root": str(tmp_path / "lake"), "missing": str(tmp_path / "no" / "lake"),
             "afile": str(tmp_path / "afile")}
    def fill(text: str) -> str:
        for k, v in paths.items():
            text = text.replace("{" + k + "}", v)
        return text

    argv = [fill(a) for a in argv]
    named = fill(named)
    before = tree(tmp_path)
    code, out, err = run_cli(capsys, *argv)
    assert (code, out) == (2, "")
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("lakevilla: ") and named in err
    if "--min-age" in argv:
        assert "force=True" not in err
    code, out, err = run_cli(capsys, *argv, "--json")
    assert (code, err) == (2, "")
    assert json.loads(out)["error"]["type"] == kind and named in json.loads(out)["error"]["message"]
    assert tree(tmp_path) == before


def test_an_unexpected_error_is_one_line_and_debug_shows_the_traceback(local_backend, capsys,
                                                                       monkeypatch):
    from lakevilla.lake import Lake

    local_backend.lake().create_table("a", T)

    def broken(self):
        raise KeyError("surprise")

    monkeypatch.setattr(Lake, "tables", broken)
    code, out, err = run_cli(capsys, "tables", local_backend.uri)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "unexpected KeyError" in err
    code, out, err = run_cli(capsys, "tables", local_backend.uri, "--json")
    assert code == 2 and json.loads(out)["error"]["type"] == "KeyError"
    root = local_backend.uri
    for argv in (["--debug", "tables", root], ["tables", root, "--debug"]):
        code, out, err = run_cli(capsys, *argv)
        assert code == 2 and "Traceback" in err and "surprise" in err


@pytest.mark.parametrize("before", [True, False], ids=["before-command", "after-command"])
def test_global_options_go_before_or_after_the_command(local_backend, capsys, before):
    local_backend.lake().create_table("a", T)
    root = local_backend.uri

    def run(command: list[str], *options: str) -> tuple[int, str, str]:
        argv = [*options, *command] if before else [*command, *options]
        return run_cli(capsys, *argv)

    code, out, err = run(["status", root], "--json", "--marker-ttl", "7")
    assert (code, err) == (0, "") and json.loads(out)["marker_ttl"] == 7.0
    code, out, err = run(["tables", root], "--storage-options", "{bad")
    assert code == 2 and "--storage-options is not valid JSON" in err
    code, out, err = run(["tables", root], "--storage-options", "{}", "--json")
    assert (code, json.loads(out)) == (0, {"tables": ["a"]})
    code, out, err = run(["history", root, "a"], "--json", "--debug")
    assert code == 0 and json.loads(out)["table"] == "a"


def test_cleanup_prints_text_unless_json(local_backend, capsys):
    local_backend.lake().create_table("a", T)
    code, out, _ = run_cli(capsys, "cleanup", local_backend.uri)
    assert code == 0 and out.startswith("deleted 0 transaction record(s)") and "{" not in out
    code, out = as_json(capsys, "cleanup", local_backend.uri)
    assert code == 0 and out == {"records": 0, "sublogs": 0, "global_entries": 0,
                                 "ride_objects": 0}


def test_version_help_and_python_dash_m(capsys):
    import subprocess
    import sys

    import lakevilla
    from lakevilla.cli import COMMANDS, parser

    code, out, _ = run_cli(capsys, "--version")
    assert (code, out.strip()) == (0, f"lakevilla {lakevilla.__version__}")
    texts = [parser().format_help()]
    for c in COMMANDS:
        code, out, _ = run_cli(capsys, c.name, "--help")
        assert code == 0
        texts.append(out)
    assert all("``" not in t for t in texts), [t for t in texts if "``" in t]
    proc = subprocess.run([sys.executable, "-m", "lakevilla", "--version"], capture_output=True,
                          text=True, timeout=120)
    assert (proc.returncode, proc.stdout.strip()) == (0, f"lakevilla {lakevilla.__version__}")
