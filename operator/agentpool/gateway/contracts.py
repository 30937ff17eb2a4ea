"""What the gateway needs from the rest of the operator, as protocols and values.

The gateway knows nothing of Kubernetes, kopf or the brokers: the operator hands it a
:class:`Reviewer` (TokenReview and SubjectAccessReview over the Kubernetes API) and a
:class:`Calls` (a pool's waiting line and its agents). Each is matched by structure, so the
tests pass fakes and the operator passes the real ones.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentpool.api.gateway import GatewayRequest, GatewayVerb
from agentpool.gateway.forwarding import Forwarded
from agentpool.gateway.requests import EncodedItem


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request, as the cluster's TokenReview names them."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


class ReviewFailed(Exception):
    """The cluster could not be asked (the API server did not answer): neither yes nor no."""


class Reviewer(Protocol):
    """The cluster's word on a token and on what its holder may do."""

    async def authenticate(self, token: str) -> Caller | None:
        """The token's holder, or None when the cluster does not authenticate it. Raises
        :class:`ReviewFailed` when it cannot tell."""
        ...

    async def authorize(
        self,
        caller: Caller,
        *,
        verb: str,
        resource: str,
        subresource: str,
        namespace: str,
        pool: str,
    ) -> bool:
        """Whether ``caller`` may ``verb`` (an RBAC verb) ``<resource>/<subresource>`` of
        ``pool`` (a lease's name, for ``agentleases``) in ``namespace``. Raises
        :class:`ReviewFailed` when the cluster cannot tell."""
        ...


@dataclass(frozen=True, slots=True)
class CallAnswer:
    """What a call or a cast came to: the agent that took the item, and a call's output; or, for
    a call answered as a stream, that the stream has been sent (``streamed``)."""

    agent: str
    output: Any = None
    streamed: bool = False


class Calls(Protocol):
    """A pool's waiting line and agents, as the gateway hands them items."""

    async def serve(
        self,
        namespace: str,
        pool: str,
        request: GatewayRequest,
        item: EncodedItem,
        *,
        verb: GatewayVerb,
        answer: Answering | None = None,
    ) -> CallAnswer:
        """Hand ``item`` to an agent of the pool, waiting in line as ``request`` says; for a
        call, wait for the output. Raises :class:`~agentpool.gateway.errors.GatewayError` with
        what to answer when no output (or, for a cast, no agent) can be had. With ``answer``,
        the caller takes server-sent events: an agent that streams its answer has it passed on
        as it comes (``streamed``), a failure after the first event as an ``error`` event; one
        that answers whole is answered as any call."""
        ...

    async def forward(
        self, namespace: str, pool: str, request: Forwarded, answer: Answering
    ) -> None:
        """Pass ``request`` on to an agent of the pool, waiting in line as it says, and stream
        the agent's answer into ``answer``, holding the agent until the answer ends or the
        caller goes away. Raises :class:`~agentpool.gateway.errors.GatewayError` with what to
        answer when no agent answered; once ``answer`` has started, any failure can only break
        it off."""
        ...

    async def forward_to_lease(
        self, namespace: str, lease: str, request: Forwarded, answer: Answering
    ) -> None:
        """Pass ``request`` on to the agent ``lease`` holds, past any line, and stream its answer
        into ``answer``; the agent stays the lease's. Raises
        :class:`~agentpool.gateway.errors.GatewayError` when the lease holds no agent of an HTTP
        pool, or no agent answered."""
        ...


class Answering(Protocol):
    """Where a forwarded request's answer goes, as it comes."""

    @property
    def started(self) -> bool: ...

    @property
    def gone(self) -> bool:
        """The caller's connection has gone, or was cut for stalling."""
        ...

    def start(self, status: int, headers: Iterable[tuple[bytes, bytes]], *, agent: str) -> None:
        """Send the agent's status and headers (the gateway keeps the end-to-end ones)."""
        ...

    async def write(self, data: bytes) -> None:
        """Send a piece of the body; waits while the caller reads slower. Raises
        ``ConnectionError`` once the caller has gone."""
        ...

    def end(self) -> None: ...


class Relaying(Protocol):
    """Where another replica's answer goes, as it comes: its head, then its body."""

    @property
    def started(self) -> bool: ...

    def start(self, status: int, headers: list[tuple[str, str]]) -> None: ...

    async def write(self, data: bytes) -> None: ...

    def end(self) -> None: ...


class Peers(Protocol):
    """The other replicas, when this operator is one of several that share the pools."""

    def elsewhere(self, namespace: str, pool: str, *, lease: str | None = None) -> str | None:
        """The gateway of the replica that works on the pool (or is taking it), or on the
        ``lease`` when one is named, when that is another replica ('' while its gateway is not
        known yet); None when it is this one, or none is known."""
        ...

    async def relay(
        self,
        gateway: str,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes | AsyncIterable[bytes] | None,
        answer: Relaying,
    ) -> None:
        """Pass the request on to the replica at ``gateway`` as this replica, and stream its
        answer into ``answer``. Raises :class:`~agentpool.gateway.errors.GatewayError` when it
        did not answer; once ``answer`` has started, a failure can only break it off."""
        ...
