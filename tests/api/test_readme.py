"""README.md's Python blocks run as written, in order, in a fresh folder, with only the lake root
substituted. A block preceded by ``<!-- readme-test: spark -->`` needs ``spark`` (a local
SparkSession): it runs in the Spark sequence, which runs every block; the other sequence runs
the rest, so they must not depend on a Spark block. ``<!-- readme-test: skip -->`` is for
pseudo-code only (none today)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
ROOT_IN_README = "file:///data/lake"
MARK = re.compile(r"<!--\s*readme-test:\s*(\w+)\s*-->")


@dataclass
class Block:
    line: int  # of the opening fence
    code: str
    mark: str | None  # "spark", "skip" or None


def python_blocks(text: str) -> list[Block]:
    """Every fenced ``python`` block, with the mark on the closest non-blank line above it."""
    lines = text.splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i
            body: list[str] = []
            i += 1
            while lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            above = next((ln for ln in reversed(lines[:start]) if ln.strip()), "")
            m = MARK.fullmatch(above.strip())
            out.append(Block(start + 1, "\n".join(body) + "\n", m.group(1) if m else None))
        i += 1
    return out


BLOCKS = python_blocks(README.read_text())


def run_blocks(root_uri: str, spark: Any = None) -> dict[str, Any]:
    """Run the blocks in order in one namespace (Spark blocks only if ``spark`` is given)."""
    import lakevilla as lv

    ns: dict[str, Any] = {"__name__": "__readme__"}
    if spark is not None:
        ns["spark"] = spark
    ran = 0
    try:
        for b in BLOCKS:
            if b.mark == "skip" or (b.mark == "spark" and spark is None):
                continue
            code = compile(b.code.replace(ROOT_IN_README, root_uri), f"README.md:{b.line}", "exec")
            exec(code, ns)  # noqa: S102 - the README's own examples
            ran += 1
    finally:
        for v in list(ns.values()):
            if isinstance(v, lv.Lake):
                v.close()
    ns["__ran__"] = ran
    return ns


def test_the_readme_is_read_whole():
    assert len(BLOCKS) >= 7
    assert {b.mark for b in BLOCKS} <= {None, "spark"}  # nothing skipped
    assert all(ROOT_IN_README in b.code for b in BLOCKS[:1])


def test_readme_python_blocks_run_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "lake"
    ns = run_blocks(f"file://{root}")
    assert ns["__ran__"] == sum(b.mark is None for b in BLOCKS)
    # what the blocks say happened did
    lake = ns["lake"]
    assert lake.read("ledger").to_pylist() == [{"id": 2, "amount": -200}]
    assert (ns["m"]["num_target_rows_updated"], ns["m"]["num_target_rows_deleted"],
            ns["m"]["num_target_rows_inserted"]) == (1, 1, 1)
    assert "source" in lake.schema("events").names and "country" in lake.schema("events").names
    assert sorted(lake.read("daily", columns=["day", "sales"]).to_pylist(), key=str) == [
        {"day": "2026-11-22", "sales": 120}, {"day": "2026-11-23", "sales": 95}]


@pytest.mark.spark
def test_readme_python_blocks_run_in_order_with_spark(tmp_path, monkeypatch):
    from tests.spark_session import start_local_spark

    monkeypatch.chdir(tmp_path)
    spark = start_local_spark()
    ns = run_blocks(f"file://{tmp_path / 'lake'}", spark)
    assert ns["__ran__"] == len(BLOCKS)
    lake = ns["lake"]
    assert sorted(lake.read("eu_orders", columns=["id"]).column("id").to_pylist()) == [1, 3]
    assert lake.read("orders", where="copied").column("id").to_pylist() == [1]
    assert ns["spark_lake"].read("orders").count() == 2
