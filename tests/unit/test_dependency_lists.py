"""Dependency lists (rule II, ``complex_txn/dag.py``): a waiter observes every predecessor on
every table each wait round, mostly the same lists again. What it keeps from earlier rounds
never changes what it publishes: the list is always the one the latest rounds' lists make."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lakevilla.complex_txn.dag import Dependencies, tag
from lakevilla.markers.marker import MarkerPayload

ME = "a5"
ATTEMPTS = ["a1", "a2", "a3", "a4", ME]
TABLES = ["t", "u"]
dep = st.sampled_from([tag(a, e) for a in ATTEMPTS for e in (0, 1)] + ATTEMPTS)
pred = st.tuples(st.sampled_from(ATTEMPTS[:-1]), st.integers(0, 1),
                 st.lists(dep, max_size=4))
ops = st.lists(st.one_of(
    st.tuples(st.just("observe"), st.sampled_from(TABLES), st.lists(pred, max_size=3)),
    st.tuples(st.just("shift")),
    st.tuples(st.just("publish")),
), max_size=40)


def _payload(table: str, attempt: str, epoch: int, deps: list[str]) -> MarkerPayload:
    return MarkerPayload(txn=attempt, attempt=attempt, table=table, decision="record",
                         mode="tail", deps=list(deps), epoch=epoch)


def _expected(latest: dict[str, list[tuple[str, int, list[str]]]]) -> frozenset[str]:
    """What the lists read last on each table make, worked out from scratch."""
    out: set[str] = set()
    for preds in latest.values():
        for attempt, epoch, deps in preds:
            out.add(tag(attempt, epoch))
            out.update(deps)
    return frozenset(d for d in out if d != ME and not d.startswith(ME + "#"))


@settings(max_examples=300, deadline=None)
@given(ops=ops)
def test_the_published_list_is_what_the_latest_rounds_lists_make(ops):
    deps = Dependencies(ME)
    latest: dict[str, list[tuple[str, int, list[str]]]] = {}
    published: frozenset[str] = frozenset()
    for op in ops:
        if op[0] == "observe":
            _, table, preds = op
            preds = list({(a, e): (a, e, d) for a, e, d in preds}.values())  # one marker each
            deps.observe(table, [_payload(table, a, e, d) for a, e, d in preds])
            latest[table] = preds
        elif op[0] == "shift":
            deps.shifted()
            latest, published = {}, frozenset()
        else:
            if deps.needs_publish():
                published = frozenset(deps.mark_published())
        assert deps.transitive == _expected(latest)
        assert deps.needs_publish() == (_expected(latest) != published)


def test_a_list_read_again_unchanged_is_not_made_again():
    """The cost the cache removes: the same lists, read into new payload objects each round,
    keep the sets already made; a changed one is made anew and changes what is published."""
    deps = Dependencies(ME)
    deps.observe("t", [_payload("t", "a1", 0, ["a2#0", "a3#0"])])
    kept = deps.preds["t"]["a1#0"]
    assert deps.mark_published() == ["a1#0", "a2#0", "a3#0"]
    deps.observe("t", [_payload("t", "a1", 0, ["a2#0", "a3#0"])])
    assert deps.preds["t"]["a1#0"] is kept and not deps.needs_publish()
    deps.observe("t", [_payload("t", "a1", 0, ["a2#0"])])
    assert deps.needs_publish() and deps.mark_published() == ["a1#0", "a2#0"]
    deps.observe("t", [])
    assert deps.needs_publish() and deps.mark_published() == []
