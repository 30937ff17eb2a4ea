"""A pool's agent token: the Secret that holds it, kept in place for as long as the pool lives.

The token is the operator's own credential towards its agents. The pool loop calls
:func:`open_token` when it starts (reading the Secret, or minting a token when there is none) and
:func:`keep_token_secret` on its passes (at most every few seconds), which puts back a Secret a user
deleted, with the token the agents already hold, so that new agents can start: a pass comes
before every agent the pool creates, and at least once every five minutes.
"""

from __future__ import annotations

import contextlib
import secrets
import time

import kopf

from agentpool.api.raw import RawBody, raw_body
from agentpool.api.reasons import EventReason
from agentpool.handlers.runtime import PoolHandle, Runtime
from agentpool.io import events
from agentpool.io.kube import Conflict, ObjectNotFound
from agentpool.pool.manifests import read_token, token_secret, token_secret_name


async def ensure_token(runtime: Runtime, pool: RawBody) -> tuple[str, bool]:
    """The pool's agent token, from its Secret, creating the Secret on first sight; and whether
    the token is a new one."""
    namespace, name = pool["metadata"]["namespace"], pool["metadata"]["name"]
    try:
        secret = await runtime.kube.read_secret(namespace, token_secret_name(name))
    except ObjectNotFound:
        pass
    else:
        # One an earlier pool of this name left, about to be collected with it, still holds a
        # good token: this pool goes on with it, and puts the Secret back, as its own, once the
        # collector took it (see keep_token_secret).
        return read_token(secret), False
    token = secrets.token_urlsafe(32)
    try:
        await runtime.kube.create_secret(namespace, token_secret(pool, token))
    except Conflict:
        return read_token(await runtime.kube.read_secret(namespace, token_secret_name(name))), False
    return token, True


async def open_token(runtime: Runtime, handle: PoolHandle, body: kopf.Body) -> str:
    """The token a pool's loop starts with; a new one, when agents already run, is announced:
    they hold the old one and are replaced (see ``TokenChanged`` in the pool core)."""
    token, minted = await ensure_token(runtime, raw_body(body))
    # Just read or written: the loop's first pass need not look again (a second GET a pool,
    # queued behind every other pool's, when all start at once after a restart).
    handle.secret_checked_at = time.monotonic()
    if minted and handle.pods:
        events.post(
            body,
            type="Warning",
            reason=str(EventReason.TOKEN_ROTATED),
            message=f"The agent token Secret {token_secret_name(handle.name)} was missing: a new "
            f"token was minted, and the {len(handle.pods)} agent(s) holding the old one are "
            "replaced as they fall idle; no item fails for it",
        )
    return token


async def keep_token_secret(runtime: Runtime, handle: PoolHandle, body: kopf.Body) -> None:
    """Put back the token Secret if it went, with the token the agents already hold, so that
    agents started from now on get it too (instead of waiting in CreateContainerConfigError)."""
    now = time.monotonic()
    if now - handle.secret_checked_at < handle.settings.secret_check_seconds:
        return
    name = token_secret_name(handle.name)
    try:
        await runtime.kube.read_secret(handle.namespace, name)
    except ObjectNotFound:
        with contextlib.suppress(Conflict):
            await runtime.kube.create_secret(
                handle.namespace, token_secret(dict(body), handle.token)
            )
        events.post(
            body,
            type="Warning",
            reason=str(EventReason.TOKEN_SECRET_RECREATED),
            message=f"The agent token Secret {name} was missing: re-created it with the pool's "
            "token",
        )
    handle.secret_checked_at = now
