"""``lakevilla``: operate a lake from the shell (status, recovery, abandoned files, clean-up).

Every command takes ``--json``: one JSON object on stdout, in the shape README.md documents
(errors too: ``{"error": {"type": ..., "message": ...}}``, exit status 2). Any error is one line
(or that object), never a traceback unless ``--debug``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from .errors import InvalidArgumentError, LakeNotFoundError, LakeVillaError

DESCRIPTION = """Operate a lakevilla lake from the shell: see what is running, finish or undo
stalled transactions, find and delete abandoned files, clean up finished transactions.

Every command takes --json: one JSON object on stdout, in the shape README.md documents.
An error prints one line (with --json: {"error": {"type": ..., "message": ...}}) and exits
with status 2; --debug shows the traceback as well. These options, --storage-options and
--marker-ttl go before the command or after it alike."""

# The API's spelling of an option, as the CLI spells it, for messages the API words
_CLI_SPELLING = {"force=True": "--force", "min_age=": "--min-age ", "older_than=": "--older-than "}


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one line (a JSON object with --json) and
    exit status 2, like every other error of the command."""

    json_errors = False

    def error(self, message: str) -> NoReturn:
        _report("UsageError", f"{message} (see {self.prog} --help)", self.json_errors)
        raise SystemExit(2)


def _report(kind: str, message: str, as_json: bool) -> None:
    for api, cli in _CLI_SPELLING.items():
        message = message.replace(api, cli)
    message = " ".join(message.split())  # one line, whatever the message held
    if as_json:
        print(json.dumps({"error": {"type": kind, "message": message}}))
    else:
        print(f"lakevilla: {message}", file=sys.stderr)


@dataclass
class Command:
    """One subcommand: its arguments, what it computes (JSON-able) and how that reads as text."""

    name: str
    help: str
    run: Callable[[Any, argparse.Namespace], Any]
    text: Callable[[Any], str]
    # adds them (result unused)
    arguments: Callable[[argparse.ArgumentParser], object] = lambda p: None


def _storage_options(text: str | None) -> dict[str, str] | None:
    if not text:
        return None
    try:
        opts = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidArgumentError(
            f"--storage-options is not valid JSON ({e.msg} at character {e.pos}): pass an "
            """object such as '{"AWS_REGION": "eu-west-1"}'""") from e
    if not isinstance(opts, dict):
        raise InvalidArgumentError("--storage-options must be a JSON object of keys to values, "
                                   f"got {type(opts).__name__}")
    return {str(k): str(v) for k, v in opts.items()}


def _lake(args: argparse.Namespace):
    """The lake at ROOT, which must exist: every command looks at (or tidies) a lake, none
    creates one."""
    from .lake import Lake

    lake = Lake(args.root, storage_options=_storage_options(args.storage_options),
                marker_ttl=args.marker_ttl)
    if not lake.store.root_exists():
        lake.close()
        raise LakeNotFoundError(f"there is no lake at {lake.root_uri}: the folder does not exist")
    return lake


def _jsonable(result: Any) -> Any:
    return result.to_json() if hasattr(result, "to_json") else result


# -- commands --------------------------------------------------------------------

def _tables(lake, args) -> dict[str, Any]:
    return {"tables": lake.tables()}


def _recover(lake, args):
    return lake.recover(older_than=args.older_than, force=args.force)


def _abandoned(lake, args) -> dict[str, Any]:
    files = lake.maintenance.delete_abandoned_files(min_age=args.min_age, dry_run=not args.delete,
                                                    force=args.force)
    return {"files": [{"table": t, "key": k} for t, k in files], "deleted": bool(args.delete)}


def _abandoned_text(r: dict[str, Any]) -> str:
    print(f"{len(r['files'])} abandoned file(s){' deleted' if r['deleted'] else ''}",
          file=sys.stderr)
    return "\n".join(f"{f['table']}\t{f['key']}" for f in r["files"])


def _cleanup(lake, args) -> dict[str, int]:
    return lake.maintenance.cleanup(older_than=args.older_than, force=args.force)


def _cleanup_text(r: dict[str, int]) -> str:
    return (f"deleted {r['records']} transaction record(s), {r['sublogs']} sublog object(s), "
            f"{r['global_entries']} global log entries, {r.get('ride_objects', 0)} group "
            "commit object(s)")


def _history(lake, args) -> dict[str, Any]:
    return {"table": args.table,
            "versions": [e.to_json() for e in lake.history(args.table, args.limit)]}


