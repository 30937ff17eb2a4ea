"""What the pool core is told about the world: its agents as observed, and the checkouts waiting.

The operator builds an `ObservedAgent` per pod of the pool (from the pod's phase, conditions and
container states) and the broker adds what only it knows (who is busy, uses, failures in a row,
when an agent fell idle). Every time is a number of seconds on one clock, the same clock as the
`now` given to the core, so the core never reads a clock itself.
"""

from __future__ import annotations

from dataclasses import dataclass

IMAGE_PULL_BACK_OFF = "ImagePullBackOff"
ERR_IMAGE_PULL = "ErrImagePull"
CRASH_LOOP_BACK_OFF = "CrashLoopBackOff"
#: A Secret or ConfigMap the container needs is missing (the pool's token Secret, say).
CREATE_CONTAINER_CONFIG_ERROR = "CreateContainerConfigError"


@dataclass(frozen=True, slots=True)
class ObservedAgent:
    """One agent pod as last observed.

    `ready_at` is when the pod first became Ready (None: never yet), so `ready_at - created_at` is
    its cold start and "not ready now but ready before" means it turned unready. `idle_since` is
    when it last became idle (returned by its holder, or first Ready); `idle_seq` breaks ties
    between equal `idle_since` values in the order the agents fell idle. `failed` means the pod
    failed or its container is crash-looping; `lost` means a call to it timed out or its state
    is unknown; `reset_failed` means its `POST /reset` failed; `quarantined` means it failed
    items the rest of the pool served (see :mod:`agentpool.pool.quarantine`). `waiting_reason`
    is the agent container's waiting reason, such as ImagePullBackOff; `running_since` is when
    its container last started running (None: it is not running), so an agent that runs but
    never turns Ready is told apart from one still being created. `gone_by` is when a pod being
    deleted should be gone, its deletion stamp and grace period passed (None: not known, or not
    deleted in the API yet); a pod still there well after it sits on a node that no longer
    answers, and may stay Terminating for good.

    `slots` is how many items the agent serves at once and `busy_slots` how many it serves now;
    `busy` means at least one slot is busy (a leased agent holds all of them). For an agent with
    several slots `idle_since` moves whenever a slot is taken or freed, so the hand-out order
    reads it as "last touched".
    """

    name: str
    created_at: float = 0.0
    scheduled: bool = True
    ready: bool = False
    busy: bool = False
    busy_slots: int = 0
    slots: int = 1
    uses: int = 0
    ready_at: float | None = None
    idle_since: float | None = None
    idle_seq: int = 0
    consecutive_failures: int = 0
    failed: bool = False
    lost: bool = False
    reset_failed: bool = False
    quarantined: bool = False
    deleting: bool = False
    unschedulable: bool = False
    waiting_reason: str | None = None
    template_hash: str = ""
    token_hash: str = ""
    ip: str | None = None
    running_since: float | None = None
    gone_by: float | None = None

    @property
    def live(self) -> bool:
        """The pod counts toward the pool's size: it exists and is not being deleted."""
        return not self.deleting

    @property
    def sound(self) -> bool:
        """Ready and healthy, busy or not: nothing is known against it."""
        return (
            self.ready
            and not self.failed
            and not self.deleting
            and not self.lost
            and not self.reset_failed
        )

    @property
    def idle(self) -> bool:
        """Ready, free and sound, with no slot busy: what a lease can have by health alone."""
        return self.sound and not self.busy

    @property
    def slots_in_use(self) -> int:
        """Busy slots, at least one when the agent is busy at all."""
        return max(self.busy_slots, 1 if self.busy else 0)

    @property
    def free_slots(self) -> int:
        """Slots that could take an item now, by the count alone."""
        return max(0, self.slots - self.slots_in_use)

    @property
    def open(self) -> bool:
        """Sound with a free slot: the agent could take an item by its health alone."""
        return self.sound and self.free_slots > 0

    @property
    def pending(self) -> bool:
        """Not Ready yet and never was: a pod still starting (or held, if it cannot start)."""
        return not self.ready and self.ready_at is None and not self.failed and not self.deleting

    @property
    def turned_unready(self) -> bool:
        """Was Ready once and is not now."""
        return not self.ready and self.ready_at is not None

    @property
    def cold_start_seconds(self) -> float | None:
        """Seconds from pod creation to first Ready, once known."""
        if self.ready_at is None:
            return None
        return max(0.0, self.ready_at - self.created_at)

    def age(self, now: float) -> float:
        """Seconds since the pod was created."""
        return max(0.0, now - self.created_at)

    def idle_for(self, now: float) -> float:
        """Seconds since the agent last became idle (from Ready or creation if never returned)."""
        since = self.idle_since
        if since is None:
            since = self.ready_at if self.ready_at is not None else self.created_at
        return max(0.0, now - since)


@dataclass(frozen=True, slots=True)
class Waiter:
    """A checkout that waits for an agent: served by priority (higher first), then by ``since``
    (when its wait began, on the broker's clock), then arrival. ``whole`` means a lease, which
    waits for an agent with no slot busy and takes all of its slots."""

    priority: int
    seq: int
    holder: str = ""
    since: float | None = None
    whole: bool = False
