"""One pool's checkout service inside the operator: idle agents out, waiters queued, agents back.

The run engine and the lease controller call `checkout` and `checkin`; the AgentPool reconciler
feeds it the pool's agents as observed (`update_agents`), reads `agents()` and `waiters()` for
the planner, removes agents with `retire` before deleting their pods, and re-plans when `changed`
is set. It never talks to Kubernetes or to an agent: everything arrives as values, and the
choices (which agent, which waiter) are the pure pool core's. All calls happen on one asyncio
loop, so each method runs without interleaving and a slot is never handed out twice. An agent
serves ``policy.slots`` items at once: it stays among the free while a slot is free.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Callable, Iterable

from agentpool.broker.handles import Checkout
from agentpool.broker.records import AgentRecord, IdleOrder, WaiterRecord
from agentpool.pool import ObservedAgent, PoolPolicy, Waiter, order_waiters, quarantine
from agentpool.pool.checkin import CheckinOutcome, PoolClosed, exhausted, too_many_waiters
from agentpool.pool.checkout import first_available, handout_order, idle_key, is_available


class Broker:
    """The checkout service of one pool.

    `clock` stamps when agents fall idle and when waiters arrive; it must be the clock of the
    `now` the reconciler gives the planner and of the pods' `created_at` (seconds since the
    epoch by default). Timeouts run on the event loop's own clock.
    """

    def __init__(
        self,
        pool_name: str,
        policy: PoolPolicy,
        *,
        clock: Callable[[], float] = time.time,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.pool_name = pool_name
        self.policy = policy
        self.changed = asyncio.Event()
        self._clock = clock
        self.on_change = on_change
        # The pool's loop went quiet, its agents all free: the next checkout tells it (once).
        self.wake_on_checkout = False
        self._agents: dict[str, AgentRecord] = {}
        # Every agent with a free slot, not retired, that has been Ready, in idle order, so a
        # checkout looks at one end; those that cannot be handed out now are skipped.
        self._free = IdleOrder()
        self._queue: list[WaiterRecord] = []
        self._waiting = 0
        self._arrivals = itertools.count(1)
        self._serials = itertools.count(1)
        self._closed: PoolClosed | None = None
        # The pool's latest outcomes, so quarantine can tell a broken agent from bad items.
        self._outcomes = quarantine.CheckinWindow()

    # -- checkout and checkin -------------------------------------------------------------------

    async def checkout(
        self,
        *,
        timeout: float,
        priority: int = 0,
        holder: str,
        since: float | None = None,
        whole: bool = False,
        max_waiters: int | None = None,
    ) -> Checkout:
        """Take a free slot of a Ready agent by strategy, or wait up to `timeout` seconds for one;
        with `whole` (a lease), an agent with no slot busy, held with all of its slots.

        Waiters are served by priority, then by when they began waiting (`since`, on the
        broker's clock, when the wait began before this call; never later than now), then in
        arrival order. Raises `CheckoutTimedOut` when the timeout passes (at once for a timeout
        <= 0 with no agent free), `TooManyWaiters` when it would wait behind `max_waiters`,
        and `PoolClosed` when the pool is deleted. A caller cancelled while waiting leaves the
        line at once, and gives back an agent it was handed.
        """
        if self._closed is not None:
            raise self._closed
        if not self._queue:
            # Nobody waits ahead of this caller: an available agent is its at once, with no
            # waiter to queue (the common case of a warm pool, once per item).
            agent = self._pick(whole=whole)
            if agent is not None:
                return self._hand_out(agent, holder=holder, whole=whole)
        if max_waiters is not None and self._waiting >= max_waiters and timeout > 0:
            raise too_many_waiters(self.pool_name, waiting=self._waiting, bound=max_waiters)
        loop = asyncio.get_running_loop()
        waiter = WaiterRecord(
            Waiter(
                priority=priority,
                seq=next(self._arrivals),
                holder=holder,
                since=self._clock() if since is None else min(since, self._clock()),
                whole=whole,
            ),
            future=loop.create_future(),
        )
        heapq.heappush(self._queue, waiter)
        self._waiting += 1
        self._dispatch()
        if waiter.future.done():
            return waiter.future.result()
        self._notify()
        try:
            if timeout > 0:
                await asyncio.wait({waiter.future}, timeout=timeout)
        except asyncio.CancelledError:
            self._abandon(waiter)
            raise
        if waiter.future.done():
            checkout: Checkout = waiter.future.result()
            checkout.waited = True
            return checkout
        policy, counts = self.policy, self.counts()
        sizes = {"min_size": policy.min_size, "max_size": policy.max_size, "slots": policy.slots}
        error = exhausted(self.pool_name, timeout=timeout, **sizes, **counts)
        self._abandon(waiter)
        self._notify()
        raise error

    def serves_at_once(self, *, whole: bool = False) -> bool:
        """Whether a checkout now would be handed an agent without waiting in line."""
        return self._closed is None and not self._queue and self._pick(whole=whole) is not None

    def checkin(
        self, checkout: Checkout, outcome: CheckinOutcome | str = CheckinOutcome.SUCCESS
    ) -> bool:
        """Give a checked-out agent back with how its work went.

        Success returns it to the idle set and clears its failure streak; failure returns it
        and counts toward quarantine, which takes an agent failing where the others succeed (an
        item's failure is not its agent's); lost and reset_failed keep it out, to be retired.
        Returns False (and does nothing) for a handle that no longer holds its agent: a second
        checkin, or an agent already lost.
        """
        outcome = CheckinOutcome(outcome)
        agent = self._agents.get(checkout.agent)
        if agent is None or not agent.holds(checkout):
            return False
        agent.release(checkout)
        if outcome is CheckinOutcome.UNUSED:
            agent.uses -= 1
            self._free_again(agent)
            self._dispatch()
            return True
        if outcome is CheckinOutcome.SUCCESS:
            agent.consecutive_failures = 0
            self._outcomes.record(agent.pod.name, failed=False)
        elif outcome is CheckinOutcome.FAILURE:
            agent.consecutive_failures += 1
            self._outcomes.record(agent.pod.name, failed=True)
            agent.quarantined = self._outcomes.judge(
                agent.pod.name, self.policy.quarantine_after_failures, agent.consecutive_failures
            )
        elif outcome is CheckinOutcome.LOST:
            agent.lost = True
        else:
            agent.reset_failed = True
        view = self._mark_idle(agent)
        # Judged before a waiter may take it, from the view the idle order was keyed by.
        usable = view is not None and is_available(self.policy, view, now=self._clock())
        self._dispatch()
        if not agent.holders and not usable:
            # Worn out, quarantined or broken, its last slot free: the reconciler replaces it.
            self._notify()
        return True

    # -- what the reconciler feeds and reads ----------------------------------------------------

    def update_agents(self, observed: Iterable[ObservedAgent], *, complete: bool = True) -> None:
        """Take in the pool's pods as observed; with `complete`, a pod not listed is gone.

        A newly Ready agent serves the next waiter at once; an idle agent that turns unready
        leaves the idle set; a held agent whose pod failed or vanished is lost to its holders.
        Busy, uses and failures come from the broker's own bookkeeping, except for an agent seen
        for the first time, whose uses and failures are taken as given.
        """
        seen: set[str] = set()
        for pod in observed:
            seen.add(pod.name)
            agent = self._agents.get(pod.name)
            if agent is None:
                agent = AgentRecord(
                    pod=pod,
                    uses=pod.uses,
                    consecutive_failures=pod.consecutive_failures,
                )
                self._agents[pod.name] = agent
                if pod.ready:
                    self._mark_idle(agent, since=pod.idle_since)
                continue
            was_ready = agent.pod.ready
            agent.pod = pod
            if pod.ready and not was_ready and not agent.holders:
                self._mark_idle(agent)
            if pod.failed and agent.lose_holders(f"agent {pod.name} failed while it held the work"):
                agent.lost = True
                self._notify()
        if complete:
            for name in [name for name in self._agents if name not in seen]:
                self.forget_agent(name)
        self._dispatch()

    def forget_agent(self, name: str) -> None:
        """The pod is gone: drop it, failing its holders if it had any."""
        agent = self._agents.pop(name, None)
        if agent is None:
            return
        self._free.remove(agent)
        agent.lose_holders(f"agent {name} was deleted while it held the work")

    def retire(self, names: Iterable[str]) -> tuple[str, ...]:
        """Take agents out of the idle set before their pods are deleted, in one step.

        Returns the names now retired, which the caller may delete: never an agent with a busy
        slot and never a name the broker does not know. Asking again for an agent already
        retired returns it again, so a failed delete can be retried.
        """
        retired = []
        for name in names:
            agent = self._agents.get(name)
            if agent is None or agent.holders:
                continue
            agent.retired = True
            self._free.remove(agent)
            retired.append(name)
        return tuple(retired)

    def restore_busy(
        self, agent: str, current_item: str | None, *, whole: bool = True
    ) -> Checkout | None:
        """Mark an agent busy again after an operator restart, from its `GET /status`: with
        `whole` (a lease's agent, or one that did not answer) every slot, else one slot for
        `current_item`.

        Returns the handle to check in once the agent reports the item (or all) done, or None
        when the agent is unknown, retired, or has no such slot free.
        """
        state = self._agents.get(agent)
        if state is None or state.retired or state.full(self.policy.slots):
            return None
        if state.whole or (whole and state.holders):
            return None
        item = current_item if current_item is not None else "unknown"
        return self._hand_out(state, holder=f"restored:{item}", whole=whole, count_use=False)

    def restore_uses(self, agent: str, uses: int) -> None:
        """Take an agent's own count of items served (``GET /status``) after an operator
        restart, so ``maxUses`` still retires it on time. Never lowers what is counted."""
        state = self._agents.get(agent)
        if state is not None and uses > state.uses:
            state.uses = uses
            self._notify()

    def update_policy(self, policy: PoolPolicy) -> None:
        """The spec changed: hand out by the new strategy, limits and slot count from now on."""
        self.policy = policy
        for agent in [agent for agent in self._agents.values() if agent.holders]:
            self._free_again(agent)  # a new slot count may free or fill its slots
        self._dispatch()

    def agents(self) -> tuple[ObservedAgent, ...]:
        """Every known agent as the planner needs it: pod facts plus busy slots, uses and
        failures; a retired agent shows as deleting, since its pod is about to be."""
        return tuple(self._view(agent) for agent in self._agents.values())

    def waiters(self) -> tuple[Waiter, ...]:
        """The checkouts waiting now, in the order they will be served."""
        live = [w.waiter for w in self._queue if not w.gone]
        return tuple(order_waiters(live))

    def counts(self) -> dict[str, int]:
        """agents, busy, busy_slots, ready and waiting, as the exhaustion message reports them."""
        live = [agent for agent in self._agents.values() if not agent.retired]
        return {
            "agents": len(live),
            "busy": sum(1 for agent in live if agent.holders),
            "busy_slots": sum(agent.busy_slots(self.policy.slots) for agent in live),
            "ready": sum(1 for agent in live if agent.pod.ready),
            "waiting": self._waiting,
        }

    @property
    def closed(self) -> bool:
        """The pool is gone: every checkout fails at once."""
        return self._closed is not None

    def close(self, reason: str = PoolClosed.DELETED) -> None:
        """Fail every waiter, and every later checkout, with a clear error; the pool is gone.
        Agents already held stay with their holders, who check them in as usual."""
        if self._closed is not None:
            return
        self._closed = PoolClosed(self.pool_name, reason)
        for waiter in self._queue:
            if not waiter.gone and not waiter.future.done():
                waiter.future.set_exception(PoolClosed(self.pool_name, reason))
            waiter.gone = True
        self._queue.clear()
        self._waiting = 0
        self._notify()

    # -- inside ---------------------------------------------------------------------------------

    def _dispatch(self) -> None:
        """Serve waiters, best first, while an agent is available."""
        while self._queue:
            waiter = self._queue[0]
            if waiter.gone:
                heapq.heappop(self._queue)
                continue
            agent = self._pick(whole=waiter.waiter.whole)
            if agent is None:
                # Strict order: a lease at the head waits for a whole agent, and the items
                # behind it wait too, so the agent it waits for drains.
                return
            heapq.heappop(self._queue)
            waiter.gone = True
            self._waiting -= 1
            checkout = self._hand_out(agent, holder=waiter.waiter.holder, whole=waiter.waiter.whole)
            waiter.future.set_result(checkout)

    def _pick(self, *, whole: bool = False) -> AgentRecord | None:
        """The agent the strategy hands out next, if any is available."""
        views = map(self._view, handout_order(self.policy.strategy, self._free.agents))
        chosen = first_available(self.policy, views, now=self._clock(), whole=whole)
        return None if chosen is None else self._agents[chosen.name]

    def _hand_out(
        self, agent: AgentRecord, *, holder: str, whole: bool = False, count_use: bool = True
    ) -> Checkout:
        checkout = Checkout(
            pool=self.pool_name,
            agent=agent.pod.name,
            ip=agent.pod.ip,
            port=self.policy.port,
            holder=holder,
            serial=next(self._serials),
        )
        agent.holders.append(checkout)
        agent.whole = agent.whole or whole
        if count_use:
            agent.uses += 1
        if self.wake_on_checkout:
            # A quiet pool's demand is sampled on its passes, which come again from now on.
            self.wake_on_checkout = False
            self._notify()
        if agent.full(self.policy.slots):
            self._free.remove(agent)
        else:
            # Touched: the idle order counts from now, so LIFO fills this agent next and FIFO
            # turns to the others first.
            self._mark_idle(agent)
        return checkout

    def _abandon(self, waiter: WaiterRecord) -> None:
        """The waiter left (timeout or cancellation); give back an agent it was handed."""
        if not waiter.gone:
            waiter.gone = True
            self._waiting -= 1
        if not waiter.future.done():
            waiter.future.cancel()
            return
        if waiter.future.cancelled() or waiter.future.exception() is not None:
            return
        checkout = waiter.future.result()
        agent = self._agents.get(checkout.agent)
        if agent is not None and agent.holds(checkout):
            # Never used: it goes back where it was in the idle order, uncounted.
            agent.release(checkout)
            agent.uses -= 1
            self._free_again(agent)
            self._dispatch()

    def _mark_idle(self, agent: AgentRecord, *, since: float | None = None) -> ObservedAgent | None:
        self._free.stamp(agent, self._clock() if since is None else since)
        return self._free_again(agent)

    def _free_again(self, agent: AgentRecord) -> ObservedAgent | None:
        """Put the agent (back) in the idle order by its stamp; returns its view then, None if it
        stays out (retired, or no slot free)."""
        self._free.remove(agent)
        if agent.retired or agent.full(self.policy.slots):
            return None
        view = self._view(agent)
        self._free.add(agent, idle_key(view))
        return view

    def _view(self, agent: AgentRecord) -> ObservedAgent:
        return agent.view(self.policy.slots)

    def _notify(self) -> None:
        self.changed.set()
        if self.on_change is not None:
            # A failing subscriber must not fail the checkout or checkin that notified it; the
            # event above still tells the reconciler to re-plan.
            with contextlib.suppress(Exception):
                self.on_change()
