"""The pool's size Events: each says how many agents there were and are, as counted."""

from __future__ import annotations

import pytest

from agentpool.pool.resizing import SizeEvent, size_events


@pytest.mark.parametrize(
    ("before", "retired", "scaled_down", "created", "waiting", "events"),
    [
        # A new pool starts its minSize.
        (0, 0, 0, 2, 0, [("ScaledUp", "Scaled up from 0 to 2 agents")]),
        (0, 0, 0, 1, 0, [("ScaledUp", "Scaled up from 0 to 1 agent")]),
        # Demand grows it; the message says for whom.
        (1, 0, 0, 1, 1, [("ScaledUp", "Scaled up from 1 to 2 agents for 1 waiting checkout")]),
        (2, 0, 0, 2, 3, [("ScaledUp", "Scaled up from 2 to 4 agents for 3 waiting checkouts")]),
        # Only one of three pods could be created: the count says one.
        (1, 0, 0, 1, 0, [("ScaledUp", "Scaled up from 1 to 2 agents")]),
        # A failed agent replaced is no change of size.
        (2, 1, 0, 1, 0, [("AgentReplaced", "Created 1 agent to replace a retired one")]),
        (3, 2, 0, 2, 0, [("AgentReplaced", "Created 2 agents to replace retired ones")]),
        # Replaced and grown in one pass.
        (
            2,
            1,
            0,
            2,
            1,
            [
                ("AgentReplaced", "Created 1 agent to replace a retired one"),
                ("ScaledUp", "Scaled up from 2 to 3 agents for 1 waiting checkout"),
            ],
        ),
        # Idle overflow timed out.
        (3, 1, 1, 0, 0, [("ScaledDown", "Scaled down from 3 to 2 agents")]),
        (1, 1, 1, 0, 0, [("ScaledDown", "Scaled down from 1 to 0 agents")]),
        # maxSize lowered to 1 under three busy agents and one idle: only the idle one goes.
        (4, 1, 1, 0, 0, [("ScaledDown", "Scaled down from 4 to 3 agents")]),
        # A failed agent not replaced (held back) while an idle one times out.
        (3, 2, 1, 0, 0, [("ScaledDown", "Scaled down from 2 to 1 agent")]),
        # Nothing happened.
        (2, 0, 0, 0, 0, []),
    ],
)
def test_size_events_count_what_changed(
    before: int,
    retired: int,
    scaled_down: int,
    created: int,
    waiting: int,
    events: list[tuple[str, str]],
) -> None:
    """Grown, shrunk or replaced, each Event names the sizes before and after as counted,
    never the size the pool aimed at."""
    found = size_events(
        before=before, retired=retired, scaled_down=scaled_down, created=created, waiting=waiting
    )
    assert found == tuple(SizeEvent(reason, message) for reason, message in events)
