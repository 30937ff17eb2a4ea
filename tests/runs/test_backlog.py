"""The items waiting to start: in order, put back at the front, parked for a missing pool.

Unit tests of :class:`Work` and :class:`Backlog`.
"""

from __future__ import annotations

from agentpool.runs.backlog import Backlog, Work


def work(key: str, pool: str = "workers", attempt: int = 1) -> Work:
    return Work(key=key, index=0, value={}, pool=pool, attempt=attempt)


def test_a_retry_is_the_next_attempt_and_a_refusal_the_same_one() -> None:
    """A failed attempt is followed by the next; a refused one is made again, and each notes
    the agent, so the next checkout prefers another."""
    first = work("a")
    assert first.retried("pod-1") == Work("a", 0, {}, "workers", attempt=2, last_agent="pod-1")
    assert first.refused_by("pod-1") == Work("a", 0, {}, "workers", last_agent="pod-1", refused=1)
    assert first.attempt == 1, "work is a value: the original stays as it was"


def test_items_start_in_order_and_those_put_back_first() -> None:
    """Items start in the order they came; one that found no agent, and retries due, go
    before the rest, retries in their own order."""
    backlog = Backlog()
    for key in "abc":
        backlog.add(work(key))
    assert backlog.first() == work("a")
    backlog.take_first()
    backlog.put_back(work("x"))
    backlog.put_back_all([work("r1", attempt=2), work("r2", attempt=2)])
    assert list(backlog.keys()) == ["r1", "r2", "x", "b", "c"]
    assert backlog.upcoming(2) == [("r1", 2), ("r2", 2)]
    assert len(backlog) == 5


def test_items_of_a_missing_pool_are_parked_and_named_as_the_cause() -> None:
    """Once a pool is known missing its items are parked as they come to the front; the cause
    is reported only while some item is parked."""
    backlog = Backlog()
    assert list(backlog.missing()) == []
    backlog.add(work("a", pool="gone"))
    backlog.add(work("b"))
    backlog.add(work("c", pool="gone"))
    backlog.park(work("first", pool="gone"), 'pool "gone" not found')
    assert backlog.upcoming(5) == [("b", 1)]
    assert backlog.first() == work("b")
    backlog.take_first()
    assert backlog.first() is None
    assert len(backlog) == 0
    assert list(backlog.missing()) == ['pool "gone" not found']
