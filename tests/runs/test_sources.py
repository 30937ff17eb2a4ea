"""Item sources: ConfigMap text, the HTTP source service, and how their failures end a run."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from runfakes import (
    Dispatching,
    FakeDispatcher,
    FakeInvoker,
    FakeSink,
    echo,
    run_config,
)

from agentpool.handlers.sources import HttpItemSource
from agentpool.io.sources import SourceClient
from agentpool.runs.engine import RunEngine
from agentpool.runs.sources import (
    DONE,
    NOT_READY,
    Batch,
    ItemSource,
    Pulled,
    SourceError,
    configmap_source,
    parse_items_text,
)
from clocks import LoopClock
from loopback import served

#: Calls, back-offs and status intervals pass on looptime's fake loop time.
pytestmark = pytest.mark.looptime


@pytest.mark.parametrize(
    ("text", "items"),
    [
        ('[{"id": 1}, {"id": 2}]', [{"id": 1}, {"id": 2}]),
        ('{"id": 1}\n{"id": 2}\n', [{"id": 1}, {"id": 2}]),
        ('\n{"id": 1}\n\n  \n"two"\n', [{"id": 1}, "two"]),
        ("[1, 2]\n[3]\n", [[1, 2], [3]]),
        ("", []),
    ],
)
def test_configmap_text_is_a_json_array_or_json_lines(text: str, items: list[Any]) -> None:
    """Both a JSON array and JSON Lines (blank lines skipped) give the items in order."""
    assert parse_items_text(text, name="cm", key="items") == items


def test_configmap_text_that_is_not_json_names_the_line() -> None:
    """Text that is neither names the ConfigMap, the key and the first bad line."""
    with pytest.raises(SourceError) as caught:
        parse_items_text('{"a": 1}\n{"b": 2}\nnot json\n', name="work", key="items.jsonl")
    message = str(caught.value)
    assert message.startswith("configmap work key items.jsonl is not a JSON array or JSON Lines:")
    assert "line 3:" in message


async def test_missing_configmap_and_key_fail_on_the_first_pull() -> None:
    """A missing ConfigMap or key gives a source whose first pull fails, saying which."""
    with pytest.raises(SourceError, match="configmap work not found"):
        await configmap_source("work", "items", None).next([])
    with pytest.raises(SourceError, match=r"configmap work has no key items \(keys: other\)"):
        await configmap_source("work", "items", {"other": "[]"}).next([])


async def run_with(source: ItemSource, **settings: Any) -> tuple[RunEngine, FakeSink]:
    clock = LoopClock()
    sink = FakeSink()
    engine = RunEngine(
        run_config("run", pool="workers", **settings),
        source=source,
        dispatcher=Dispatching(FakeDispatcher(clock, {"workers": 2}), FakeInvoker(clock, echo())),
        sink=sink,
        clock=clock,
    )
    await engine.run()
    return engine, sink


async def test_a_bad_configmap_fails_the_run_with_its_message() -> None:
    """A run whose ConfigMap is not JSON fails with the parse message in status and conditions."""
    _, sink = await run_with(configmap_source("work", "items", {"items": "[1,\n2,\n"}))
    assert sink.status["phase"] == "Failed"
    assert "configmap work key items is not a JSON array or JSON Lines" in sink.status["message"]
    failed = next(c for c in sink.status["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "SourceFailed")
    assert sink.reasons()[-1] == "SourceFailed"


@pytest.fixture
async def source_service() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """An HTTP source service on loopback that hands out 30 items, sometimes nothing ready."""
    state: dict[str, Any] = {"backlog": [{"id": f"s{n}", "n": n} for n in range(30)], "asks": []}

    async def next_item(request: web.Request) -> web.Response:
        body = await request.json()
        state["asks"].append(list(body["active"]))
        if len(state["asks"]) % 4 == 0:
            return web.json_response({"item": None})
        if not state["backlog"]:
            return web.json_response({"done": True})
        return web.json_response({"item": state["backlog"].pop(0)})

    app = web.Application()
    app.router.add_post("/next", next_item)
    async with served(app) as port:
        yield f"http://127.0.0.1:{port}/next", state


async def test_http_source_items_flow_through_a_run(
    source_service: tuple[str, dict[str, Any]],
) -> None:
    """Items from the HTTP source all run, with nothing-ready answers polled past."""
    url, state = source_service
    _, sink = await run_with(HttpItemSource(SourceClient(url)), item_id="id", cap=2)
    assert (sink.status["phase"], sink.status["result"]) == ("Succeeded", "Drained")
    assert sink.status["succeeded"] == 30
    assert sink.status["total"] == 30
    assert set(sink.status["items"]) == {f"s{n}" for n in range(30)}
    assert any(state["asks"]), "the source was told which ids are active"


async def test_http_source_answers() -> None:
    """The HTTP source maps the single-item answers, and refuses answers that are none of them."""
    answers = [{"item": {"a": 1}}, {"item": None}, {"done": True}, {"what": 1}]

    async def answer(request: web.Request) -> web.Response:
        return web.json_response(answers.pop(0))

    app = web.Application()
    app.router.add_post("/", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    source = HttpItemSource(SourceClient(f"http://127.0.0.1:{runner.addresses[0][1]}/"))
    try:
        assert await source.next([]) == Batch(({"a": 1},))
        assert await source.next(["x"]) is NOT_READY
        assert await source.next([]) is DONE
        with pytest.raises(SourceError, match='answered neither "item" nor "done"'):
            await source.next([])
    finally:
        await source.close()
        await runner.cleanup()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_an_unreachable_http_source_fails_the_run_after_retries() -> None:
    """A source URL nobody answers fails the run after its retries, naming the URL."""
    url = f"http://127.0.0.1:{closed_port()}/next"
    _, sink = await run_with(HttpItemSource(SourceClient(url, attempts=3, retry_delay=0.01)))
    assert sink.status["phase"] == "Failed"
    assert sink.status["message"].startswith(f"http source {url} unreachable after 3 attempts:")


async def test_source_failure_keeps_what_was_recorded() -> None:
    """A source that fails midway (as a source service can) fails the run, but every item
    already done stays recorded."""

    class Breaking:
        replayable = False
        total = None
        name = "a breaking source"

        def __init__(self) -> None:
            self.given = 0

        async def next(self, active: Any, room: int = 1) -> Pulled:
            if self.given == 5:
                raise SourceError("source went away")
            self.given += 1
            return Pulled({"id": f"b{self.given}"})

        async def close(self) -> None:
            return None

    _, sink = await run_with(Breaking(), item_id="id", cap=2)
    assert sink.status["phase"] == "Failed"
    assert sink.status["message"] == "source went away"
    assert set(sink.status["items"]) == {f"b{n}" for n in range(1, 6)}
