"""A handler that is an async generator streams its parts: a caller that asks with ``Accept:
text/event-stream`` reads the first part while the handler is still making the next, an error
ends the stream with an error event, and a caller that goes away closes the generator and frees
its slot; anyone else gets the list of the parts as the whole output. Served in this process, so
the handlers wait on events the test sets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from agent_processes import REPO, wait_for, wait_until

from agentpool.agent import Agent, Context
from agentpool.agent.loader import load_agent
from agentpool.agent.server import AgentServer
from agentpool.agent.settings import Settings
from agentpool.io.agents import AgentClient
from agentpool.wire import events
from agentpool.wire.events import Event, EventParser, Failed, Whole
from docblocks import block_for

TOKEN = "pool-token-streams"
STREAMED = {"Authorization": f"Bearer {TOKEN}", "Accept": "text/event-stream"}
#: How long any one read may take before the test fails rather than hangs.
READ_SECONDS = 30

Serve = Callable[..., Any]


def envelope(item_id: str, item: object = None) -> dict[str, object]:
    return {"id": item_id, "item": item, "input": None, "attempt": 1, "run": "r"}


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Serve an agent in this process; its endpoint and server. Stopped after the test."""
    stops: list[tuple[asyncio.Event, asyncio.Task[int]]] = []

    async def serve(agent: Agent, **settings: Any) -> tuple[str, AgentServer]:
        server = AgentServer(agent, Settings(host="127.0.0.1", port=0, token=TOKEN, **settings))
        stop = asyncio.Event()
        task = asyncio.create_task(server.serve_until(stop))
        stops.append((stop, task))
        await wait_for(lambda: server.ready or task.done(), what="the agent to serve")
        return f"http://127.0.0.1:{server.port}", server

    yield serve
    for stop, _ in stops:
        stop.set()
    for _, task in stops:
        async with asyncio.timeout(30):
            await task


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


