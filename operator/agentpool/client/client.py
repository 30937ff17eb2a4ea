"""The :class:`Client`: pools, leases and runs of one namespace, as a program uses them.

Each method is the worker-pool word it stands for: :meth:`Client.lease` is a checkout held for
a block (poolboy's ``transaction``), :meth:`Client.call` one item on a leased agent,
:meth:`Client.cast` one item handed over without waiting, :meth:`Client.submit` a whole run,
:meth:`Client.pool_status` the pool's ``status``. The work is done by
:mod:`agentpool.client.leases` and :mod:`agentpool.client.runs`, over
:mod:`agentpool.client.cluster` and :mod:`agentpool.client.agents`.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from agentpool.api import (
    AgentPoolStatus,
    FailurePolicy,
    NameRef,
    PoolRunSpec,
    RunMode,
    Source,
    SpecError,
    parse_spec,
)
from agentpool.api.reasons import Reason
from agentpool.client import leases
from agentpool.client.agents import AgentCaller
from agentpool.client.cluster import Cluster
from agentpool.client.errors import INVALID, AgentpoolError, NotFound
from agentpool.client.runs import Run
from agentpool.client.settings import ClientSettings


class Client:
    """agentpool's pools, leases and runs in one namespace; use it as ``async with``, or
    :meth:`close` it."""

    def __init__(self, cluster: Cluster, *, settings: ClientSettings | None = None) -> None:
        self._cluster = cluster
        self.settings = settings or cluster.settings
        self._caller = AgentCaller()

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | os.PathLike[str] | None = None,
        context: str | None = None,
        *,
        namespace: str | None = None,
        settings: ClientSettings | None = None,
    ) -> Client:
        """A client for a kubeconfig (default: the first in $KUBECONFIG, else
        ~/.kube/config) and context (default: its current one), in ``namespace`` (default:
        the context's)."""
        settings = settings or ClientSettings()
        cluster = Cluster.from_kubeconfig(path, context, namespace=namespace, settings=settings)
        return cls(cluster, settings=settings)

    @classmethod
    def in_cluster(
        cls, *, namespace: str | None = None, settings: ClientSettings | None = None
    ) -> Client:
        """A client for the cluster this pod runs in, through its service account, in
        ``namespace`` (default: the pod's)."""
        settings = settings or ClientSettings()
        return cls(Cluster.in_cluster(namespace=namespace, settings=settings), settings=settings)

    @property
    def namespace(self) -> str:
        return self._cluster.namespace

    async def close(self) -> None:
        self._caller.close()
        await self._cluster.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def lease(
        self,
        pool: str,
        *,
        ttl: int | None = None,
        context: Any = None,
        wait: bool = True,
        priority: int = 0,
        checkout_timeout: float | None = None,
        call_timeout: float | None = None,
    ) -> contextlib.AbstractAsyncContextManager[leases.LeasedAgent]:
        """Hold one agent of ``pool`` for an ``async with`` block, renewed while held and given
        back when the block ends, even when it raises.

        ``ttl`` (seconds) bounds how long the agent stays held should this client die;
        ``context`` is handed to the agent as the lease's binding. ``wait=False`` raises
        :class:`PoolExhausted` (PoolFull) at once when no agent is idle; otherwise it waits up
        to ``checkout_timeout`` (the pool's by default) and raises PoolExhausted
        (CheckoutTimeout). ``call_timeout`` is each invoke's default timeout.
        """
        settings = self.settings
        request = leases.LeaseRequest(
            pool=pool,
            ttl_seconds=ttl if ttl is not None else settings.lease_ttl_seconds,
            context=context,
            wait=wait,
            priority=priority,
            checkout_timeout_seconds=(
                None if checkout_timeout is None else max(1, math.ceil(checkout_timeout))
            ),
        )
        return leases.hold(
            self._cluster,
            self._caller,
            request,
            bind_timeout=leases.bind_timeout_of(
                checkout_timeout,
                default=settings.bind_timeout_seconds,
                grace=settings.bind_grace_seconds,
            ),
            call_timeout=settings.call_timeout_seconds if call_timeout is None else call_timeout,
            renew_fraction=settings.renew_fraction,
        )

    async def call(
        self,
        pool: str,
        item: Any,
        *,
        input: Any = None,
        context: Any = None,
        checkout_timeout: float | None = None,
        call_timeout: float | None = None,
    ) -> Any:
        """One item on an agent of ``pool``: lease one, invoke it, give it back; the output.

        Raises :class:`PoolExhausted` or :class:`LeaseFailed` when no agent could be had, and
        :class:`CallFailed` with the agent's reason when the item failed.
        """
        async with self.lease(
            pool, context=context, checkout_timeout=checkout_timeout, call_timeout=call_timeout
        ) as agent:
            return await agent.invoke(item, input)

    async def cast(
        self,
        pool: str,
        item: Any,
        *,
        input: Any = None,
        ttl_seconds_after_finished: int | None = None,
    ) -> str:
        """Hand one item to an agent of ``pool`` without waiting for its output: a one-item
        PoolRun in mode Cast. Its name, to follow it with :meth:`run` if wanted."""
        run = await self.submit(
            pool,
            [item],
            input=input,
            mode="Cast",
            ttl_seconds_after_finished=ttl_seconds_after_finished,
        )
        return run.name

    async def submit(
        self,
        pool: str,
        items: Sequence[Any] | None = None,
        *,
        source: Source | Mapping[str, Any] | None = None,
        cap: int = 1,
        input: Any = None,
        item_id: str | None = None,
        mode: RunMode = "Call",
        failures: FailurePolicy = "Fail",
        max_attempts: int = 1,
        priority: int = 0,
        name: str | None = None,
        checkout_timeout: int | None = None,
        call_timeout: int | None = None,
        ttl_seconds_after_finished: int | None = None,
    ) -> Run:
        """Start a PoolRun of ``items`` (or of ``source``: a ConfigMap key or an HTTP source,
        as ``{"configMapRef": {"name", "key"}}`` or ``{"http": {"url"}}``) through ``pool``,
        ``cap`` at a time; the :class:`Run` to follow it. The other arguments are the PoolRun
        spec's fields of the same names."""
        if (items is None) == (source is None):
            raise AgentpoolError(INVALID, "give either items or source, not both nor neither")
        try:
            picked = Source(items=list(items)) if items is not None else _source(source)
            spec = PoolRunSpec(
                pool_ref=NameRef(name=pool),
                source=picked,
                cap=cap,
                input=input,
                item_id=item_id,
                mode=mode,
                failures=failures,
                max_attempts=max_attempts,
                priority=priority,
                checkout_timeout_seconds=checkout_timeout,
                call_timeout_seconds=call_timeout,
                ttl_seconds_after_finished=ttl_seconds_after_finished,
            )
        except (SpecError, ValueError) as error:
            raise AgentpoolError(INVALID, str(error)) from None
        obj = await self._cluster.create(
            "poolruns", spec.to_wire(), name=name, generate_name=f"{pool}-"
        )
        return Run(self._cluster, obj)

    async def run(self, name: str) -> Run:
        """The PoolRun ``name``, to follow its results or wait for its end."""
        return Run(self._cluster, await self._cluster.get("poolruns", name))

    async def pool_status(self, pool: str) -> AgentPoolStatus:
        """The pool as the operator last reported it: ``state`` (Ready, Overflow, Full, ...),
        ``available`` (idle Ready agents), ``overflow``, ``busy``, ``waiting`` and the rest."""
        try:
            obj = await self._cluster.get("agentpools", pool)
        except NotFound:
            raise NotFound(
                str(Reason.POOL_NOT_FOUND),
                f'AgentPool "{pool}" not found in namespace "{self.namespace}"',
            ) from None
        return AgentPoolStatus.model_validate(obj.get("status") or {})


def _source(source: Source | Mapping[str, Any] | None) -> Source:
    if isinstance(source, Source):
        return source
    return parse_spec(Source, source, root="source")