def _history_text(r: dict[str, Any]) -> str:
    lines = []
    for e in r["versions"]:
        when = dt.datetime.fromtimestamp(e["timestamp"], dt.UTC).strftime(
            "%Y-%m-%d %H:%M:%S.%f")[:-3]
        rows = e["metrics"].get("numOutputRows")
        if e["marker"]:
            who = f"marker {e['parameters'].get('state', '')}".rstrip()
        else:
            who = f"txn {e['txn']} features={e['features'] or 'DL'}" if e["txn"] else ""
        what = e["operation"] + (f" ({rows} rows)" if rows is not None else "")
        lines.append(f"{e['version']:>6}  {when} UTC  {what:28} {who}".rstrip())
    return "\n".join(lines)


def _status(lake, args):
    return lake.status(idle_after=args.idle_after)


def _status_text(st) -> str:
    from .status import render_text

    return render_text(st)


def _force_argument(p: argparse.ArgumentParser) -> argparse.Action:
    return p.add_argument("--force", action="store_true",
                   help="allow a retention below the lake's max transaction age (safe only "
                        "if every writer uses a shorter one)")


COMMANDS = [
    Command("status", "open markers, running/waiting/stalled/idle/decided transactions, the "
            "global log", _status, _status_text,
            lambda p: p.add_argument("--idle-after", type=float, default=None,
                                     help="seconds without a write after which a transaction "
                                          "holding no marker shows as idle (default 60, or the "
                                          "marker ttl if longer)")),
    Command("tables", "list the Delta tables under ROOT", _tables,
            lambda r: "\n".join(r["tables"])),
    Command("recover", "finish or undo every stalled transaction", _recover, str,
            lambda p: (p.add_argument("--older-than", type=float, default=None,
                                      help="seconds: also roll back transactions holding no "
                                           "marker that wrote nothing for that long (their "
                                           "clients declared dead; 60 at least)"),
                       p.add_argument("--force", action="store_true",
                                      help="ignore expiry and the idle floor: only when no "
                                           "client is writing"))),
    Command("abandoned", "list data files no version references", _abandoned, _abandoned_text,
            lambda p: (p.add_argument("--delete", action="store_true", help="delete them"),
                       p.add_argument("--min-age", type=float, default=None,
                                      help="seconds (default 7 days)"),
                       _force_argument(p))),
    Command("cleanup", "delete finished transaction records and old global log entries", _cleanup,
            _cleanup_text,
            lambda p: (p.add_argument("--older-than", type=float, default=None,
                                      help="seconds (default 7 days)"),
                       _force_argument(p))),
    Command("history", "show a table's versions, newest first, markers included (times in UTC; "
            "--json gives seconds since the epoch)", _history, _history_text,
            lambda p: (p.add_argument("table"),
                       p.add_argument("--limit", type=int, default=None,
                                      help="show at most this many versions"))),
]


def _global_options(p: argparse.ArgumentParser, top: bool) -> None:
    """The options every command shares, accepted before the command and after it alike: the
    parser before it sets the defaults, the one after it only what was given (SUPPRESS), so a
    value given before the command is not reset by the command's parser."""
    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    p.add_argument("--json", action="store_true", default=default(False),
                   help="print one JSON object on stdout (shape: README.md)")
    p.add_argument("--storage-options", default=default(None),
                   help="a JSON object of delta-rs style keys (AWS_ENDPOINT_URL, ...)")
    p.add_argument("--marker-ttl", type=float, default=default(30.0),
                   help="seconds before a marker counts as stalled")
    p.add_argument("--debug", action="store_true", default=default(False),
                   help="on an error, print the traceback too")


def parser(json_errors: bool = False) -> argparse.ArgumentParser:
    from . import __version__

    Parser.json_errors = json_errors
    p = Parser(prog="lakevilla", description=DESCRIPTION,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"lakevilla {__version__}")
    _global_options(p, top=True)
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for c in COMMANDS:
        sp = sub.add_parser(c.name, help=c.help, description=c.help[:1].upper() + c.help[1:] + ".")
        sp.add_argument("root", help="the lake root: a path, a file:// URI or an s3:// URI")
        _global_options(sp, top=False)
        c.arguments(sp)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv  # known before parsing, so that usage errors speak JSON too
    args = parser(json_errors=as_json).parse_args(argv)
    cmd = next(c for c in COMMANDS if c.name == args.cmd)
    try:
        lake = _lake(args)
        try:
            result = cmd.run(lake, args)
        finally:
            lake.close()
        out = json.dumps(_jsonable(result), default=str) if args.json else cmd.text(result)
    except KeyboardInterrupt:
        print("lakevilla: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the one boundary: every error becomes one line
        if args.debug:
            traceback.print_exc()
        message = str(e) if isinstance(e, LakeVillaError) else (
            f"unexpected {type(e).__name__}: {e} (a bug in lakevilla: please report it with the "
            "traceback that --debug prints)")
        _report(type(e).__name__, message, args.json)
        return 2
    if out:
        try:
            print(out, flush=True)
        except BrokenPipeError:  # `lakevilla status ROOT | head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
