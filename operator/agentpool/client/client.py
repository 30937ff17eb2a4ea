"""The :class:`Client`: pools, leases and runs of one namespace, as a program uses them.

Each method is the worker-pool word it stands for: :meth:`Client.lease` is a checkout held for
a block (poolboy's ``transaction``), :meth:`Client.call` one item on an agent of the pool,
through the operator's gateway, :meth:`Client.cast` one item handed over without waiting for
its output, :meth:`Client.submit` a whole run, :meth:`Client.pool_status` the pool's ``status``.
The work is done by :mod:`agentpool.client.gateway`, :mod:`agentpool.client.leases` and
:mod:`agentpool.client.runs`, over :mod:`agentpool.client.cluster` and
:mod:`agentpool.client.agents`.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
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
from agentpool.api.gateway import GatewayRequest
from agentpool.api.reasons import Reason
from agentpool.client import leases
from agentpool.client.agents import AgentCaller
from agentpool.client.cluster import Cluster
from agentpool.client.errors import INVALID, AgentpoolError, NotFound
from agentpool.client.gateway import GatewayCaller
from agentpool.client.runs import Run
from agentpool.client.settings import ClientSettings


class Client:
    """agentpool's pools, leases and runs in one namespace; use it as ``async with``, or
    :meth:`close` it."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        settings: ClientSettings | None = None,
        gateway_url: str | None = None,
        gateway_ca: bytes | str | os.PathLike[str] | None = None,
        gateway_token: str | None = None,
    ) -> None:
        self._cluster = cluster
        self.settings = settings or cluster.settings
        self._caller = AgentCaller()
        self._gateway = GatewayCaller(
            cluster, url=gateway_url, ca_pem=_pem(gateway_ca), token=gateway_token
        )

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | os.PathLike[str] | None = None,
        context: str | None = None,
        *,
        namespace: str | None = None,
        settings: ClientSettings | None = None,
        gateway_url: str | None = None,
        gateway_ca: bytes | str | os.PathLike[str] | None = None,
        gateway_token: str | None = None,
    ) -> Client:
        """A client for a kubeconfig (default: the first in $KUBECONFIG, else
        ~/.kube/config) and context (default: its current one), in ``namespace`` (default:
        the context's).

        Calls and casts go to the gateway the namespace's ``agentpool-gateway`` ConfigMap names,
        or to ``gateway_url``, its certificate checked with ``gateway_ca`` (PEM, or a path to
        one; the ConfigMap's CA by default), as the kubeconfig's user, or with
        ``gateway_token``."""
        settings = settings or ClientSettings()
        cluster = Cluster.from_kubeconfig(path, context, namespace=namespace, settings=settings)
        return cls(
            cluster,
            settings=settings,
            gateway_url=gateway_url,
            gateway_ca=gateway_ca,
            gateway_token=gateway_token,
        )

    @classmethod
    def in_cluster(
        cls,
        *,
        namespace: str | None = None,
        settings: ClientSettings | None = None,
        gateway_url: str | None = None,
        gateway_ca: bytes | str | os.PathLike[str] | None = None,
        gateway_token: str | None = None,
    ) -> Client:
        """A client for the cluster this pod runs in, through its service account, in
        ``namespace`` (default: the pod's); the gateway as :meth:`from_kubeconfig` finds it, the
        pod's service account its caller."""
        settings = settings or ClientSettings()
        return cls(
            Cluster.in_cluster(namespace=namespace, settings=settings),
            settings=settings,
            gateway_url=gateway_url,
            gateway_ca=gateway_ca,
            gateway_token=gateway_token,
        )

    @property
    def namespace(self) -> str:
        return self._cluster.namespace

    async def close(self) -> None:
        self._caller.close()
        await self._gateway.close()
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
        id: str | None = None,
        priority: int = 0,
        wait: bool = True,
        checkout_timeout: float | None = None,
        call_timeout: float | None = None,
    ) -> Any:
        """One item on an agent of ``pool``, through the operator's gateway; the output.

        The item waits in the pool's line (by ``priority``, then arrival) up to
        ``checkout_timeout`` (the pool's by default), or not at all with ``wait=False``; the
        agent has ``call_timeout`` (the pool's by default). Raises :class:`PoolExhausted` when no
        agent could be had (``retry_after`` says when to try again), :class:`CallFailed` with the
        agent's reason when the item failed, :class:`NotFound` for no such pool, and
        :class:`AgentpoolError` (Unauthorized, Forbidden, Invalid, ...) otherwise.
        """
        request = _gateway_request(item, input, id, priority, wait, checkout_timeout, call_timeout)
        timeout = self._gateway_timeout(checkout_timeout, call_timeout)
        return await self._gateway.send(pool, request, verb="call", timeout=timeout)

    async def stream(
        self,
        pool: str,
        item: Any,
        *,
        input: Any = None,
        id: str | None = None,
        priority: int = 0,
        wait: bool = True,
        checkout_timeout: float | None = None,
        call_timeout: float | None = None,
    ) -> AsyncIterator[Any]:
        """One item on an agent of ``pool``, as :meth:`call`, its output's parts yielded as the
        agent makes them (``async for part in client.stream(pool, item)``): an agent whose
        handler streams sends each part as it is made; one that answers whole gives its output
        as the one part. Raises as :meth:`call` does; a failure after some parts raises
        :class:`CallFailed` at that point."""
        request = _gateway_request(item, input, id, priority, wait, checkout_timeout, call_timeout)
        timeout = self._gateway_timeout(checkout_timeout, call_timeout)
        async for part in self._gateway.stream(pool, request, timeout=timeout):
            yield part

    async def cast(
        self,
        pool: str,
        item: Any,
        *,
        input: Any = None,
        id: str | None = None,
        priority: int = 0,
        wait: bool = True,
        checkout_timeout: float | None = None,
        call_timeout: float | None = None,
    ) -> str:
        """Hand one item to an agent of ``pool`` through the gateway, without waiting for its
        output; the agent (its pod) that took it. The agent stays busy with it, for up to
        ``call_timeout``, until it reports the item done. Raises as :meth:`call` does."""
        request = _gateway_request(item, input, id, priority, wait, checkout_timeout, call_timeout)
        timeout = self._gateway_timeout(checkout_timeout, 0.0)
        agent: str = await self._gateway.send(pool, request, verb="cast", timeout=timeout)
        return agent

    def _gateway_timeout(self, checkout: float | None, call: float | None) -> float:
        """How long the client waits for the gateway's answer: the gateway's own bounds, with
        the settings' values where the caller named none, and a grace past them."""
        settings = self.settings
        waited = settings.bind_timeout_seconds if checkout is None else checkout
        called = settings.call_timeout_seconds if call is None else call
        return waited + called + settings.bind_grace_seconds

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
        spec's fields of the same names; ``ttl_seconds_after_finished`` defaults to the
        settings' ``run_ttl_seconds_after_finished`` (an hour), after which the run is deleted."""
        if ttl_seconds_after_finished is None:
            ttl_seconds_after_finished = self.settings.run_ttl_seconds_after_finished
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


def _gateway_request(
    item: Any,
    input: Any,
    id: str | None,
    priority: int,
    wait: bool,
    checkout_timeout: float | None,
    call_timeout: float | None,
) -> GatewayRequest:
    """The body of a call or cast, checked here as the gateway will check it."""
    fields = {
        "item": item,
        "input": input,
        "id": id,
        "priority": priority,
        "wait": wait,
        "checkoutTimeoutSeconds": checkout_timeout,
        "callTimeoutSeconds": call_timeout,
    }
    given = {key: value for key, value in fields.items() if value is not None or key == "item"}
    try:
        return parse_spec(GatewayRequest, given, root="call")
    except SpecError as error:
        raise AgentpoolError(INVALID, "; ".join(error.errors)) from None


def _pem(ca: bytes | str | os.PathLike[str] | None) -> bytes | None:
    """A CA given as PEM, or as the path of a PEM file."""
    if ca is None or isinstance(ca, bytes):
        return ca
    text = os.fspath(ca)
    return text.encode() if "-----BEGIN" in text else Path(text).read_bytes()
