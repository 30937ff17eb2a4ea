"""Leases on the wire: /bind and /unbind on real agent processes, and who may call what when.

The lease tokens here are the ones an AgentLease's holder is given; the pool token is the
operator's. Expiry is read on the agent's own clock: a lease bound with an expiry in the past
has expired, and the one test that needs time to pass serves the agent in this process with a
clock the test moves.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from agent_processes import FIXTURES, AgentProcess, Spawn, wait_for, wait_until
from hypothesis import given, settings
from hypothesis import strategies as st

from agentpool.agent import Agent, Context
from agentpool.agent.server import AgentServer
from agentpool.agent.settings import Settings
from agentpool.io.agents import AgentClient

LEASED = f"{FIXTURES}:leased"
LATER = "2999-01-01T00:00:00Z"
PAST = "2000-01-01T00:00:00Z"
LEASE_TOKEN = "lease-token-3b9f"
T0 = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def envelope(item_id: str, item: object = None) -> dict[str, object]:
    return {"id": item_id, "item": item, "input": None, "attempt": 1, "run": None}


def bind_body(
    lease: str = "chat-1", *, token: str = LEASE_TOKEN, expire: str = LATER, context: Any = None
) -> dict[str, Any]:
    return {"lease": lease, "token": token, "expireTime": expire, "context": context}


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class Clock:
    """The agent's clock, set by the test rather than by the passing of time."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Caller:
    """Plain HTTP to one agent, as a lease's holder or the operator would send it."""

    session: aiohttp.ClientSession
    endpoint: str

    async def __call__(
        self, method: str, path: str, token: str, body: Any = None
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"}
        async with self.session.request(
            method, self.endpoint + path, headers=headers, json=body
        ) as response:
            return response.status, await response.json()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def leased_agent(spawn: Spawn, client: AgentClient) -> AgentProcess:
    agent = await spawn(LEASED)
    await wait_until(lambda: client.ready(agent.endpoint), what="the leased agent to be ready")
    return agent


async def lease_of(call: Caller, token: str) -> str | None:
    status, body = await call("GET", "/status", token)
    assert status == 200, body
    lease: str | None = body["lease"]
    return lease


async def unbound(call: Caller, token: str) -> bool:
    return await lease_of(call, token) is None


# Who may call what. Each scenario leaves the agent in one state and names the token presented;
# the paths run in this order, so the pool's /unbind comes last.
PATHS = ["/status", "/invoke", "/reset", "/bind", "/unbind"]
WHO_MAY_CALL = {
    "pool token, bound": ("bound", "pool", [200, 200, 200, 200, 200]),
    "pool token, unbound": ("unbound", "pool", [200, 200, 200, 200, 200]),
    "lease token before expiry": ("bound", "lease", [200, 200, 401, 401, 401]),
    "lease token after expiry": ("expired", "lease", [401, 401, 401, 401, 401]),
    "lease token after unbind": ("unbound", "lease", [401, 401, 401, 401, 401]),
    "token of a lease bound to another agent": ("bound", "other", [401, 401, 401, 401, 401]),
    "no token anyone gave": ("bound", "wrong", [401, 401, 401, 401, 401]),
}


@pytest.mark.parametrize("scenario", WHO_MAY_CALL)
async def test_who_may_call_what(
    scenario: str, spawn: Spawn, client: AgentClient, session: aiohttp.ClientSession
) -> None:
    """A lease token opens /invoke and /status of its agent while bound and unexpired, and
    nothing else; the pool token opens everything, bound or not."""
    state, who, expected = WHO_MAY_CALL[scenario]
    agent = await leased_agent(spawn, client)
    call = Caller(session, agent.endpoint)
    expire = PAST if state == "expired" else LATER
    assert (await call("POST", "/bind", agent.token, bind_body(expire=expire)))[0] == 200
    if state == "unbound":
        assert (await call("POST", "/unbind", agent.token, {"lease": "chat-1"}))[0] == 200
    token = {
        "pool": agent.token,
        "lease": LEASE_TOKEN,
        "other": "lease-token-of-chat-2",
        "wrong": "not-a-token",
    }[who]
    if who == "other":
        elsewhere = await leased_agent(spawn, client)
        call_elsewhere = Caller(session, elsewhere.endpoint)
        body = bind_body("chat-2", token=token)
        assert (await call_elsewhere("POST", "/bind", elsewhere.token, body))[0] == 200
        assert await lease_of(call_elsewhere, token) == "chat-2"  # it opens its own agent
    bodies = {
        "/invoke": envelope("a"),
        "/bind": bind_body(expire=expire),  # the same lease again: a renewal, if still bound
        "/unbind": {"lease": "chat-1"},
    }
    answered = []
    for path in PATHS:
        method = "GET" if path == "/status" else "POST"
        status, body = await call(method, path, token, bodies.get(path))
        answered.append(status)
        if status == 401:
            assert body["error"]["reason"] == "Unauthorized", path
    assert answered == expected
    assert await client.status(agent.endpoint, agent.token) is not None  # the pool's still works


async def test_the_handler_is_handed_the_lease_while_bound(
    spawn: Spawn, client: AgentClient, session: aiohttp.ClientSession
) -> None:
    """The handler sees the lease and its context while bound and None after unbind; the hooks
    run once each, then the reset; the next lease's holder sees only its own context; no token
    reaches the log."""
    agent = await leased_agent(spawn, client)
    call = Caller(session, agent.endpoint)
    context = {"user": "ada", "history": [{"role": "user", "text": "hi"}], "n": None}
    status, body = await call("POST", "/bind", agent.token, bind_body(context=context))
    assert (status, body) == (200, {"lease": "chat-1", "expireTime": LATER})
    assert await lease_of(call, LEASE_TOKEN) == "chat-1"
    status, body = await call("POST", "/invoke", LEASE_TOKEN, envelope("a"))
    assert status == 200, body
    assert body["output"] == {
        "lease": "chat-1",
        "context": context,
        "expireTime": LATER,
        "bound": ["chat-1"],
        "unbound": [],
        "resets": 0,
    }

    assert await call("POST", "/unbind", agent.token, {"lease": "chat-1"}) == (200, {})
    assert await lease_of(call, agent.token) is None
    status, body = await call("POST", "/invoke", agent.token, envelope("b"))
    assert body["output"] == {
        "lease": None,
        "context": None,
        "expireTime": None,
        "bound": ["chat-1"],
        "unbound": ["chat-1"],
        "resets": 1,
    }

    second = bind_body("chat-2", token="lease-token-two")
    assert (await call("POST", "/bind", agent.token, second))[0] == 200
    status, body = await call("POST", "/invoke", "lease-token-two", envelope("c"))
    assert (body["output"]["lease"], body["output"]["context"]) == ("chat-2", None)
    assert agent.token not in agent.logs()
    assert LEASE_TOKEN not in agent.logs()
    assert "lease-token-two" not in agent.logs()


async def test_another_lease_finds_the_agent_bound(
    spawn: Spawn, client: AgentClient, session: aiohttp.ClientSession
) -> None:
    """While bound to one lease the agent refuses another (409 AlreadyBound), and an unbind that
    names another lease changes nothing."""
    agent = await leased_agent(spawn, client)
    call = Caller(session, agent.endpoint)
    assert (await call("POST", "/bind", agent.token, bind_body()))[0] == 200
    other = bind_body("chat-2", token="lease-token-two")
    status, body = await call("POST", "/bind", agent.token, other)
    assert (status, body["error"]["reason"]) == (409, "AlreadyBound")
    assert "chat-1" in body["error"]["message"]
    assert await call("POST", "/unbind", agent.token, {"lease": "chat-2"}) == (200, {})
    assert await lease_of(call, LEASE_TOKEN) == "chat-1"
    assert (await call("GET", "/status", "lease-token-two"))[0] == 401


async def test_a_renewal_keeps_the_first_token_and_context(
    spawn: Spawn, client: AgentClient, session: aiohttp.ClientSession
) -> None:
    """Binding the same lease again moves its expiry only: the first token and context stay,
    and the bind hook does not run again. A lease that had expired opens again once renewed."""
    agent = await leased_agent(spawn, client)
    call = Caller(session, agent.endpoint)
    first = bind_body(expire=PAST, context={"turn": 1})
    assert (await call("POST", "/bind", agent.token, first))[0] == 200
    assert (await call("GET", "/status", LEASE_TOKEN))[0] == 401
    renewal = bind_body(token="a-token-of-its-own", context={"turn": 2})
    status, body = await call("POST", "/bind", agent.token, renewal)
    assert (status, body) == (200, {"lease": "chat-1", "expireTime": LATER})
    status, body = await call("POST", "/invoke", LEASE_TOKEN, envelope("a"))
    assert status == 200, body
    output = body["output"]
    assert (output["context"], output["expireTime"], output["bound"]) == (
        {"turn": 1},
        LATER,
        ["chat-1"],
    )
    assert (await call("GET", "/status", "a-token-of-its-own"))[0] == 401


async def test_a_failing_bind_hook_leaves_the_agent_unbound(
    spawn: Spawn, client: AgentClient, session: aiohttp.ClientSession
) -> None:
    """A bind hook that raises answers 500 BindFailed with the exception; the lease token opens
    nothing and another lease may bind."""
    agent = await leased_agent(spawn, client)
    call = Caller(session, agent.endpoint)
    broken = bind_body(context={"failBind": True})
    status, body = await call("POST", "/bind", agent.token, broken)
    assert (status, body["error"]) == (
        500,
        {"reason": "BindFailed", "message": "RuntimeError: the bind broke on purpose"},
    )
    assert await lease_of(call, agent.token) is None
    assert (await call("POST", "/invoke", LEASE_TOKEN, envelope("a")))[0] == 401
    assert (await call("POST", "/bind", agent.token, bind_body("chat-2")))[0] == 200
    assert await lease_of(call, LEASE_TOKEN) == "chat-2"
    await wait_for(lambda: "the bind broke on purpose" in agent.stderr.read_text(), what="trace")


@pytest.mark.parametrize(
    ("asks", "message"),
    [
        ({"failUnbind": True}, "RuntimeError: the unbind broke on purpose"),
        ({"failReset": True}, "RuntimeError: the reset broke on purpose"),
    ],
)
async def test_a_failing_unbind_or_reset_is_unbind_failed(
    asks: dict[str, bool],
    message: str,
    spawn: Spawn,
    client: AgentClient,
    session: aiohttp.ClientSession,
) -> None:
    """An unbind hook or reset that raises answers 500 UnbindFailed; the token and context were
    forgotten before either ran, so the lease token opens nothing even so."""
    agent = await leased_agent(spawn, client)
    call = Caller(session, agent.endpoint)
    assert (await call("POST", "/bind", agent.token, bind_body(context=asks)))[0] == 200
    status, body = await call("POST", "/unbind", agent.token, {"lease": "chat-1"})
    assert (status, body["error"]) == (500, {"reason": "UnbindFailed", "message": message})
    assert (await call("GET", "/status", LEASE_TOKEN))[0] == 401
    assert await lease_of(call, agent.token) is None


async def test_unbind_lets_the_holders_item_finish_first(
    spawn: Spawn, client: AgentClient, session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """An unbind while the holder's item runs refuses the lease token at once, but runs the
    unbind hook and the reset only after the item has finished, with its context intact."""
    agent = await leased_agent(spawn, client)
    call = Caller(session, agent.endpoint)
    assert (await call("POST", "/bind", agent.token, bind_body(context={"k": 1})))[0] == 200
    gate = tmp_path / "item-gate"
    item = asyncio.create_task(
        call("POST", "/invoke", LEASE_TOKEN, envelope("a", {"gate": str(gate)}))
    )

    async def busy() -> bool:
        status = await client.status(agent.endpoint, agent.token)
        return status is not None and status.current == "a"

    await wait_until(busy, what="the holder's item to run")
    unbind = asyncio.create_task(call("POST", "/unbind", agent.token, {"lease": "chat-1"}))
    await wait_until(lambda: unbound(call, agent.token), what="the lease to be forgotten")
    assert (await call("GET", "/status", LEASE_TOKEN))[0] == 401
    assert not unbind.done()
    gate.touch()
    status, body = await item
    assert status == 200
    assert (body["output"]["context"], body["output"]["unbound"]) == ({"k": 1}, [])
    assert await unbind == (200, {})
    status, body = await call("POST", "/invoke", agent.token, envelope("b"))
    assert (body["output"]["unbound"], body["output"]["resets"]) == (["chat-1"], 1)


def _lease_of_item(item: Any, input: Any, context: Context) -> str | None:
    return context.binding.lease if context.binding is not None else None


async def test_a_renewal_extends_the_lease_on_the_agents_clock(
    session: aiohttp.ClientSession,
) -> None:
    """Bound until T0+60s and renewed at T0+50s until T0+120s, the lease token still opens the
    agent at T0+90s and T0+119s, and no longer at T0+120s; the pool token works throughout."""
    clock = Clock(T0)
    configured = Settings(host="127.0.0.1", port=0, token="pool-token-in-process")
    server = AgentServer(Agent(_lease_of_item, name="in-process"), configured, clock=clock)
    stop = asyncio.Event()
    serving = asyncio.create_task(server.serve_until(stop))
    try:
        await wait_for(lambda: server.ready or serving.done(), what="the agent to serve")
        call = Caller(session, f"http://127.0.0.1:{server.port}")
        pool = configured.token
        first = bind_body(expire=rfc3339(T0 + timedelta(seconds=60)))
        assert (await call("POST", "/bind", pool, first))[0] == 200
        clock.now = T0 + timedelta(seconds=50)
        assert await call("POST", "/invoke", LEASE_TOKEN, envelope("a")) == (
            200,
            {"output": "chat-1"},
        )
        renewal = bind_body(expire=rfc3339(T0 + timedelta(seconds=120)))
        assert (await call("POST", "/bind", pool, renewal))[0] == 200
        answered = {}
        for after in (90, 119, 120, 121):
            clock.now = T0 + timedelta(seconds=after)
            answered[after] = (await call("POST", "/invoke", LEASE_TOKEN, envelope("b")))[0]
        assert answered == {90: 200, 119: 200, 120: 401, 121: 401}
        assert await lease_of(call, pool) == "chat-1"  # bound until the operator unbinds
    finally:
        stop.set()
        assert await serving == 0


# Bodies /bind must refuse: not JSON, not an object, or a good body with one field missing or
# wrong. A good body is VALID_BIND; every strategy breaks it in a way RFC 3339 or the protocol
# rules out whatever else is drawn.
VALID_BIND = bind_body()


def families(*strategies: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """One of ``strategies``, each as likely as the others however many branches it has."""
    return st.sampled_from(strategies).flatmap(lambda strategy: strategy)


WRONG_TYPE = families(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
NOT_A_NAME = families(WRONG_TYPE, st.just(""))
NOT_A_TOKEN = families(
    WRONG_TYPE,
    st.just(""),
    st.text(min_size=1).filter(lambda text: any(not "!" <= char <= "~" for char in text)),
)
NOT_A_TIME = families(
    WRONG_TYPE,
    st.text().filter(lambda text: ":" not in text),
    st.dates().map(str),
    st.datetimes().map(datetime.isoformat),  # no offset
    st.integers(13, 99).map(lambda month: f"2030-{month:02d}-01T00:00:00Z"),
    st.integers(24, 99).map(lambda hour: f"2030-01-01T{hour:02d}:00:00Z"),
    st.datetimes(timezones=st.just(UTC)).map(lambda d: d.strftime("%Y-%m-%d %H:%M:%SZ")),
)
BROKEN_BY_FIELD = {"lease": NOT_A_NAME, "token": NOT_A_TOKEN, "expireTime": NOT_A_TIME}


@st.composite
def one_field_broken(draw: st.DrawFn) -> bytes:
    body = dict(VALID_BIND)
    field = draw(st.sampled_from(sorted(BROKEN_BY_FIELD)))
    if draw(st.booleans()):
        del body[field]
    else:
        body[field] = draw(BROKEN_BY_FIELD[field])
    return json.dumps(body).encode()


MALFORMED_BINDS = families(
    st.binary(),
    families(st.none(), st.integers(), st.text(), st.lists(st.integers())).map(
        lambda value: json.dumps(value).encode()
    ),
    one_field_broken(),
    one_field_broken(),
    one_field_broken(),
    st.sampled_from([float("nan"), float("inf"), float("-inf")]).map(
        lambda value: json.dumps({**VALID_BIND, "context": {"x": value}}).encode()
    ),
)


def request_sync(method: str, url: str, token: str, body: bytes | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    sent = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(sent, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


async def test_malformed_bind_bodies_are_bad_requests(spawn: Spawn, client: AgentClient) -> None:
    """Whatever malformed body /bind is sent, it answers 400 BadRequest, never a 500, and the
    agent stays unbound."""
    agent = await leased_agent(spawn, client)

    @settings(max_examples=200, deadline=None)
    @given(MALFORMED_BINDS)
    def refused(body: bytes) -> None:
        status, answer = request_sync("POST", agent.endpoint + "/bind", agent.token, body)
        assert (status, answer["error"]["reason"]) == (400, "BadRequest"), answer
        status, answer = request_sync("GET", agent.endpoint + "/status", agent.token)
        assert (status, answer["lease"]) == (200, None)

    await asyncio.to_thread(refused)
    status, _ = request_sync(
        "POST", agent.endpoint + "/bind", agent.token, json.dumps(VALID_BIND).encode()
    )
    assert status == 200  # and a good body still binds
