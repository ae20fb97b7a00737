"""``lakevilla``: maintenance from the command line (recovery, abandoned files, clean-up)."""

from __future__ import annotations

import argparse
import json
import sys

from .errors import LakeVillaError


def _lake(args: argparse.Namespace):
    from .lake import Lake

    opts = json.loads(args.storage_options) if args.storage_options else None
    return Lake(args.root, storage_options=opts, marker_ttl=args.marker_ttl)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="lakevilla", description=__doc__)
    p.add_argument("--storage-options", help="JSON object of delta-rs style keys (AWS_ENDPOINT_URL, ...)")
    p.add_argument("--marker-ttl", type=float, default=30.0, help="seconds before a marker counts as stalled")
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, help_ in (("tables", "list the Delta tables under ROOT"),
                        ("recover", "finish or undo every stalled transaction"),
                        ("abandoned", "list data files no version references"),
                        ("cleanup", "delete finished transaction records and old global log entries"),
                        ("history", "show a table's versions, markers included")):
        sp = sub.add_parser(name, help=help_)
        sp.add_argument("root", help="lake root: a path, file:// or s3:// URI")
        if name == "history":
            sp.add_argument("table")
        if name == "abandoned":
            sp.add_argument("--delete", action="store_true", help="delete them")
            sp.add_argument("--min-age", type=float, default=None, help="seconds (default 7 days)")
        if name == "cleanup":
            sp.add_argument("--older-than", type=float, default=None, help="seconds (default 7 days)")
        if name in ("abandoned", "cleanup"):
            sp.add_argument("--force", action="store_true",
                            help="allow a retention below max transaction age (every writer must use a shorter one)")
    args = p.parse_args(argv)
    try:
        lake = _lake(args)
        if args.cmd == "tables":
            for t in lake.tables():
                print(t)
        elif args.cmd == "recover":
            print(lake.recover())
        elif args.cmd == "abandoned":
            files = lake.delete_abandoned_files(min_age=args.min_age, dry_run=not args.delete, force=args.force)
            for t, k in files:
                print(f"{t}\t{k}")
            print(f"{len(files)} abandoned file(s){' deleted' if args.delete else ''}", file=sys.stderr)
        elif args.cmd == "cleanup":
            print(json.dumps(lake.cleanup(older_than=args.older_than, force=args.force)))
        elif args.cmd == "history":
            for v, c in lake.iter_history(args.table):
                lv = c.lakevilla or {}
                what = lv.get("kind", "")
                if what == "marker":
                    what = f"marker {lv.get('state')} txn={lv.get('attempt')}"
                elif what == "commit":
                    what = f"txn={lv.get('attempt')} features={lv.get('features')!r}"
                print(f"{v:>6}  {(c.commit_info or {}).get('operation', ''):18} +{len(c.adds)} -{len(c.removes)}  {what}")
    except LakeVillaError as e:
        print(f"lakevilla: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
