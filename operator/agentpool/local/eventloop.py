"""An event loop for a thread of its own that ends only once its connections have closed.

``asyncio.run`` closes its loop the moment the main coroutine returns. A TLS connection closed
while its response was still streaming (every watch of an operator that stops, the kubelet's pod
watch) is at that moment still trading close_notify with its peer; aiohttp no longer tracks it,
so no session close ends it either. Closing the loop under it leaves its socket open until the
garbage collector finds it, far from the code that owned it. :func:`run` waits, up to a deadline,
until the loop watches no socket but its own, then closes it.

The local cluster runs the embedded operator with it
(:class:`agentpool.local.cluster.OperatorThread`), and the test fixtures run the whole cluster
with it in a background thread.
"""

from __future__ import annotations

import asyncio
import logging
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: How long connections get to finish closing once the main coroutine returned. A peer on the
#: same machine or cluster answers close_notify in milliseconds; one that never answers must not
#: hold the thread for good.
CLOSE_TIMEOUT = 10.0
POLL_INTERVAL = 0.01


def run(main: Coroutine[Any, Any, T], *, close_timeout: float = CLOSE_TIMEOUT) -> T:
    """``asyncio.run(main)``, then wait until every socket the loop watched has closed."""
    selector = selectors.DefaultSelector()
    with asyncio.Runner(loop_factory=lambda: asyncio.SelectorEventLoop(selector)) as runner:
        runner.get_loop()
        own = watched(selector)  # the loop's self-pipe, which only closing the loop ends
        try:
            return runner.run(main)
        finally:
            runner.run(connections_closed(selector, own, close_timeout))


def watched(selector: selectors.BaseSelector) -> set[int]:
    """The file descriptors the loop of ``selector`` waits on."""
    return {key.fd for key in selector.get_map().values()}


async def connections_closed(
    selector: selectors.BaseSelector, own: set[int], timeout: float
) -> None:
    """Return once the loop of ``selector`` watches nothing beyond ``own``, or at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while pending := watched(selector) - own:
        if loop.time() >= deadline:
            logger.warning(
                "%d connection(s) still open %ss after the loop's work ended; closing the loop"
                " anyway (file descriptors %s)",
                len(pending),
                timeout,
                sorted(pending),
            )
            return
        await asyncio.sleep(POLL_INTERVAL)
