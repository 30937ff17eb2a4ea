"""How an agent is configured: its environment read into ``Settings``, and its log set up.

``agentpool.agent.running`` builds the server's ``Settings`` here; ``python -m agentpool.agent``
sets up the log before loading the agent, so whatever the agent's module logs on import reaches
the log too.
The token is required: an agent without one refuses to start rather than serve anyone who asks.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from agentpool.wire import protocol


class ConfigError(Exception):
    """The agent cannot start as configured; the message says what to set."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Where and how an agent serves, read from its environment."""

    host: str
    port: int
    token: str = field(repr=False)
    drain_seconds: float = protocol.DEFAULT_DRAIN_SECONDS
    slots: int = protocol.DEFAULT_SLOTS
    """Items served at once (``AGENTPOOL_SLOTS``, which the operator sets from the pool)."""
    keep_alive_seconds: float = 10.0
    """How long a streamed answer goes without a part before a comment line is written: short
    enough that no proxy between drops a stream as idle while its handler thinks, and that a
    caller who went away is noticed while no part comes."""

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], *, host: str | None = None, port: int | None = None
    ) -> Settings:
        """Read the settings, letting explicit ``host`` and ``port`` win over the environment."""
        token = env.get(protocol.TOKEN_ENV, "")
        if not token:
            raise ConfigError(
                f"{protocol.TOKEN_ENV} is not set: an agent serves only callers holding its pool's"
                " token. The operator sets it on every agent pod; to run an agent by hand, export"
                f" {protocol.TOKEN_ENV} with a secret of your choosing and send it as"
                " 'Authorization: Bearer <token>'."
            )
        if port is None:
            raw_port = env.get(protocol.PORT_ENV, str(protocol.DEFAULT_PORT))
            try:
                port = int(raw_port)
            except ValueError:
                message = f"{protocol.PORT_ENV}={raw_port!r} is not a port number"
                raise ConfigError(message) from None
        if not 0 <= port <= 65535:
            raise ConfigError(f"port {port} is out of range 0..65535")
        raw_drain = env.get(protocol.DRAIN_ENV, str(protocol.DEFAULT_DRAIN_SECONDS))
        try:
            drain_seconds = float(raw_drain)
        except ValueError:
            raise ConfigError(f"{protocol.DRAIN_ENV}={raw_drain!r} is not a number") from None
        return cls(
            host=host or env.get(protocol.HOST_ENV) or protocol.DEFAULT_HOST,
            port=port,
            token=token,
            drain_seconds=drain_seconds,
            slots=_slots(env),
        )


def _slots(env: Mapping[str, str]) -> int:
    raw = env.get(protocol.SLOTS_ENV, str(protocol.DEFAULT_SLOTS))
    try:
        slots = int(raw)
    except ValueError:
        raise ConfigError(f"{protocol.SLOTS_ENV}={raw!r} is not a whole number") from None
    if slots < 1:
        raise ConfigError(f"{protocol.SLOTS_ENV}={slots} must be at least 1")
    return slots


def configure_logging() -> None:
    """Log at ``AGENT_LOG_LEVEL`` (INFO): to stdout one line per record, and a record that
    carries a traceback (a failed item, start-up or reset) to stderr whole, as Python prints an
    uncaught exception. ``kubectl logs`` shows both."""
    level = os.environ.get(protocol.LOG_LEVEL_ENV, "INFO").upper()
    lines = logging.StreamHandler(sys.stdout)
    lines.addFilter(lambda record: record.exc_info is None)
    tracebacks = logging.StreamHandler(sys.stderr)
    tracebacks.addFilter(lambda record: record.exc_info is not None)
    logging.basicConfig(
        level=level if level in logging.getLevelNamesMapping() else "INFO",
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=[lines, tracebacks],
    )
