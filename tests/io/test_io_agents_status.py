"""Reading an agent's ``GET /status``: busy slots and their items from an agent of any age, and
never a crash on a body that is not the protocol's."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentpool.io.agents import AgentStatus, parse_status


@pytest.mark.parametrize(
    ("body", "busy", "busy_slots", "slots", "items"),
    [
        # An agent from before slots: one slot, "current" names its item.
        ({"busy": False, "current": None, "uses": 3}, False, 0, 1, ()),
        ({"busy": True, "current": "a", "uses": 3}, True, 1, 1, ("a",)),
        # An agent with slots lists its items.
        (
            {"busy": True, "current": "a", "slots": 4, "busySlots": 2, "items": ["a", "b"]},
            True,
            2,
            4,
            ("a", "b"),
        ),
        # Busy with a reset or a lease's hooks: every slot busy, no item.
        ({"busy": True, "current": None, "slots": 2, "busySlots": 2, "items": []}, True, 2, 2, ()),
    ],
)
def test_busy_slots_are_read_from_old_and_new_agents(
    body: dict[str, Any], busy: bool, busy_slots: int, slots: int, items: tuple[Any, ...]
) -> None:
    """What a restarted operator learns of each agent's busy slots."""
    status = parse_status(body)
    assert status is not None
    assert (status.busy, status.busy_slots, status.slots, status.items) == (
        busy,
        busy_slots,
        slots,
        items,
    )


@pytest.mark.parametrize(
    "body",
    [None, [], "busy", {}, {"busy": "yes"}, {"busy": True, "slots": "many"}, {"busy": 1}],
)
def test_a_body_outside_the_protocol_is_no_status(body: Any) -> None:
    """Such an agent counts as silent, never as idle."""
    assert parse_status(body) is None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=10,
)
KEYS = st.sampled_from(["busy", "current", "uses", "slots", "busySlots", "items", "ready"])


@given(st.dictionaries(KEYS, JSON) | JSON)
def test_any_json_is_a_status_or_none_and_busy_agrees_with_busy_slots(body: Any) -> None:
    """Whatever an agent answers, reading it never raises, and a status that is had never
    reports busy slots on an idle agent."""
    status = parse_status(body)
    assert status is None or isinstance(status, AgentStatus)
    if status is not None:
        assert status.busy == (status.busy_slots > 0)
        assert status.slots >= 1
