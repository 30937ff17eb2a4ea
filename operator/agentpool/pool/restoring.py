"""Taking agents back after an operator restart, and holding an agent until it reports idle.

A restarted operator knows nothing of who held which agent. :func:`bound_lease_agents` reads
from the pool's leases which agents Bound leases hold; the others are asked ``GET /status``, and
one busy with an item is held until it reports idle. The same wait holds an agent still working
on a cast item, or on one whose run stopped mid-call. :class:`IdleWatch` decides when such a wait
gives up: past a deadline, or once the agent has been silent too long. Called by
:mod:`agentpool.handlers.recovery`; pure, with ``now`` given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from agentpool.api.raw import RawBody


def bound_lease_agents(leases: Iterable[RawBody], pool: str) -> list[tuple[str, str]]:
    """(lease name, agent) for each Bound lease of ``pool`` that names its agent."""
    bound = []
    for lease in leases:
        spec, status = lease.get("spec") or {}, lease.get("status") or {}
        agent = status.get("agent")
        if (spec.get("poolRef") or {}).get("name") != pool or not agent:
            continue
        if status.get("phase") != "Bound":
            continue
        bound.append((str(lease["metadata"]["name"]), str(agent)))
    return bound


@dataclass(frozen=True, slots=True)
class IdleWatch:
    """Waiting for a busy agent to report idle: when to give up.

    ``deadline`` (a monotonic time) ends the wait however the agent answers; ``silence_seconds``
    ends it once the agent has answered nothing for longer than that. Either may be None.
    """

    deadline: float | None = None
    silence_seconds: float | None = None
    silent_since: float | None = None

    def open(self, now: float) -> bool:
        """The deadline, if any, has not passed."""
        return self.deadline is None or now < self.deadline

    def heard(self, *, answered: bool, now: float) -> IdleWatch | None:
        """The watch after an answer that was not "idle" (``answered``) or no answer at all;
        None once the agent has been silent longer than ``silence_seconds``."""
        if answered:
            return dataclasses.replace(self, silent_since=None)
        if self.silent_since is None:
            return dataclasses.replace(self, silent_since=now)
        if self.silence_seconds is not None and now - self.silent_since > self.silence_seconds:
            return None
        return self
