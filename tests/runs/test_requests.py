"""A run on an HTTP pool: how an item becomes a request, how the answer becomes its output or
its failure, and that the engine runs such a run as any other: retries, failures of their own,
a pool that serves the other protocol reported as the run's cause.

The request building and the answer reading are tables and properties of the pure functions in
:mod:`agentpool.runs.requests`; the runs go through the engine with a fake broker and fake HTTP
agents on looptime's fake loop time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from runfakes import Dispatching, FakeCheckout, FakeDispatcher, FakeSink, run_config

from agentpool.api import Routes, RunRequest
from agentpool.api.reasons import Reason
from agentpool.pool.checkin import CheckinOutcome
from agentpool.runs.calls import judge
from agentpool.runs.contracts import Clock, ItemRequest
from agentpool.runs.engine import RunEngine
from agentpool.runs.requests import (
    ANSWER_MAX,
    AnswerResult,
    build_request,
    is_json,
    mismatch,
    read_answer,
)
from agentpool.runs.sources import inline_source
from clocks import LoopClock

CHAT = ItemRequest("POST", "/v1/chat/completions", (), b"{}")


@pytest.mark.parametrize(
    ("request_spec", "item", "expected"),
    [
        (
            {"path": "/v1/chat/completions"},
            {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            ItemRequest(
                "POST",
                "/v1/chat/completions",
                (("Content-Type", "application/json"),),
                b'{"model":"m","messages":[{"role":"user","content":"hi"}]}',
            ),
        ),
        (
            {"method": "PUT", "path": "/items?x=1", "headers": {"X-Api-Version": "2"}},
            [1, "two", None],
            ItemRequest(
                "PUT",
                "/items?x=1",
                (("Content-Type", "application/json"), ("X-Api-Version", "2")),
                b'[1,"two",null]',
            ),
        ),
        (
            {"path": "/", "headers": {"content-type": "application/vnd.x+json"}},
            "text",
            ItemRequest("POST", "/", (("content-type", "application/vnd.x+json"),), b'"text"'),
        ),
        (
            {"path": "/n"},
            7,
            ItemRequest("POST", "/n", (("Content-Type", "application/json"),), b"7"),
        ),
    ],
)
def test_an_item_is_the_json_body_of_the_runs_request(
    request_spec: dict[str, Any], item: Any, expected: ItemRequest
) -> None:
    """The item goes as compact JSON to the run's method and path, with its headers; the body is
    said to be JSON unless the run's headers say what it is."""
    assert build_request(RunRequest.model_validate(request_spec), item) == expected


@pytest.mark.parametrize(
    ("content_type", "json_body"),
    [
        ("application/json", True),
        ("application/json; charset=utf-8", True),
        ("Application/JSON", True),
        ("application/problem+json", True),
        ("application/vnd.api+json;v=1", True),
        ("text/plain", False),
        ("text/html; charset=utf-8", False),
        ("", False),
        ("json", False),
        ("application/jsonl", False),
    ],
)
def test_json_is_told_by_the_media_type(content_type: str, json_body: bool) -> None:
    """application/json and any +json type are JSON, whatever their parameters and case."""
    assert is_json(content_type) is json_body


@pytest.mark.parametrize(
    ("status", "content_type", "body", "ok", "output"),
    [
        (200, "application/json", b'{"choices":[{"message":{"content":"hi"}}]}', True, None),
        (200, "application/json", b"[1, 2]", True, [1, 2]),
        (201, "application/problem+json", b'{"a":1}', True, {"a": 1}),
        (200, "text/plain", b"plain words", True, "plain words"),
        (200, "", b'{"a":1}', True, '{"a":1}'),
        (200, "application/json", b"{broken", True, "{broken"),
        (200, "application/json", b"NaN", True, "NaN"),
        (204, "application/json", b"", True, ""),
        (200, "text/plain", b"caf\xe9", True, "caf\ufffd"),
    ],
)
def test_a_2xx_answer_is_the_output(
    status: int, content_type: str, body: bytes, ok: bool, output: Any
) -> None:
    """A 2xx answer's body is the output: its JSON when it says it is JSON and parses, else its
    text, undecodable bytes replaced."""
    result = read_answer(CHAT, status, content_type, body)
    assert result.ok is ok
    assert result.output == (json.loads(body) if output is None else output)


@pytest.mark.parametrize(
    ("status", "agent_failed"), [(400, False), (404, False), (302, False), (500, True), (503, True)]
)
def test_any_other_status_fails_the_item_with_the_status_and_the_body(
    status: int, agent_failed: bool
) -> None:
    """A non-2xx answer fails the item with HTTPStatus, its message naming the request, the
    status and the first 200 characters of the body; only a 5xx counts against the agent."""
    body = b'{"error": "' + b"x" * 300 + b'"}'
    result = read_answer(CHAT, status, "application/json", body)
    assert (result.ok, result.reason, result.agent_failed) == (False, "HTTPStatus", agent_failed)
    assert result.message.startswith(f"POST /v1/chat/completions answered HTTP {status}: ")
    assert repr(body[:200].decode()) in result.message
    assert "x" * 200 not in result.message


