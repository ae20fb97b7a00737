"""Every public name has a docstring: what ``lakevilla`` exports, and every public method of
``Lake``, ``Transaction`` and the objects they hand out (maintenance, history, merge)."""

from __future__ import annotations

import inspect

import lakevilla as lv
from lakevilla.maintenance import Maintenance
from lakevilla.statements.merge import MergeBuilder


def _missing(obj: object) -> list[str]:
    out = []
    for name, member in inspect.getmembers(obj):
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            documented = bool(member.__doc__ or inspect.getdoc(member.fget))
        elif inspect.isfunction(member):
            documented = bool(inspect.getdoc(member))
        else:
            continue
        if not documented:
            out.append(f"{getattr(obj, '__name__', obj)}.{name}")
    return out


def test_every_exported_name_has_a_docstring():
    assert [n for n in lv.__all__ if not inspect.getdoc(getattr(lv, n))] == []


def test_every_public_method_of_the_api_has_a_docstring():
    missing = []
    for cls in (lv.Lake, lv.Transaction, Maintenance, MergeBuilder, lv.HistoryEntry,
                lv.CommitResult, lv.RecoveryReport, lv.LakeSettings):
        missing += _missing(cls)
    assert missing == []
