"""A lease's binding to its agent: the lease's own token, handed to the agent and taken back.

The lease handlers (:mod:`agentpool.handlers.leases`) call :func:`open_binding` once a lease has
an agent: it mints the lease's token, keeps it in the Secret ``<lease>-lease-token`` that the
lease owns (the client reads it there), and hands it to the agent with ``POST /bind``, the pool's
token authenticating the operator, both at once. The agent then accepts the lease's token on
/invoke and /status until the expiry it was given, and nothing else; the pool's token never
leaves the operator. :func:`renew_binding` posts /bind again with a renewal's later expiry.
:func:`close_binding` ends it: ``POST /unbind``, the Secret deleted, and the outcome the agent
goes back with. What an agent's refusal means is :func:`agentpool.pool.binding.bind_failure`'s
to say. The caller holds the lease's lock (``runtime.leases.lock``) through each step, so an
unbind never overtakes a bind in flight.

An HTTP pool's agents serve no ``/bind`` or ``/unbind``: a lease of one holds the agent and
keeps its Secret as any lease does, but the agent is told nothing, checks no token, and goes
back to the pool as it is when the lease ends.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass
from typing import Any

from agentpool.api.raw import RawBody
from agentpool.broker import Checkout
from agentpool.broker.registry import PoolKey
from agentpool.handlers.checkins import note_answer, return_agent
from agentpool.handlers.runtime import ObjectKey, PoolHandle, Runtime
from agentpool.io.kube import Conflict, ObjectNotFound
from agentpool.pool import binding
from agentpool.pool.checkin import CheckinOutcome
from agentpool.pool.manifests import (
    lease_token_secret,
    lease_token_secret_name,
    owned_by,
    read_token,
)

#: How an agent whose bind failed goes back to its pool.
FATES = {
    "unused": CheckinOutcome.UNUSED,
    "failure": CheckinOutcome.FAILURE,
    "retire": CheckinOutcome.RESET_FAILED,
}


@dataclass
class LeaseBinding:
    """One lease's binding of its agent, as the lease's task holds it."""

    #: The lease, (namespace, name), and the pool it holds an agent of.
    key: ObjectKey
    pool: str
    checkout: Checkout
    #: The lease's own token, as handed to the agent and kept in the lease's Secret.
    token: str
    context: Any
    #: Until when the lease holds the agent, as its holder renewed it.
    term: binding.Term
    #: The expireTime the agent was last given, RFC 3339.
    expire_time: str

    @property
    def pool_key(self) -> PoolKey:
        return (self.key[0], self.pool)


async def lease_token(
    runtime: Runtime, lease: RawBody, pool: str, *, new: str | None = None
) -> str:
    """The lease's token, from its Secret, which is created (with ``new``, or a token made
    here) if it is not there; one an earlier lease of the same name left is replaced."""
    namespace, uid = lease["metadata"]["namespace"], lease["metadata"].get("uid", "")
    name = lease_token_secret_name(lease["metadata"]["name"])
    for _ in range(3):
        token = new or secrets.token_urlsafe(32)
        try:
            await runtime.kube.create_secret(namespace, lease_token_secret(lease, pool, token))
            return token
        except Conflict:
            pass
        try:
            found = await runtime.kube.read_secret(namespace, name)
        except ObjectNotFound:
            continue
        if owned_by(found, uid):
            return read_token(found)
        await runtime.kube.delete_secret(namespace, name, uid=found["metadata"].get("uid"))
    raise Conflict(f"secrets: {name} is held by another lease of that name")


async def delete_token(runtime: Runtime, key: ObjectKey) -> None:
    await runtime.kube.delete_secret(key[0], lease_token_secret_name(key[1]))


async def open_binding(
    runtime: Runtime, handle: PoolHandle, lease: RawBody, held: LeaseBinding
) -> binding.BindFailure | None:
    """Bind ``held.checkout``'s agent to the lease: a new token written to the Secret and
    handed to the agent (``POST /bind``) side by side, as no client reads the Secret before
    the lease says Bound. A Secret this lease wrote before a restart keeps its token, and the
    agent is unbound and bound again with that one. On a refusal the Secret goes, and the
    failure is returned: the caller reports it and gives the agent back as it says
    (:func:`give_back_failed`). A Secret that cannot be written unbinds the agent again before
    the error goes up."""
    held.token = secrets.token_urlsafe(32)
    stored, failure = await asyncio.gather(
        lease_token(runtime, lease, held.pool, new=held.token),
        _post_bind(runtime, handle, held),
        return_exceptions=True,
    )
    if isinstance(failure, BaseException):
        raise failure
    if isinstance(stored, BaseException):
        if failure is None:
            await _post_unbind(runtime, handle, held.key, held.checkout)
        raise stored
    if failure is None and stored != held.token:
        # The Secret was there (the operator restarted mid-bind) and keeps its token. The agent
        # took the /bind as a new binding with the fresh token or, bound to this lease before,
        # as a renewal keeping the stored one: either way another /bind would only renew, so
        # the agent is unbound and bound again with the Secret's token.
        held.token = stored
        if await _post_unbind(runtime, handle, held.key, held.checkout):
            failure = await _post_bind(runtime, handle, held)
        else:
            failure = binding.rebind_failure(agent=held.checkout.agent, pool=held.pool)
    if failure is not None:
        await delete_token(runtime, held.key)
    return failure


async def renew_binding(
    runtime: Runtime,
    handle: PoolHandle,
    lease: RawBody,
    held: LeaseBinding,
    expire_time: str,
) -> binding.BindFailure | None:
    """Give the agent the lease's new expiry (``POST /bind`` again, the same lease and token);
    None once it took it, else why it did not."""
    if not held.token:
        # Bound before an operator restart: the token is the one in the lease's Secret.
        held.token = await lease_token(runtime, lease, held.pool)
    previous, held.expire_time = held.expire_time, expire_time
    failure = await _post_bind(runtime, handle, held)
    if failure is not None:
        held.expire_time = previous
    return failure


async def _post_bind(
    runtime: Runtime, handle: PoolHandle, held: LeaseBinding
) -> binding.BindFailure | None:
    if not handle.spec.speaks_protocol:
        return None
    answer = await runtime.agents.bind(
        held.checkout.endpoint,
        handle.token,
        lease=held.key[1],
        lease_token=held.token,
        expire_time=held.expire_time,
        context=held.context,
        timeout=runtime.settings.leases.bind_timeout_seconds,
    )
    if answer.status_code is not None:
        note_answer(handle, held.checkout.agent, reason=answer.reason, message=answer.message)
    if answer.ok:
        return None
    return binding.bind_failure(
        answer.status_code,
        answer.reason,
        answer.message,
        agent=held.checkout.agent,
        pool=held.pool,
    )


async def close_binding(
    runtime: Runtime, key: ObjectKey, pool: str, checkout: Checkout, *, delete_secret: bool = True
) -> CheckinOutcome:
    """Take the lease's token back from its agent (``POST /unbind``, unless the agent is lost)
    and, with ``delete_secret``, delete the lease's Secret (a deleted lease's goes by garbage
    collection); the outcome the agent goes back with: retired when the unbind failed or got
    no answer. The unbind resets the agent as well."""
    handle = runtime.pools.get((key[0], pool))
    unbound = False
    if handle is not None and not checkout.is_lost:
        unbound = await _post_unbind(runtime, handle, key, checkout)
    if delete_secret:
        await delete_token(runtime, key)
    if checkout.is_lost:
        return CheckinOutcome.LOST
    return CheckinOutcome.SUCCESS if unbound else CheckinOutcome.RESET_FAILED


async def _post_unbind(
    runtime: Runtime, handle: PoolHandle, key: ObjectKey, checkout: Checkout
) -> bool:
    """``POST /unbind`` the lease ``key`` from its agent; whether the agent took it (an HTTP
    pool's agent, never bound, has nothing to give back)."""
    if not handle.spec.speaks_protocol:
        return True
    return await runtime.agents.unbind(
        checkout.endpoint,
        handle.token,
        lease=key[1],
        timeout=runtime.settings.leases.bind_timeout_seconds,
    )


def give_back(runtime: Runtime, pool: PoolKey, checkout: Checkout, outcome: CheckinOutcome) -> None:
    """Return a lease's agent to its pool, if the pool is still served: its unbind reset it."""
    handle = runtime.pools.get(pool)
    if handle is not None:
        handle.broker.checkin(checkout, outcome)


async def give_back_failed(
    runtime: Runtime, pool: PoolKey, checkout: Checkout, failure: binding.BindFailure
) -> None:
    """Return an agent whose bind failed as the failure says: untouched, reset (when the pool
    asks for it) and counted as a failure, or retired."""
    handle = runtime.pools.get(pool)
    if handle is not None:
        await return_agent(runtime, handle, checkout, FATES[failure.fate])
