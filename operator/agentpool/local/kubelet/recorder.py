"""Which of a pod's Events the local kubelet writes, and how: as a kubelet's event recorder does.

A real kubelet posts an Event for every failed probe, yet a pod whose probe fails every second
does not make an Event a second: client-go's event correlator folds an Event that repeats one
already posted (same object, type, reason and message) into it, raising its ``count`` and
``lastTimestamp``, and its spam filter lets each object post a burst of 25 and then one every
five minutes. :class:`EventRecorder` makes those two decisions for one pod, pure with ``now``
given; the pod worker (:mod:`agentpool.local.kubelet.podworker`) sends what it decides through
:class:`~agentpool.local.kubelet.podapi.PodApi`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Events one object may post at once, and the seconds in which one more is allowed: client-go's
#: ``defaultSpamBurst`` and ``defaultSpamQPS`` (1/300).
SPAM_BURST = 25
SPAM_REFILL_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class EventKey:
    """What makes two Events of one pod the same Event: its type, reason, message, container."""

    type: str
    reason: str
    message: str
    container: str = ""


@dataclass(frozen=True, slots=True)
class Posting:
    """What to send for one Event: a new one (``name`` None), or a repeat of the Event ``name``
    whose count is now ``count`` and which was first seen at ``first``."""

    name: str | None
    count: int
    first: float


@dataclass
class EventRecorder:
    """One pod's Events as posted so far, and its spam filter's tokens."""

    burst: int = SPAM_BURST
    refill_seconds: float = SPAM_REFILL_SECONDS
    tokens: float | None = None
    refilled_at: float = 0.0
    posted: dict[EventKey, Posting] = field(default_factory=dict)

    def record(self, key: EventKey, now: float) -> Posting | None:
        """The Event ``key`` happened at ``now``: what to send, or None when the spam filter
        drops it (then nothing is sent, and its count does not rise)."""
        if not self._take_token(now):
            return None
        seen = self.posted.get(key)
        posting = (
            Posting(name=None, count=1, first=now)
            if seen is None or seen.name is None
            else Posting(name=seen.name, count=seen.count + 1, first=seen.first)
        )
        self.posted[key] = posting
        return posting

    def sent(self, key: EventKey, name: str | None) -> None:
        """The Event ``key`` was written as ``name`` (None: it could not be, so the next one
        is created anew)."""
        seen = self.posted.get(key)
        if seen is not None:
            self.posted[key] = Posting(name=name, count=seen.count, first=seen.first)

    def _take_token(self, now: float) -> bool:
        if self.tokens is None:
            self.tokens, self.refilled_at = float(self.burst), now
        gained = (now - self.refilled_at) / self.refill_seconds
        self.tokens = min(float(self.burst), self.tokens + max(0.0, gained))
        self.refilled_at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True
