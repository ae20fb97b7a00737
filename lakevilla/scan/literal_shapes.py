"""Expression text with its literals taken out, so DuckDB's parser runs once per shape.

A statement's ``where`` and ``set`` carry values (``c_id = 1234``), so their texts rarely repeat,
and a parse is a DuckDB call (0.4-1 ms, ~40% of checking an expression). ``shape_of`` replaces
each number and string literal by a fixed one (``1``, ``1.0``, ``''``); the parse of that shape
is cached, and ``fill`` puts the literals back into a copy of its tree, and the query locations
with them, so the tree is the one DuckDB returns for the text itself.

Only text made of a few plain token kinds is shaped; anything else (comments, parameters,
escape strings, typed literals such as ``DATE '...'``, exponents, non-ASCII outside strings) is
parsed as it stands. ``fill`` refuses (None: parse the text itself) unless every literal of
the shape is found as exactly one constant of the tree, as it stands or negated.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Any

# tokens of the shaped subset, in the order they are tried
_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\n]+)
  | (?P<str>'(?:[^'\x00]|'')*')
  | (?P<qid>"(?:[^"\x00]|"")*")
  | (?P<num>[0-9]+(?:\.[0-9]+)?)
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>::|<=|>=|<>|!=|\|\||[-+*/%=<>(),.])
""", re.VERBOSE)

# the keywords a literal may follow: any other word before one may make it a typed literal
# (DATE '2020-01-01', INTERVAL 5 DAY), whose parse may depend on the value, or be a string's
# prefix (E'...', X'...')
_BEFORE_LITERAL = frozenset({"and", "or", "not", "case", "when", "then", "else", "like", "ilike",
                             "glob", "between", "escape", "in"})
_CANONICAL = {"INTEGER": "1", "NUMERIC": "1.0", "STRING": "''"}
_MAX_DIGITS = 18  # longer numbers are parsed as they stand
# longer texts (a list of thousands of keys) are parsed as they stand: their shapes rarely
# repeat, and a cached shape's tree would double what the parse cache holds for them
MAX_SHAPED = 20_000


@dataclass(frozen=True)
class Slot:
    """One literal: where it stands in the shape and in the text, and what it says."""

    kind: str  # INTEGER, NUMERIC, STRING
    at: int  # offset in the shape (UTF-8 bytes, as DuckDB's query locations)
    orig_at: int  # offset in the text (bytes)
    orig_len: int  # bytes
    value: str  # the literal's text as DuckDB reports it (a string unquoted)

    @property
    def length(self) -> int:
        return len(_CANONICAL[self.kind])


@dataclass(frozen=True)
class Shape:
    """A text with its literals replaced by fixed ones, and where each one stood."""

    text: str
    slots: tuple[Slot, ...]


def shape_of(text: str, offset: int = 0) -> Shape | None:
    """The text's shape, or None if it is not made of the shaped tokens alone. ``offset``: where
    the text starts in what is parsed (the parser's wrapper), for the query locations."""
    if len(text) > MAX_SHAPED:
        return None
    out: list[str] = []
    slots: list[Slot] = []
    pos = shaped = 0
    shape_bytes = text_bytes = offset  # DuckDB's query locations count UTF-8 bytes
    prev_word: str | None = None  # the last token if it was a word, else None
    n = len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:
            return None
        kind, tok, end = m.lastgroup, m.group(), m.end()
        if kind == "op" and text.startswith(("--", "/*"), pos):
            return None  # a comment
        if kind in ("num", "str"):
            if prev_word is not None and prev_word.lower() not in _BEFORE_LITERAL:
                return None  # also a string's prefix: E'a\n' is read with its escapes
            if kind == "num":
                nxt = text[end:end + 1]
                if (nxt and (nxt.isalnum() or nxt in "_.")) or text[pos - 1:pos] == ".":
                    return None  # 1e5, 1_000, 0x1f, .5, 1.2.3
                if sum(c.isdigit() for c in tok) > _MAX_DIGITS:
                    return None
                lit = "NUMERIC" if "." in tok else "INTEGER"
                value = tok
            else:
                lit, value = "STRING", tok[1:-1].replace("''", "'")
            between = len(text[shaped:pos].encode())
            shape_bytes += between
            text_bytes += between
            canon, tok_bytes = _CANONICAL[lit], len(tok.encode())
            out += [text[shaped:pos], canon]
            slots.append(Slot(lit, shape_bytes, text_bytes, tok_bytes, value))
            shape_bytes += len(canon)
            text_bytes += tok_bytes
            shaped = end
        if kind != "ws":
            prev_word = tok if kind == "id" else None
        pos = end
    if not slots:
        return None
    out.append(text[shaped:])
    return Shape("".join(out), tuple(slots))


def fill(tree: Any, shape: Shape) -> Any | None:
    """``tree`` (the parse of ``shape.text``, a copy this call may change) with the text's
    literals and query locations; None if a literal cannot be placed for certain."""
    starts = [s.at for s in shape.slots]
    used = [False] * len(shape.slots)

    def where(pos: int) -> int:  # a position in the shape -> in the text
        i = bisect.bisect_right(starts, pos) - 1
        if i < 0:
            return pos
        s = shape.slots[i]
        if pos < s.at + s.length:
            return s.orig_at + min(pos - s.at, s.orig_len)
        return pos - (s.at + s.length) + (s.orig_at + s.orig_len)

    def constant(node: dict, lo: int, hi: int) -> bool:
        inside = [i for i in range(bisect.bisect_left(starts, lo), bisect.bisect_left(starts, hi))
                  if shape.slots[i].at + shape.slots[i].length <= hi]
        if len(inside) != 1 or used[inside[0]]:
            return False
        s = shape.slots[inside[0]]
        lit = node.get("literal")
        if not isinstance(lit, dict) or lit.get("kind") != s.kind:
            return False
        canon = _CANONICAL[s.kind] if s.kind != "STRING" else ""
        text = lit.get("text")
        if text == canon:
            lit["text"] = s.value
        elif s.kind != "STRING" and text == "-" + canon:
            lit["text"] = "-" + s.value
        else:
            return False
        used[inside[0]] = True
        return True

    def walk(node: Any) -> bool:
        if isinstance(node, list):
            return all(walk(x) for x in node)
        if not isinstance(node, dict):
            return True
        loc, length = node.get("query_location"), node.get("query_location_length")
        if isinstance(loc, int) and isinstance(length, int) and loc < 2**63:
            if node.get("class") == "CONSTANT" and not constant(node, loc, loc + length):
                return False
            start = where(loc)
            node["query_location"], node["query_location_length"] = (
                start, where(loc + length) - start if length else 0)
        elif node.get("class") == "CONSTANT":
            return False
        return all(walk(v) for v in node.values() if isinstance(v, (dict, list)))

    if not walk(tree) or not all(used):
        return None
    return tree
