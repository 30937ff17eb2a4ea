"""The broker's bookkeeping records: one per agent, one per waiting checkout, and the idle order.

Kept apart from :mod:`agentpool.broker.broker`, which alone creates and changes them, so that
module reads as the checkout service itself.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
from dataclasses import dataclass, field

from agentpool.broker.handles import Checkout
from agentpool.pool import ObservedAgent, Waiter
from agentpool.pool.checkout import waiter_key


@dataclass(eq=False)
class AgentRecord:
    """The broker's bookkeeping for one agent beside the pod facts it was last told.

    ``holders`` are the checkouts holding its slots, one slot each; ``whole`` means one of them
    (a lease, an agent silent after a restart) holds every slot.
    """

    pod: ObservedAgent
    holders: list[Checkout] = field(default_factory=list)
    whole: bool = False
    uses: int = 0
    consecutive_failures: int = 0
    idle_since: float | None = None
    idle_seq: int = 0
    lost: bool = False
    reset_failed: bool = False
    quarantined: bool = False
    retired: bool = False
    key: tuple[float, int, str] = (0.0, 0, "")

    def holds(self, checkout: Checkout) -> bool:
        """This very checkout (by identity) holds a slot of the agent."""
        return any(held is checkout for held in self.holders)

    def release(self, checkout: Checkout) -> None:
        """The checkout gives its slot (or, if whole, every slot) back."""
        self.holders = [held for held in self.holders if held is not checkout]
        if not self.holders:
            self.whole = False

    def busy_slots(self, slots: int) -> int:
        """Slots held, of ``slots``: all of them when held whole."""
        return max(slots, len(self.holders)) if self.whole else len(self.holders)

    def full(self, slots: int) -> bool:
        """No slot is free to hand out."""
        return self.busy_slots(slots) >= slots

    def lose_holders(self, reason: str) -> bool:
        """The agent's pod is gone: tell every holder, and let them go; whether it had any."""
        holders, self.holders, self.whole = self.holders, [], False
        for held in holders:
            held.mark_lost(reason)
        return bool(holders)

    def view(self, slots: int) -> ObservedAgent:
        """The agent as the pool core sees it: pod facts with the broker's bookkeeping.

        Built field by field rather than with ``dataclasses.replace``, which costs four times as
        much and runs several times for every checkout and checkin (a test holds the two alike).
        """
        pod = self.pod
        return ObservedAgent(
            name=pod.name,
            created_at=pod.created_at,
            scheduled=pod.scheduled,
            ready=pod.ready,
            busy=bool(self.holders),
            busy_slots=self.busy_slots(slots),
            slots=slots,
            uses=self.uses,
            ready_at=pod.ready_at,
            idle_since=self.idle_since,
            idle_seq=self.idle_seq,
            consecutive_failures=self.consecutive_failures,
            failed=pod.failed,
            lost=pod.lost or self.lost,
            reset_failed=pod.reset_failed or self.reset_failed,
            quarantined=pod.quarantined or self.quarantined,
            deleting=pod.deleting or self.retired,
            unschedulable=pod.unschedulable,
            waiting_reason=pod.waiting_reason,
            template_hash=pod.template_hash,
            token_hash=pod.token_hash,
            ip=pod.ip,
            running_since=pod.running_since,
            gone_by=pod.gone_by,
        )


@dataclass(eq=False)
class WaiterRecord:
    """One waiting checkout: the pool core's view of it, and what only the broker needs.

    The heap keeps these in the core's waiter order; the key is worked out once, when the
    checkout starts to wait, not on every comparison.
    """

    waiter: Waiter
    future: asyncio.Future[Checkout] = field(repr=False)
    gone: bool = False
    key: tuple[int, float, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.key = waiter_key(self.waiter)

    def __lt__(self, other: WaiterRecord) -> bool:
        return self.key < other.key


class IdleOrder:
    """The broker's agents with a free slot, oldest idle first (by ``AgentRecord.key``), so a
    checkout looks at one end instead of sorting the pool."""

    def __init__(self) -> None:
        self.agents: list[AgentRecord] = []
        self._seq = itertools.count(1)

    def stamp(self, agent: AgentRecord, since: float) -> None:
        """The agent fell idle (or was touched) at ``since``: ties go by the order of stamps."""
        agent.idle_since = since
        agent.idle_seq = next(self._seq)

    def add(self, agent: AgentRecord, key: tuple[float, int, str]) -> None:
        """File the agent under ``key`` (it must not be filed already)."""
        agent.key = key
        bisect.insort(self.agents, agent, key=lambda free: free.key)

    def remove(self, agent: AgentRecord) -> None:
        """Take the agent out, if it is in."""
        # AgentRecord compares by identity (eq=False), so this removes exactly this agent.
        with contextlib.suppress(ValueError):
            self.agents.remove(agent)