def test_an_answer_past_the_limit_is_too_large() -> None:
    """A body cut at the read limit is not an output: the item fails OutputTooLarge."""
    result = read_answer(CHAT, 200, "text/plain", b"x" * 10, whole=False)
    assert (result.ok, result.reason) == (False, "OutputTooLarge")
    assert str(ANSWER_MAX) in result.message


@pytest.mark.parametrize(
    ("result", "checkin"),
    [
        (AnswerResult(ok=True, output=1), CheckinOutcome.SUCCESS),
        (AnswerResult(ok=False, reason="HTTPStatus", agent_failed=False), CheckinOutcome.SUCCESS),
        (AnswerResult(ok=False, reason="HTTPStatus", agent_failed=True), CheckinOutcome.FAILURE),
        (AnswerResult(ok=False, reason="AgentLost", lost=True), CheckinOutcome.LOST),
    ],
)
def test_the_agent_goes_back_failed_only_for_its_own_failure(
    result: AnswerResult, checkin: CheckinOutcome
) -> None:
    """A 4xx is the item's fault and leaves the agent's failure streak alone; a 5xx counts."""
    assert judge(result).checkin is checkin


statuses = st.integers(min_value=100, max_value=599)
content_types = st.one_of(
    st.sampled_from(["application/json", "application/x+json; charset=latin-1", "text/plain", ""]),
    st.text(max_size=40),
)
bodies = st.one_of(
    st.binary(max_size=600),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=20,
    ).map(lambda value: json.dumps(value).encode()),
    st.integers(min_value=1, max_value=5000).map(lambda depth: b"[" * depth),
    st.integers(min_value=1, max_value=3000).map(lambda depth: b"[" * depth + b"]" * depth),
)


@given(status=statuses, content_type=content_types, body=bodies, whole=st.booleans())
def test_no_answer_crashes_and_a_non_2xx_always_fails_the_item(
    status: int, content_type: str, body: bytes, whole: bool
) -> None:
    """Whatever the agent answers, the reading gives a result and never raises; a 2xx gives an
    output that encodes as JSON (or OutputTooLarge when cut), anything else fails with HTTPStatus
    and a message of bounded size that names the status."""
    result = read_answer(CHAT, status, content_type, body, whole=whole)
    verdict = judge(result)
    if 200 <= status < 300:
        assert result.ok is whole
        assert verdict.ok is whole or verdict.reason == Reason.OUTPUT_TOO_LARGE
        if verdict.ok:
            json.loads(verdict.encoded)
    else:
        assert (result.ok, result.reason, verdict.ok) == (False, "HTTPStatus", False)
        assert f"HTTP {status}" in result.message
        assert len(result.message) < 1200
        assert verdict.checkin is not CheckinOutcome.LOST


@pytest.mark.parametrize(
    ("served", "speaks", "words"),
    [
        ("HTTP", "HTTP", None),
        ("Agentpool", "Agentpool", None),
        ("HTTP", "Agentpool", ["spec.protocol: HTTP", "set spec.request", "mode Call"]),
        ("Agentpool", "HTTP", ["spec.protocol: Agentpool", "remove spec.request"]),
    ],
)
def test_a_pool_of_the_other_protocol_is_named_with_the_fix(
    served: str, speaks: str, words: list[str] | None
) -> None:
    """The message names the pool, its protocol, spec.request and what to change."""
    message = mismatch("chat", served, speaks=speaks)
    if words is None:
        assert message is None
        return
    assert message is not None
    assert 'AgentPool "chat"' in message
    for word in words:
        assert word in message


Answering = Callable[[Any], tuple[int, str, bytes]]


@dataclass
class FakeHttpAgents:
    """HTTP agents that answer each request as ``answer`` says of its item, after ``duration``."""

    clock: Clock
    answer: Answering
    duration: float = 0.1
    requests: list[tuple[ItemRequest, int, str]] = field(default_factory=list)

    async def send(
        self, checkout: FakeCheckout, request: ItemRequest, *, timeout: float, attempt: int
    ) -> AnswerResult:
        self.requests.append((request, attempt, checkout.agent))
        await self.clock.sleep(self.duration)
        status, content_type, body = self.answer(json.loads(request.body))
        return read_answer(request, status, content_type, body)


def chat_answer(item: Any) -> tuple[int, str, bytes]:
    """A chat server: items asking for an error get a 500 with a body saying so."""
    if item.get("fail"):
        return 500, "application/json", b'{"error":"model overloaded"}'
    completion = {"choices": [{"message": {"content": f"echo {item['n']}"}}]}
    return 200, "application/json", json.dumps(completion).encode()


def build_http(
    items: list[Any], answer: Answering, *, protocol: str = "HTTP", **settings: Any
) -> tuple[RunEngine, FakeHttpAgents, FakeSink, FakeDispatcher]:
    clock = LoopClock()
    settings.setdefault("request", RunRequest(path="/v1/chat/completions"))
    config = run_config("run", pool="chat", **settings)
    dispatcher = FakeDispatcher(clock, {"chat": 4})
    dispatcher.protocols["chat"] = protocol
    agents = FakeHttpAgents(clock, answer)
    sink = FakeSink()
    engine = RunEngine(
        config,
        source=inline_source(items),
        dispatcher=Dispatching(dispatcher, agents),
        sink=sink,
        clock=clock,
    )
    return engine, agents, sink, dispatcher


