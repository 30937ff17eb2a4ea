"""Every pool's broker in one operator process, keyed by (namespace, pool name).

The AgentPool reconciler creates or updates a pool's broker when it sees the pool and closes it
when the pool is deleted; the run engine and the lease controller look brokers up here to check
agents out. One registry per operator process, made at start-up and passed to whoever needs it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from agentpool.broker.broker import Broker
from agentpool.pool import PoolPolicy
from agentpool.pool.checkin import PoolClosed

PoolKey = tuple[str, str]


class Brokers:
    """The brokers of all pools the operator serves."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._brokers: dict[PoolKey, Broker] = {}

    def get(self, namespace: str, name: str) -> Broker | None:
        """The pool's broker, or None if the pool is not (yet) known."""
        return self._brokers.get((namespace, name))

    def ensure(
        self,
        namespace: str,
        name: str,
        policy: PoolPolicy,
        *,
        on_change: Callable[[], None] | None = None,
    ) -> Broker:
        """The pool's broker, created on first sight; an existing one takes the new policy and,
        when given, the new change callback (a restarted reconcile loop listens anew)."""
        broker = self._brokers.get((namespace, name))
        if broker is None or broker.closed:
            broker = Broker(name, policy, clock=self._clock, on_change=on_change)
            self._brokers[(namespace, name)] = broker
            return broker
        if on_change is not None:
            broker.on_change = on_change
        if broker.policy != policy:
            broker.update_policy(policy)
        return broker

    def close(
        self,
        namespace: str,
        name: str,
        reason: str = PoolClosed.DELETED,
        *,
        broker: Broker | None = None,
    ) -> None:
        """The pool is gone: fail its waiters and forget its broker. Given ``broker``, only that
        one: a pool re-created under the same name has a broker of its own that stays."""
        key = (namespace, name)
        current = self._brokers.get(key)
        if broker is not None and current is not broker:
            broker.close(reason)
            return
        self._brokers.pop(key, None)
        if current is not None:
            current.close(reason)

    def close_all(self, reason: str = "is no longer served: the operator is stopping") -> None:
        """Close every broker, for operator shutdown."""
        for key in list(self._brokers):
            self.close(*key, reason=reason)

    def __contains__(self, key: object) -> bool:
        return key in self._brokers

    def __iter__(self) -> Iterator[PoolKey]:
        return iter(list(self._brokers))

    def __len__(self) -> int:
        return len(self._brokers)
