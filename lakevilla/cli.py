"""``lakevilla``: operate a lake from the shell (status, recovery, abandoned files, clean-up).

Every command takes ``--json``: one JSON object on stdout, in the shape README.md documents
(errors too: ``{"error": {"type": ..., "message": ...}}``, exit status 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import LakeVillaError


@dataclass
class Command:
    """One subcommand: its arguments, what it computes (JSON-able) and how that reads as text."""

    name: str
    help: str
    run: Callable[[Any, argparse.Namespace], Any]
    text: Callable[[Any], str]
    arguments: Callable[[argparse.ArgumentParser], None] = lambda p: None


def _lake(args: argparse.Namespace):
    from .lake import Lake

    opts = json.loads(args.storage_options) if args.storage_options else None
    return Lake(args.root, storage_options=opts, marker_ttl=args.marker_ttl)


def _jsonable(result: Any) -> Any:
    return result.to_json() if hasattr(result, "to_json") else result


# -- commands --------------------------------------------------------------------

def _tables(lake, args) -> dict[str, Any]:
    return {"tables": lake.tables()}


def _recover(lake, args):
    return lake.recover()


def _abandoned(lake, args) -> dict[str, Any]:
    files = lake.maintenance.delete_abandoned_files(min_age=args.min_age, dry_run=not args.delete, force=args.force)
    return {"files": [{"table": t, "key": k} for t, k in files], "deleted": bool(args.delete)}


def _abandoned_text(r: dict[str, Any]) -> str:
    print(f"{len(r['files'])} abandoned file(s){' deleted' if r['deleted'] else ''}", file=sys.stderr)
    return "\n".join(f"{f['table']}\t{f['key']}" for f in r["files"])


def _cleanup(lake, args) -> dict[str, int]:
    return lake.maintenance.cleanup(older_than=args.older_than, force=args.force)


def _history(lake, args) -> dict[str, Any]:
    versions = []
    for v, c in lake.iter_history(args.table):
        info = c.commit_info or {}
        versions.append({"version": v, "operation": info.get("operation", ""), "timestamp": info.get("timestamp"),
                         "adds": len(c.adds), "removes": len(c.removes), "lakevilla": c.lakevilla})
    return {"table": args.table, "versions": versions}


def _history_text(r: dict[str, Any]) -> str:
    lines = []
    for e in r["versions"]:
        lv = e["lakevilla"] or {}
        what = lv.get("kind", "")
        if what == "marker":
            what = f"marker {lv.get('state')} txn={lv.get('attempt')}"
        elif what == "commit":
            what = f"txn={lv.get('attempt')} features={lv.get('features')!r}"
        lines.append(f"{e['version']:>6}  {e['operation']:18} +{e['adds']} -{e['removes']}  {what}")
    return "\n".join(lines)


def _status(lake, args):
    return lake.status()


def _status_text(st) -> str:
    from .status import render_text

    return render_text(st)


def _force_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="allow a retention below max transaction age (every writer must use a shorter one)")


COMMANDS = [
    Command("status", "open markers, running/waiting/stalled/decided transactions, the global log",
            _status, _status_text),
    Command("tables", "list the Delta tables under ROOT", _tables, lambda r: "\n".join(r["tables"])),
    Command("recover", "finish or undo every stalled transaction", _recover, str),
    Command("abandoned", "list data files no version references", _abandoned, _abandoned_text,
            lambda p: (p.add_argument("--delete", action="store_true", help="delete them"),
                       p.add_argument("--min-age", type=float, default=None, help="seconds (default 7 days)"),
                       _force_argument(p))),
    Command("cleanup", "delete finished transaction records and old global log entries", _cleanup, json.dumps,
            lambda p: (p.add_argument("--older-than", type=float, default=None, help="seconds (default 7 days)"),
                       _force_argument(p))),
    Command("history", "show a table's versions, markers included", _history, _history_text,
            lambda p: p.add_argument("table")),
]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lakevilla", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--storage-options", help="JSON object of delta-rs style keys (AWS_ENDPOINT_URL, ...)")
    p.add_argument("--marker-ttl", type=float, default=30.0, help="seconds before a marker counts as stalled")
    sub = p.add_subparsers(dest="cmd", required=True)
    for c in COMMANDS:
        sp = sub.add_parser(c.name, help=c.help)
        sp.add_argument("root", help="lake root: a path, file:// or s3:// URI")
        sp.add_argument("--json", action="store_true", help="one JSON object on stdout (shape: README.md)")
        c.arguments(sp)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    cmd = next(c for c in COMMANDS if c.name == args.cmd)
    try:
        lake = _lake(args)
        try:
            result = cmd.run(lake, args)
        finally:
            lake.close()
    except LakeVillaError as e:
        if args.json:
            print(json.dumps({"error": {"type": type(e).__name__, "message": str(e)}}))
        else:
            print(f"lakevilla: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(_jsonable(result), default=str))
    else:
        text = cmd.text(result)
        if text:
            print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
