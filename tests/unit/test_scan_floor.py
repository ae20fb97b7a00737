"""The cleared range of a table's log (``markers/floor.py``): a scan for running markers that
starts past it never skips one, whatever order scans of different windows come in, as markers
are claimed at the tail and close."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lakevilla.markers.floor import scan_start, scanned


class _Log:
    """Stands for a DeltaLog: the range is kept per log object."""


ops = st.lists(st.one_of(
    st.tuples(st.just("claim"), st.lists(st.booleans(), min_size=1, max_size=6)),
    st.tuples(st.just("close"), st.integers(0, 10 ** 6)),
    st.tuples(st.just("scan"), st.integers(0, 10 ** 6), st.integers(1, 12)),
), max_size=60)


@settings(max_examples=400, deadline=None)
@given(ops=ops)
def test_a_scan_past_the_cleared_range_skips_no_running_marker(ops):
    """The model: versions 0..tail-1, some of them running markers. New versions (some of them
    markers) come only at the tail; a running marker closes for good. A scan by the holder of
    a marker at ``m`` looks at ``(lo, m)`` with ``lo = m - window`` (the old rule: the last
    checkpoint known, at most a window back); it may skip ``(lo, start]``."""
    log = _Log()
    tail, running = 0, set()
    for op in ops:
        if op[0] == "claim":
            for is_marker in op[1]:
                if is_marker:
                    running.add(tail)
                tail += 1
        elif op[0] == "close" and running:
            running.discard(sorted(running)[op[1] % len(running)])
        elif op[0] == "scan" and tail:
            m = op[1] % tail
            lo = max(-1, m - op[2])
            start = scan_start(log, lo)
            skipped = [v for v in running if lo < v <= start and v < m]
            assert not skipped, (lo, start, m, sorted(running))
            left = [v for v in running if start < v < m]
            scanned(log, start, min(left + [m]))
