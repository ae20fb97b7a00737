"""What the feature sets the guarantee tables leave out are made of (``txn/parts.py``), so that
``docs/choosing-features.md`` can say what they give: with I, CT changes no part (``R,I`` is
``R,CT,I``, ``CT,I`` is ``I``: the global log decides every table at once); ``CT`` is ``R,CT``
without sublogs, so a conflict aborts instead of being redone."""

from __future__ import annotations

import pytest


def _parts(lake, features: str, mode: str) -> dict[str, object]:
    txn = lake.begin(features, commit_mode=mode)
    p = txn._parts
    out = {"decider": type(p.decider).__name__, "journal": type(p.journal).__name__,
           "behind": p.journal._behind, "wait": type(p.markers.waits).__name__,
           "reader": type(p.reader).__name__, "claims": type(p.runner.claims).__name__,
           "read_wait": type(p.runner.read_wait).__name__,
           "conflicts": type(p.decider.validator.conflicts).__name__,
           "decision": txn._ctx.decision, "says_changes": p.markers.says_changes}
    txn.abort()
    return out


@pytest.mark.parametrize("mode", ["tail", "in_place"])
def test_with_i_ct_changes_no_part_and_ct_alone_is_r_ct_without_redo(local_backend, mode):
    lake = local_backend.lake()
    assert _parts(lake, "R,I", mode) == _parts(lake, "R,CT,I", mode)
    assert _parts(lake, "CT,I", mode) == _parts(lake, "I", mode)
    ct, r_ct = _parts(lake, "CT", mode), _parts(lake, "R,CT", mode)
    assert {k for k in ct if ct[k] != r_ct[k]} - {"behind"} == {"journal", "conflicts"}
    assert (ct["journal"], ct["conflicts"], r_ct["journal"], r_ct["conflicts"]) == (
        "NoJournal", "AbortOnConflict", "Journal", "RedoOnConflict")
    assert r_ct["decision"] == "record" and _parts(lake, "R,I", mode)["decision"] == "gvl"
