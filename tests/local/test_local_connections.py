"""The local cluster's embedded operator leaves no connection open once it has stopped.

An operator stops its watches mid-stream; over TLS each such connection is still closing
(close_notify to the API server and back) when the operator's own work has ended. The thread that
runs it must let those closes finish before its event loop goes, or the sockets stay open until
the garbage collector reports them, far from the code that owned them; and a peer that never
answers must not hold the thread for good.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agentpool.local import eventloop
from agentpool.local.kubeconfig import ApiAccess
from cluster import ClusterThread, wait_for


def test_an_embedded_operator_that_stops_mid_watch_leaves_no_socket_open(scratch: Path) -> None:
    """An operator that watches pods over TLS until it is stopped, then leaves the watch as kopf
    does, has no socket left open once the cluster has stopped it, even when the API server
    answers the close only after the operator's own work has ended (as a busy one may)."""
    sockets: list[Any] = []

    def hold_the_server(held: asyncio.Future[None], operator: threading.Thread) -> None:
        # Busy until the operator's thread has ended, or for two seconds at most: far less than
        # the operator's thread gives its connections to finish closing.
        held.get_loop().call_soon_threadsafe(held.set_result, None)
        operator.join(2)

    async def watch_pods_until_stopped(kubeconfig: Path, stop_flag: asyncio.Event) -> None:
        access = ApiAccess.from_kubeconfig(kubeconfig)
        connector = aiohttp.TCPConnector(ssl=access.ssl_context() or True)
        async with aiohttp.ClientSession(connector=connector, headers=access.headers()) as session:
            url = f"{access.server}/api/v1/pods"
            async with session.get(url, params={"watch": "true"}) as response:
                assert response.status == 200
                assert response.connection is not None
                assert response.connection.transport is not None
                sockets.append(response.connection.transport.get_extra_info("socket"))
                await stop_flag.wait()
                held = asyncio.get_running_loop().create_future()
                assert cluster.loop is not None
                cluster.loop.call_soon_threadsafe(hold_the_server, held, threading.current_thread())
                await held

    cluster = ClusterThread(scratch / "cluster", operator=watch_pods_until_stopped)
    cluster.start()
    try:
        wait_for(lambda: sockets, 30, message="the operator watching pods")
    finally:
        cluster.stop()
    assert not cluster.thread.is_alive()
    assert [sock.fileno() for sock in sockets] == [-1], "the watch's socket is still open"


def test_a_connection_that_never_closes_holds_the_loop_only_until_the_deadline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A peer that never answers the close does not keep the thread for good: the loop ends at
    its deadline and says which file descriptor was still open."""
    ours, theirs = socket.socketpair()
    fd = ours.fileno()

    async def leave_a_socket_watched() -> str:
        asyncio.get_running_loop().add_reader(ours, lambda: None)
        return "done"

    try:
        with caplog.at_level(logging.WARNING, logger=eventloop.__name__):
            assert eventloop.run(leave_a_socket_watched(), close_timeout=0.1) == "done"
    finally:
        ours.close()
        theirs.close()
    assert "still open 0.1s after the loop's work ended" in caplog.text
    assert f"file descriptors [{fd}]" in caplog.text
