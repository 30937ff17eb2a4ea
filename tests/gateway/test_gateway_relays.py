"""A request that reaches a replica that does not work on its pool is passed on to the one that
does: only once the caller is admitted here, without the caller's credentials, marked so that
it is never passed on again, and with the other replica's answer streamed back as it came."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, Sequence
from typing import Any, cast

from agentpool.api.gateway import GatewayRequest, GatewayVerb
from agentpool.gateway import forwarding
from agentpool.gateway.access import Access
from agentpool.gateway.contracts import CallAnswer, Caller, Relaying
from agentpool.gateway.errors import unavailable
from agentpool.gateway.http import Request, Stream
from agentpool.gateway.requests import EncodedItem
from agentpool.gateway.server import GatewayServer
from agentpool.settings import GatewaySettings

PATH = "/v1/namespaces/ns/agentpools/p/call"


class Reviewer:
    """Knows one good token, and lets its holder call."""

    async def authenticate(self, token: str) -> Caller | None:
        return Caller(username="alice") if token == "good" else None

    async def authorize(self, caller: Caller, **_: Any) -> bool:
        return True


class Calls:
    def __init__(self) -> None:
        self.served: list[str] = []

    async def serve(
        self,
        namespace: str,
        pool: str,
        request: GatewayRequest,
        item: EncodedItem,
        *,
        verb: GatewayVerb,
        answer: object = None,
    ) -> CallAnswer:
        self.served.append(pool)
        return CallAnswer(agent="here-0", output="served here")


class Peers:
    """Another replica works on pool ``p``; its answer is an agent's output, in two parts."""

    def __init__(self) -> None:
        self.relayed: list[tuple[str, str, str, tuple[tuple[str, str], ...], Any]] = []

    def elsewhere(self, namespace: str, pool: str, *, lease: str | None = None) -> str | None:
        return "https://10.0.0.2:8443" if pool == "p" else None

    async def relay(
        self,
        gateway: str,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes | AsyncIterable[bytes] | None,
        answer: Relaying,
    ) -> None:
        self.relayed.append((gateway, method, target, tuple(headers), body))
        answer.start(200, [("Content-Type", "application/json"), ("Agentpool-Agent", "there-0")])
        await answer.write(b'{"output":')
        await answer.write(b'"served there"}')
        answer.end()


class Answer:
    """What the caller's connection gets."""

    def __init__(self) -> None:
        self.started = False
        self.head: tuple[int, list[tuple[str, str]]] | None = None
        self.body = b""
        self.ended = False

    def start(self, status: int, headers: list[tuple[str, str]]) -> None:
        self.started, self.head = True, (status, headers)

    async def write(self, data: bytes) -> None:
        self.body += data

    def end(self) -> None:
        self.ended = True


def _server(calls: Calls, peers: Peers) -> GatewayServer:
    access = Access(Reviewer(), ttl=10, entries=10, retry_after=1)
    return GatewayServer(
        calls=calls, access=access, settings=GatewaySettings(), tls=None, peers=peers
    )


def _request(headers: dict[bytes, bytes], answer: Answer, pool: str = "p") -> Request:
    body = json.dumps({"item": "x"}).encode()
    path = PATH.replace("/p/", f"/{pool}/")
    return Request("POST", path, headers, body, answer=cast(Stream, answer))


async def test_a_call_to_another_replica_s_pool_is_passed_on_as_this_replica() -> None:
    calls, peers, answer = Calls(), Peers(), Answer()
    headers = {
        b"authorization": b"Bearer good",
        b"content-type": b"application/json",
        b"traceparent": b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        b"content-length": b"12",
    }
    assert await _server(calls, peers)._respond(_request(headers, answer)) is None
    (gateway, method, target, sent, body) = peers.relayed[0]
    assert (gateway, method, target) == ("https://10.0.0.2:8443", "POST", PATH)
    assert json.loads(body) == {"item": "x"}
    names = {name.lower() for name, _ in sent}
    assert "authorization" not in names
    assert {"content-type", "traceparent"} <= names
    assert calls.served == []
    assert answer.head is not None
    assert answer.head[0] == 200
    assert json.loads(answer.body) == {"output": "served there"}
    assert answer.ended


async def test_a_caller_refused_here_is_never_passed_on() -> None:
    calls, peers, answer = Calls(), Peers(), Answer()
    refused = await _server(calls, peers)._respond(
        _request({b"authorization": b"Bearer stolen"}, answer)
    )
    assert refused is not None
    assert refused.status == 401
    assert peers.relayed == []


