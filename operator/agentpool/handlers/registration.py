"""Binding the handlers of one of agentpool's kinds to kopf's registry.

Each handler is a module-level coroutine that takes the runtime first; :class:`KindHandlers` gives
it the runtime and registers it for the kind's plural under its own name, which kopf keeps as the
handler's id. ``register`` in :mod:`~agentpool.handlers.pools`, :mod:`~agentpool.handlers.runs` and
:mod:`~agentpool.handlers.leases` make one each.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import kopf

from agentpool import GROUP, VERSION
from agentpool.handlers.runtime import Runtime

Handler = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class KindHandlers:
    """The handlers of the kind ``plural``, bound to ``registry``, each given ``runtime``."""

    plural: str
    registry: kopf.OperatorRegistry
    runtime: Runtime

    def on_event(self, handler: Handler) -> None:
        """Call ``handler`` on every watch event of the kind."""
        kopf.on.event(GROUP, VERSION, self.plural, id=handler.__name__, registry=self.registry)(
            functools.partial(handler, self.runtime)
        )

    def daemon(self, handler: Handler, *, cancellation_backoff: float | None = None) -> None:
        """Run ``handler`` for as long as each object lives: restarted 2 s after it fails, and
        cancelled 10 s after it was asked to stop (``cancellation_backoff`` after that ask)."""
        kopf.daemon(
            GROUP,
            VERSION,
            self.plural,
            id=handler.__name__,
            registry=self.registry,
            backoff=2,
            cancellation_backoff=cancellation_backoff,
            cancellation_timeout=10,
        )(functools.partial(handler, self.runtime))

    def on_delete(self, handler: Handler) -> None:
        """Call ``handler`` when an object of the kind is deleted, before it goes."""
        kopf.on.delete(GROUP, VERSION, self.plural, id=handler.__name__, registry=self.registry)(
            functools.partial(handler, self.runtime)
        )
