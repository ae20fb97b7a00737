"""What README.md promises and no other test checked (issue 18, point 7), each boundary
from both sides: markers expire at ``marker_ttl``, clean-up keeps what is younger than
its retention, the global log keeps ``keep_global`` entries; a transaction (not only
``recover()``) finishes or undoes the CT and I transactions it meets; the automatic
checkpoint stays below an open marker; decisions warn about conflicts they cannot undo;
the S3 emulation, ``LocalStore(fsync=True)`` and ``make demo``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_make_demo_runs_the_demo_and_its_guarantees_hold(tmp_path):
    """``make demo`` runs ``python -m lakevilla.demo``; here without its Spark act (the Spark
    tests cover that engine) and with fewer transfers."""
    target = (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert "-m lakevilla.demo" in target
    out = subprocess.run([sys.executable, "-m", "lakevilla.demo", "--no-spark", "--clients", "2",
                          "--transfers", "3", "--lake", str(tmp_path / "demo")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "lakevilla guarantees held." in out.stdout
