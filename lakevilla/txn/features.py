"""The feature sets a transaction can choose, and the isolation levels I offers."""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import InvalidArgumentError

ISOLATIONS = ("serializable", "snapshot", "write_serializable")


def parse_features(features: str | Iterable[str] | None) -> frozenset[str]:
    """``"R,CT,I"``, ``"R+CT"``, a set, ``""``/``"DL"``/None (plain Delta) -> the set."""
    if features is None:
        return frozenset()
    if isinstance(features, str):
        items = [f.strip() for f in features.replace("+", ",").split(",")]
    else:
        items = [str(f).strip() for f in features]
    out = set()
    for f in items:
        if not f:
            continue
        u = f.upper()
        if u in ("DL", "NONE"):
            continue
        if u not in ("R", "CT", "I"):
            raise InvalidArgumentError(f"unknown feature {f!r}: features are any of 'R', 'CT', 'I' "
                                       "(or '' for plain Delta)")
        out.add(u)
    return frozenset(out)
