"""The one door to a pool for whoever wants its agents: a run's items, a lease, a gateway call.

A caller asks for a pool by namespace and name. When this operator serves it, its handle comes
at once, with nothing read. When it does not, the pool is looked up: one that does not exist is
:class:`~agentpool.pool.checkin.PoolNotFound`, with the one message every caller shows
(:func:`~agentpool.pool.checkin.pool_not_found`); one that exists is waited for while its loop
starts (a pool applied a moment ago, or an operator just restarted), and one still not served
after the wait is :class:`NotServed`. What each caller makes of them (a lease's Failed status,
a run's wait, a gateway's 404 or 503) is its own.
"""

from __future__ import annotations

from collections.abc import Callable

from agentpool.api import AgentPoolSpec, SpecError, parse_spec
from agentpool.api.raw import RawBody
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.io.kube import ObjectNotFound
from agentpool.pool.checkin import pool_not_found


class NotServed(Exception):
    """The pool exists, but this operator did not serve it within the wait."""


async def find_pool(runtime: Runtime, namespace: str, pool: str) -> RawBody | None:
    """The pool as stored; None when there is no such pool."""
    try:
        return await runtime.kube.get_custom("agentpools", namespace, pool)
    except ObjectNotFound:
        return None


async def served_pool(
    runtime: Runtime,
    namespace: str,
    pool: str,
    *,
    timeout: Callable[[AgentPoolSpec], float],
    elsewhere_now: bool = False,
) -> PoolHandle:
    """The pool's handle: at once when it is served; else, when it exists, once its loop starts
    within ``timeout(spec)`` seconds. Raises PoolNotFound when there is no such pool, NotServed
    when it is not served in time; with ``elsewhere_now``, at once when another replica works on
    it (a gateway call, which goes there)."""
    handle = runtime.pools.get((namespace, pool))
    if handle is not None:
        return handle
    if elsewhere_now and (runtime.elsewhere((namespace, pool)) or runtime.placements.left):
        # Another replica's pool (or this one stops): said at once, for the caller to go there.
        raise NotServed(
            f'AgentPool "{pool}" in namespace "{namespace}" is served by another replica'
        )
    found = await find_pool(runtime, namespace, pool)
    if found is None:
        raise pool_not_found(namespace, pool)
    try:
        spec = parse_spec(AgentPoolSpec, found.get("spec"))
    except SpecError as error:
        # Its loop will not serve it either until its spec is fixed.
        raise NotServed(f'AgentPool "{pool}" in namespace "{namespace}": {error}') from None
    wait = timeout(spec)
    handle = await runtime.pools.wait((namespace, pool), wait)
    if handle is None and runtime.placements.left:
        raise NotServed(f'AgentPool "{pool}" in namespace "{namespace}": this replica stops')
    if handle is None:
        raise NotServed(
            f'AgentPool "{pool}" in namespace "{namespace}" is not served by the operator '
            f"after {wait:g}s"
        )
    return handle
