"""The client's tunables in one object, each with its default and the reason for it.

:class:`agentpool.client.Client` takes a :class:`ClientSettings` (the defaults unless told
otherwise) and hands its values to the lease, run and agent code, so a test or a program can
run the client with other timings and no module constant is patched. What a user sets per lease
or run (its ttl, its cap) is an argument of the call; here are only the defaults for when the
call names none.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentpool.api import POOL_DEFAULTS


@dataclass(frozen=True)
class ClientSettings:
    """How the client waits, renews and calls."""

    lease_ttl_seconds: int = 60
    """A lease's ttl when the caller names none: short enough that a client that dies without
    releasing its agent leaves it held for a minute at most, since a live holder renews."""
    renew_fraction: float = 1 / 3
    """A held lease is renewed every ttl times this, so two renewals in a row may fail (a
    passing API error) before the lease expires, as a kubelet renews its node Lease."""
    call_timeout_seconds: float = float(POOL_DEFAULTS.call_timeout_seconds)
    """How long one invoke waits for the agent's answer when the caller names no timeout: the
    pool's own default call timeout."""
    bind_timeout_seconds: float = 120.0
    """How long a lease waits to be Bound when the caller names no checkout timeout: four times
    a pool's default checkout timeout, so the operator's verdict (CheckoutTimeout) comes first;
    past it no operator is answering and the client gives up with BindTimeout."""
    bind_grace_seconds: float = 30.0
    """Beyond a checkout timeout the caller names, how long the client still waits for the
    operator's verdict before it gives up with BindTimeout."""
    run_ttl_seconds_after_finished: int | None = 3600
    """A submitted run's ttlSecondsAfterFinished when the caller names none: an hour to read its
    results, then the operator deletes it, so the runs that programs and shells submit do not
    pile up in the namespace forever. None keeps them, as a PoolRun applied with kubectl is."""
    watch_retries: int = 5
    """Failed watch requests in a row (the API server restarting, a dropped connection) that a
    wait survives before it raises the error."""
    watch_retry_seconds: float = 0.5
    """The pause before each such retry."""
    cancel_wait_seconds: float = 10.0
    """How long an interrupted call of the sync client waits for its clean-up (a lease's
    delete) before the interrupt goes on; a second interrupt does not wait."""
