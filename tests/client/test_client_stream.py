"""A streamed call through the gateway: ``Client.stream`` and ``agentpool call --stream`` get each
part as the agent makes it, a failure after some parts raises where it came, a caller that goes
away mid-stream leaves the agent to be taken back, and an agent that answers whole gives its
output as one part."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from client_support import ClientCluster, Outside

from agentpool.client import CallFailed, Client
from cluster import wait_for

pytestmark = pytest.mark.cluster


async def test_each_part_comes_as_the_agent_makes_it(
    client: Client, outside: Outside, tmp_path: Path
) -> None:
    pool = outside.pool("words", agents=1, agent="streaming")
    gate = tmp_path / "gate"
    parts = client.stream(pool, {"question": "is it warm", "after": str(gate)})
    # The agent makes every word past the first only once the gate exists, which the test
    # makes only after it has the first: that one came before the answer ended.
    async with asyncio.timeout(60):
        assert await anext(parts) == "You"
    gate.touch()
    assert [part async for part in parts] == ["asked:", "is", "it", "warm"]
    # The same agent answers a plain call with the list of its parts.
    whole = await client.call(pool, {"question": "twice"})
    assert whole == ["You", "asked:", "twice"]
    # An agent that answers whole (echo) gives its output as the one part.
    echo = outside.pool("echo", agents=1)
    assert [part async for part in client.stream(echo, {"n": 1})] == [{"n": 1}]


async def test_a_failure_mid_stream_raises_there_and_a_caller_gone_frees_the_agent(
    client: Client, outside: Outside, tmp_path: Path
) -> None:
    pool = outside.pool("failing", agents=1, agent="streaming")
    got: list[str] = []

    async def read_all() -> None:
        async for part in client.stream(pool, {"question": "x", "fail": "the model broke"}):
            got.append(part)

    with pytest.raises(CallFailed) as failed:
        await read_all()
    assert got == ["You"]
    assert failed.value.reason == "HandlerError"
    assert "the model broke" in failed.value.message

    parts = client.stream(pool, {"question": "never ends", "after": str(tmp_path / "never")})
    async with asyncio.timeout(60):
        assert await anext(parts) == "You"
    await parts.aclose()  # the caller goes away mid-stream

    # The agent ends the item once it sees its caller gone (at its next write or keep-alive),
    # and is taken back then: the pool's one agent serves the next call.
    next_call = client.call(pool, {"question": "next"}, checkout_timeout=60)
    assert await next_call == ["You", "asked:", "next"]


def test_call_stream_prints_each_part_as_a_line(
    client_cluster: ClientCluster, outside: Outside
) -> None:
    pool = outside.pool("cli", agents=1, agent="streaming")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentpool",
            "call",
            pool,
            "--stream",
            "--item",
            json.dumps({"question": "hi there"}),
            *client_cluster.options(outside.namespace),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == [
        "You",
        "asked:",
        "hi",
        "there",
    ]
    wait_for(lambda: outside.available(pool) == 1, 30, message="the agent back")