class EventReader:
    """The events of a streamed answer, read as their bytes arrive."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.parser = EventParser()
        self.pending: list[Event] = []
        self.raw = b""

    async def next(self) -> Event | None:
        """The next event, or None once the stream ends."""
        async with asyncio.timeout(READ_SECONDS):
            while not self.pending:
                chunk = await self.response.content.readany()
                if not chunk:
                    return None
                self.raw += chunk
                self.pending.extend(self.parser.feed(chunk))
        return self.pending.pop(0)

    async def rest(self) -> list[Event]:
        """Every event to the end of the stream."""
        found = []
        while (event := await self.next()) is not None:
            found.append(event)
        return found


async def idle(client: AgentClient, endpoint: str) -> None:
    async def no_slot_busy() -> bool:
        status = await client.status(endpoint, TOKEN)
        return status is not None and not status.busy and status.busy_slots == 0

    await wait_until(no_slot_busy, what="the agent to be idle")


async def test_the_first_part_reaches_the_caller_before_the_handler_ends(
    serve: Serve, session: aiohttp.ClientSession, client: AgentClient
) -> None:
    """The caller reads the first part while the handler waits for the test to let it make the
    second, which it does only after that read; meanwhile the item holds its slot (/status lists
    it, another item is refused 409 as JSON), and once ``done`` is read the agent is idle."""
    read_first = asyncio.Event()

    async def handler(item: Any, input: Any, context: Context) -> AsyncIterator[str]:
        yield "Hello"
        await read_first.wait()
        yield ", world"

    endpoint, _ = await serve(Agent(handler, name="words"))
    async with session.post(f"{endpoint}/invoke", json=envelope("s1"), headers=STREAMED) as answer:
        assert (answer.status, answer.content_type) == (200, "text/event-stream")
        reader = EventReader(answer)
        assert await reader.next() == Event("part", '"Hello"')

        status = await client.status(endpoint, TOKEN)
        assert status is not None
        assert (status.busy, status.busy_slots, status.items) == (True, 1, ("s1",))
        refused = await session.post(f"{endpoint}/invoke", json=envelope("s2"), headers=STREAMED)
        assert (refused.status, refused.content_type) == (409, "application/json")
        assert (await refused.json())["error"]["reason"] == "Busy"

        read_first.set()
        rest = await reader.rest()
    assert rest == [Event("part", '", world"'), Event("done", '{"id":"s1"}')]
    answered = events.whole_answer([Event("part", '"Hello"'), *rest])
    assert answered == Whole(output=["Hello", ", world"], done={"id": "s1"})
    await idle(client, endpoint)


async def test_without_the_accept_header_the_output_is_the_list_of_parts(
    serve: Serve, session: aiohttp.ClientSession, client: AgentClient
) -> None:
    """The operator's client, which asks for no stream, and a caller that asks only for JSON get
    ``200 {"output": [parts]}``."""

    async def handler(item: Any, input: Any, context: Context) -> AsyncIterator[Any]:
        for word in item.split():
            yield word
        yield {"words": len(item.split())}

    endpoint, _ = await serve(Agent(handler, name="words"))
    result = await client.invoke(endpoint, TOKEN, envelope("w1", "two words"), timeout=30)
    assert result.ok, result
    assert result.output == ["two", "words", {"words": 2}]
    headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"}
    async with session.post(
        f"{endpoint}/invoke", json=envelope("w2", "one"), headers=headers
    ) as answer:
        assert (answer.status, answer.content_type) == (200, "application/json")
        assert await answer.json() == {"output": ["one", {"words": 1}]}


async def failing(item: Any, input: Any, context: Context) -> AsyncIterator[Any]:
    yield "a"
    if item == "not-json":
        yield {1, 2}
    raise KeyError("n")


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("raise", "KeyError: 'n'"),
        ("not-json", "ValueError: a part of the handler's output is not JSON"),
    ],
)
async def test_a_failure_mid_stream_ends_it_with_an_error_event(
    serve: Serve, session: aiohttp.ClientSession, client: AgentClient, item: str, message: str
) -> None:
    """A handler that raises after a part, or yields a part that is not JSON, ends the stream
    with an ``error`` event of the reason and message the same failure gets unstreamed; the agent
    is idle after."""
    endpoint, _ = await serve(Agent(failing, name="failing"))
    async with session.post(
        f"{endpoint}/invoke", json=envelope("f1", item), headers=STREAMED
    ) as answer:
        read = await EventReader(answer).rest()
    assert read[0] == Event("part", '"a"')
    failed = events.whole_answer(read)
    assert isinstance(failed, Failed)
    assert failed.reason == "HandlerError"
    assert failed.message.startswith(message)
    unstreamed = await client.invoke(endpoint, TOKEN, envelope("f2", item), timeout=30)
    assert (unstreamed.reason, unstreamed.message) == (failed.reason, failed.message)
    await idle(client, endpoint)


async def test_a_caller_gone_mid_stream_closes_the_generator(
    serve: Serve, session: aiohttp.ClientSession, client: AgentClient
) -> None:
    """A caller that stops reading after the first part and closes the connection: the write
    that fails stops the handler, whose ``finally`` runs, and the agent is idle again."""
    closed = asyncio.Event()

    async def handler(item: Any, input: Any, context: Context) -> AsyncIterator[int]:
        try:
            count = 0
            while True:
                yield count
                count += 1
                await asyncio.sleep(0)  # a model making words as fast as it can
        finally:
            closed.set()

    endpoint, server = await serve(Agent(handler, name="endless"))
    answer = await session.post(f"{endpoint}/invoke", json=envelope("e1"), headers=STREAMED)
    assert await EventReader(answer).next() == Event("part", "0")
    answer.close()
    await wait_for(closed.is_set, what="the handler's finally to run")
    await idle(client, endpoint)
    assert server.uses == 1


async def test_a_caller_gone_while_no_part_comes_is_found_by_the_keep_alive(
    serve: Serve, session: aiohttp.ClientSession, client: AgentClient
) -> None:
    """While the handler makes no part, comment lines keep the stream alive; once its caller
    has gone, the next one fails, and the handler waiting for something that never comes is
    closed all the same."""
    closed = asyncio.Event()

    async def handler(item: Any, input: Any, context: Context) -> AsyncIterator[str]:
        try:
            yield "thinking"
            await asyncio.Event().wait()
            yield "never"
        finally:
            closed.set()

    endpoint, _ = await serve(Agent(handler, name="thinking"), keep_alive_seconds=0.05)
    answer = await session.post(f"{endpoint}/invoke", json=envelope("k1"), headers=STREAMED)
    reader = EventReader(answer)
    assert await reader.next() == Event("part", '"thinking"')
    async with asyncio.timeout(READ_SECONDS):
        while events.KEEP_ALIVE not in reader.raw.partition(b"\n\n")[2]:
            reader.raw += await answer.content.readany()
    answer.close()
    await wait_for(closed.is_set, what="the handler's finally to run")
    await idle(client, endpoint)


async def test_a_plain_handler_asked_to_stream_answers_json(
    serve: Serve, session: aiohttp.ClientSession
) -> None:
    """A handler that is no generator has its output whole at once: asked for a stream, it
    answers JSON as an agent that cannot stream does, and the caller goes by its type."""

    async def handler(item: Any, input: Any, context: Context) -> Any:
        return {"echo": item}

    endpoint, _ = await serve(Agent(handler, name="plain"))
    async with session.post(
        f"{endpoint}/invoke", json=envelope("p1", 7), headers=STREAMED
    ) as answer:
        assert (answer.status, answer.content_type) == (200, "application/json")
        assert await answer.json() == {"output": {"echo": 7}}


async def test_a_streaming_handler_cast_runs_whole_in_the_background(
    serve: Serve, session: aiohttp.ClientSession, client: AgentClient
) -> None:
    """A cast is answered 202 whatever Accept says; the generator runs to its end meanwhile,
    holding its slot until then."""
    release = asyncio.Event()
    finished = asyncio.Event()

    async def handler(item: Any, input: Any, context: Context) -> AsyncIterator[str]:
        yield "a"
        await release.wait()
        yield "b"
        finished.set()

    endpoint, _ = await serve(Agent(handler, name="cast"))
    headers = {**STREAMED, "Prefer": "respond-async"}
    async with session.post(f"{endpoint}/invoke", json=envelope("c1"), headers=headers) as answer:
        assert (answer.status, await answer.json()) == (202, {"accepted": True})
    status = await client.status(endpoint, TOKEN)
    assert status is not None
    assert status.items == ("c1",)
    release.set()
    await wait_for(finished.is_set, what="the cast's handler to finish")
    await idle(client, endpoint)


def test_the_guides_streaming_example_streams(tmp_path: Path) -> None:
    """The agent guide's streaming example, saved as printed and loaded as ``python -m
    agentpool.agent`` loads it, sends its words as parts to a caller that streams and their
    list to one that does not."""
    block = block_for(
        "tests/agent/test_agent_streams.py::test_the_guides_streaming_example_streams",
        REPO / "docs" / "guides" / "write-an-agent.md",
    )
    module = tmp_path / "streaming_agent.py"
    module.write_text(block.text)
    agent = load_agent(f"{module}:agent")
    body = envelope("q1", {"question": "why?"})

    async def ask() -> tuple[list[Event], Any]:
        settings = Settings(host="127.0.0.1", port=0, token=TOKEN)
        server = AgentServer(agent, settings)
        stop = asyncio.Event()
        serving = asyncio.create_task(server.serve_until(stop))
        try:
            await wait_for(lambda: server.ready, what="the example to serve")
            endpoint = f"http://127.0.0.1:{server.port}/invoke"
            async with aiohttp.ClientSession() as session:
                async with session.post(endpoint, json=body, headers=STREAMED) as answer:
                    streamed = await EventReader(answer).rest()
                headers = {"Authorization": f"Bearer {TOKEN}"}
                async with session.post(endpoint, json=body, headers=headers) as answer:
                    whole = await answer.json()
        finally:
            stop.set()
            await serving
        return streamed, whole

    streamed, whole = asyncio.run(ask())
    words = ["You", "asked:", "why?"]
    assert events.whole_answer(streamed) == Whole(output=words, done={"id": "q1"})
    assert [event.type for event in streamed] == ["part", "part", "part", "done"]
    assert whole == {"output": words}


async def test_a_draining_agent_finishes_the_stream_it_serves(
    session: aiohttp.ClientSession,
) -> None:
    """SIGTERM mid-stream: new items are refused as Draining, the stream runs to its ``done``,
    and only then does the agent exit, with 0."""
    read_first = asyncio.Event()

    async def handler(item: Any, input: Any, context: Context) -> AsyncIterator[str]:
        yield "a"
        await read_first.wait()
        yield "b"

    server = AgentServer(
        Agent(handler, name="draining"), Settings(host="127.0.0.1", port=0, token=TOKEN)
    )
    stop = asyncio.Event()
    serving = asyncio.create_task(server.serve_until(stop))
    await wait_for(lambda: server.ready, what="the agent to serve")
    endpoint = f"http://127.0.0.1:{server.port}/invoke"
    async with session.post(endpoint, json=envelope("d1"), headers=STREAMED) as answer:
        reader = EventReader(answer)
        assert await reader.next() == Event("part", '"a"')
        stop.set()
        await wait_for(lambda: server.draining, what="the agent to drain")
        async with session.post(endpoint, json=envelope("d2"), headers=STREAMED) as refused:
            assert (refused.status, refused.content_type) == (503, "application/json")
        assert not serving.done()
        read_first.set()
        assert await reader.rest() == [Event("part", '"b"'), Event("done", '{"id":"d1"}')]
    async with asyncio.timeout(30):
        assert await serving == 0