@pytest.mark.looptime
async def test_a_run_over_an_http_pool_records_each_answer_as_the_output() -> None:
    """Every item goes as its own request, and each answer's JSON is that item's output."""
    items = [{"n": n} for n in range(20)]
    engine, agents, sink, _ = build_http(items, chat_answer, cap=4)
    end = await engine.run()
    assert (end.phase, end.result) == ("Succeeded", "Drained")
    status = sink.status
    assert status["succeeded"] == 20
    assert status["items"]["7"] == {"choices": [{"message": {"content": "echo 7"}}]}
    sent = {json.loads(request.body)["n"] for request, _, _ in agents.requests}
    assert sent == set(range(20))
    assert {request.path for request, _, _ in agents.requests} == {"/v1/chat/completions"}


@pytest.mark.looptime
async def test_a_non_2xx_fails_its_item_alone_after_its_attempts() -> None:
    """Items answered 500 fail with HTTPStatus, the status and the body in their message, each
    after maxAttempts tries; the others' outputs are recorded and the agents stay in the pool."""
    items = [{"n": n, "fail": n % 5 == 0} for n in range(20)]
    engine, agents, sink, dispatcher = build_http(
        items, chat_answer, cap=4, max_attempts=2, failures="Report", backoff_seconds=1
    )
    end = await engine.run()
    assert (end.phase, end.result) == ("Succeeded", "Drained")
    status = sink.status
    assert (status["succeeded"], status["failed"]) == (16, 4)
    failure = status["failures"]["5"]
    assert failure["reason"] == "HTTPStatus"
    assert failure["attempts"] == 2
    assert "HTTP 500" in failure["message"]
    assert "model overloaded" in failure["message"]
    assert sum(1 for request, _, _ in agents.requests if b'"n":5,' in request.body) == 2
    assert all(outcome != CheckinOutcome.LOST for _, outcome in dispatcher.checkins)


@pytest.mark.looptime
@pytest.mark.parametrize(
    ("protocol", "request_spec", "words"),
    [
        ("HTTP", None, "the run has no spec.request"),
        ("Agentpool", RunRequest(path="/"), "the run sets spec.request"),
    ],
)
async def test_a_pool_of_the_other_protocol_deadlocks_the_run_saying_why(
    protocol: str, request_spec: RunRequest | None, words: str
) -> None:
    """No item reaches an agent of a pool that serves the other protocol: its items are parked
    as for a missing pool, and the run ends Deadlocked with the cause and its fix in its Failed
    condition's message."""
    engine, agents, sink, _ = build_http(
        [{"n": 1}, {"n": 2}], chat_answer, protocol=protocol, request=request_spec
    )
    end = await engine.run()
    assert (end.phase, end.result) == ("Failed", "Deadlocked")
    assert end.message.startswith("2 of 2 items could not start: ")
    assert words in end.message
    assert 'AgentPool "chat"' in end.message
    assert agents.requests == []
    failed = [c for c in sink.status["conditions"] if c["type"] == "Failed"]
    assert failed[0]["message"] == end.message


@pytest.mark.looptime
async def test_a_routed_run_parks_only_the_route_to_a_pool_of_the_other_protocol() -> None:
    """With routes, each pool is held to the run's protocol on its own: the items routed to a
    pool of the agent protocol wait, and the run's Waiting condition says ProtocolMismatch while
    the HTTP pool's items run; once they are done the run ends Deadlocked naming that pool."""
    clock = LoopClock()
    config = run_config(
        "run",
        routes=Routes(field="to", pools={"http": "chat", "native": "workers"}),
        request=RunRequest(path="/v1/chat/completions"),
        cap=2,
    )
    dispatcher = FakeDispatcher(clock, {"chat": 1, "workers": 1})
    dispatcher.protocols["chat"] = "HTTP"
    agents = FakeHttpAgents(clock, chat_answer, duration=5.0)
    sink = FakeSink()
    items = [{"n": n, "to": "native" if n == 0 else "http"} for n in range(5)]
    engine = RunEngine(
        config,
        source=inline_source(items),
        dispatcher=Dispatching(dispatcher, agents),
        sink=sink,
        clock=clock,
    )
    end = await engine.run()
    assert (end.phase, end.result) == ("Failed", "Deadlocked")
    assert end.message.startswith('1 of 5 items could not start: AgentPool "workers" serves')
    assert sink.status["succeeded"] == 4
    assert {json.loads(request.body)["n"] for request, _, _ in agents.requests} == {1, 2, 3, 4}
    waiting = [
        condition
        for patch in sink.patches
        for condition in patch.get("conditions", [])
        if condition["type"] == "Waiting" and condition["status"] == "True"
    ]
    assert waiting
    assert waiting[0]["reason"] == "ProtocolMismatch"
    assert 'AgentPool "workers"' in waiting[0]["message"]
