"""The mutation check (``python -m tests.mutations``) is not part of ``make test``, but its
list must not rot: every mutation's snippet still occurs exactly once in today's source, and
every test it names still exists."""

from __future__ import annotations

import re
from pathlib import Path

from tests import mutations

ROOT = Path(__file__).resolve().parents[2]


def test_every_mutation_still_applies_to_the_source():
    mutations.check_all_apply(mutations.MUTATIONS)  # exits naming the stale mutation
    assert len(mutations.MUTATIONS) >= 30


def test_every_test_a_mutation_names_exists():
    missing = []
    for m in mutations.MUTATIONS:
        for t in m.tests:
            path, _, rest = t.partition("::")
            if not path.endswith(".py"):
                continue  # a -k expression or an option
            text = (ROOT / path).read_text() if (ROOT / path).exists() else ""
            name = re.sub(r"\[.*$", "", rest)
            if not text or (name and f"def {name}(" not in text):
                missing.append((m.name, t))
    assert missing == []