async def test_a_request_passed_on_once_is_served_where_it_arrives() -> None:
    """Even when this replica takes the pool for another's (the pool moved meanwhile): a request
    never goes round between replicas."""
    calls, peers, answer = Calls(), Peers(), Answer()
    marked = {b"authorization": b"Bearer good", b"agentpool-relayed-by": b"r-b"}
    reply = await _server(calls, peers)._respond(_request(marked, answer))
    assert reply is not None
    assert (reply.status, json.loads(reply.body)["output"]) == (200, "served here")
    assert peers.relayed == []


async def test_a_pool_this_replica_works_on_is_served_here() -> None:
    calls, peers, answer = Calls(), Peers(), Answer()
    reply = await _server(calls, peers)._respond(
        _request({b"authorization": b"Bearer good"}, answer, pool="mine")
    )
    assert reply is not None
    assert reply.status == 200
    assert calls.served == ["mine"]


def test_the_other_replica_gets_the_gateway_s_own_headers_but_not_the_connection_s() -> None:
    headers = [
        (b"Authorization", b"Bearer good"),
        (b"Connection", b"keep-alive, X-Hop"),
        (b"X-Hop", b"1"),
        (b"Transfer-Encoding", b"chunked"),
        (b"Host", b"gateway"),
        (b"Agentpool-Priority", b"5"),
        (b"Agentpool-Session", b"s-1"),
        (b"Accept", b"text/event-stream"),
    ]
    assert forwarding.relayed(headers) == (
        ("Agentpool-Priority", "5"),
        ("Agentpool-Session", "s-1"),
        ("Accept", "text/event-stream"),
    )
    back = [(b"Agentpool-Agent", b"there-0"), (b"Connection", b"close"), (b"Content-Length", b"3")]
    assert forwarding.relayed_back(back) == [
        ("Agentpool-Agent", "there-0"),
        ("Content-Length", "3"),
    ]


class Moving(Peers):
    """The pool's replica stops as the call reaches it: it does not serve the pool there, and
    the pool is then at ``next_gateway`` (None: this replica's)."""

    def __init__(self, next_gateway: str | None) -> None:
        super().__init__()
        self.next_gateway = next_gateway
        self.tries: list[str] = []

    def elsewhere(self, namespace: str, pool: str, *, lease: str | None = None) -> str | None:
        return "https://10.0.0.2:8443" if not self.tries else self.next_gateway

    async def relay(
        self,
        gateway: str,
        method: str,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: bytes | AsyncIterable[bytes] | None,
        answer: Relaying,
    ) -> None:
        self.tries.append(gateway)
        if len(self.tries) == 1:
            raise unavailable("the replica at it does not serve this pool now", retry_after=1)
        await super().relay(gateway, method, target, headers, body, answer)


async def test_a_call_its_pool_s_replica_no_longer_serves_goes_where_the_pool_is_now() -> None:
    calls, peers, answer = Calls(), Moving("https://10.0.0.3:8443"), Answer()
    reply = await _server(calls, peers)._respond(
        _request({b"authorization": b"Bearer good"}, answer)
    )
    assert reply is None
    assert peers.tries == ["https://10.0.0.2:8443", "https://10.0.0.3:8443"]
    assert json.loads(answer.body) == {"output": "served there"}


async def test_a_call_whose_pool_came_here_meanwhile_is_served_here() -> None:
    calls, peers, answer = Calls(), Moving(None), Answer()
    reply = await _server(calls, peers)._respond(
        _request({b"authorization": b"Bearer good"}, answer)
    )
    assert reply is not None
    assert (reply.status, calls.served) == (200, ["p"])


class Joining(Peers):
    """The pool went to a replica whose gateway this one does not know yet; then it does."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def elsewhere(self, namespace: str, pool: str, *, lease: str | None = None) -> str | None:
        self.asked += 1
        return "" if self.asked < 3 else "https://10.0.0.4:8443"


async def test_a_call_to_a_replica_not_known_yet_waits_for_its_gateway() -> None:
    calls, peers, answer = Calls(), Joining(), Answer()
    request = _request({b"authorization": b"Bearer good"}, answer)
    assert await _server(calls, peers)._respond(request) is None
    assert [relayed[0] for relayed in peers.relayed] == ["https://10.0.0.4:8443"]
    assert calls.served == []


async def test_a_stopping_gateway_answers_new_requests_send_again() -> None:
    """Draining as its operator stops, the gateway serves no new call, here or passed on: it
    answers 503 Unavailable with a Retry-After, which a replica that passed the call on takes
    as the word to send it again where its pool is now."""
    calls, peers = Calls(), Peers()
    server = _server(calls, peers)
    server._http.draining = True
    for pool in ("p", "mine"):
        reply = await server._respond(_request({b"authorization": b"Bearer good"}, Answer(), pool))
        assert reply is not None
        assert reply.status == 503
        assert json.loads(reply.body)["error"]["reason"] == "Unavailable"
        assert ("Retry-After", "1") in reply.headers
    assert (calls.served, peers.relayed) == ([], [])
