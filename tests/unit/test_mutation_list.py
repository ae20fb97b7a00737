"""The mutation check (``python -m tests.mutations``) is not part of ``make test``, but its
list must not rot: every mutation's snippet still occurs exactly once in today's source, and
every test it names still exists, parameters included (a moved or renamed test would otherwise
leave its mutation running nothing, or failing for the wrong reason)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
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


def test_every_node_id_a_mutation_names_is_collected():
    """Exactly as the runner passes them to pytest: a node id that names a parameter set that
    no longer exists, or a file that moved, is "not found" by pytest's collection."""
    ids = sorted({t for m in mutations.MUTATIONS for t in m.tests if "::" in t})
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p",
                          "no:cacheprovider", "-o", "addopts=", *ids], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    collected = {ln.strip() for ln in out.stdout.splitlines() if "::" in ln}
    missing = [t for t in ids
               if t not in collected and not any(c.startswith(t + "[") for c in collected)]
    assert out.returncode == 0 and missing == [], (missing, out.stdout[-2000:] + out.stderr[-2000:])
