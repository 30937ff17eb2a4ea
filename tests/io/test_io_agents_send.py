"""The agent client's side of a run's item sent to an HTTP pool's agent: the request goes as the
run says (method, path, headers, the item's JSON, no token), and every kind of answer, or none,
comes back as a value: the answer read whole or cut at the limit, a timeout or a broken
connection as a lost agent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from agentpool.io.agents import AgentClient, HttpAnswer, InvokeResult

Answer = Callable[[str, str, dict[str, str], bytes], bytes | None]


@dataclass
class RawServer:
    """Answers each request with the raw bytes ``answer`` gives for it; None closes the
    connection without an answer. It records what it was sent."""

    answer: Answer
    seen: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {
                name.strip().lower(): value.strip()
                for name, _, value in (line.partition(":") for line in lines[1:] if line)
            }
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            self.seen.append((method, path, headers, body))
            raw = self.answer(method, path, headers, body)
            if raw is not None:
                writer.write(raw)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _send(
    server: RawServer, *, timeout: float = 5.0, limit: int = 1 << 20
) -> HttpAnswer | InvokeResult:
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    try:
        async with AgentClient() as client:
            return await client.send(
                f"http://127.0.0.1:{port}",
                "PUT",
                "/v1/chat/completions?x=1",
                (("Content-Type", "application/json"), ("X-Api-Version", "2")),
                b'{"n":1}',
                timeout=timeout,
                limit=limit,
            )
    finally:
        listening.close()


def answering(status: int, content_type: str, body: bytes) -> Answer:
    head = b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (
        status,
        content_type.encode(),
        len(body),
    )
    return lambda *_: head + body


async def test_the_request_goes_as_the_run_says_with_no_token() -> None:
    """Method, path and query, the run's headers and the item's JSON reach the agent; no
    Authorization is sent, as an HTTP pool's agents hold no token."""
    server = RawServer(answering(200, "application/json", b'{"ok":true}'))
    answer = await _send(server)
    assert answer == HttpAnswer(200, "application/json", b'{"ok":true}')
    ((method, path, headers, body),) = server.seen
    assert (method, path, body) == ("PUT", "/v1/chat/completions?x=1", b'{"n":1}')
    assert headers["x-api-version"] == "2"
    assert headers["content-type"] == "application/json"
    assert "authorization" not in headers


async def test_a_failed_answer_is_read_as_any_other() -> None:
    """A 500 is an answer, with its body: the reading of it is the run's, not the client's."""
    answer = await _send(RawServer(answering(500, "text/plain", b"overloaded")))
    assert answer == HttpAnswer(500, "text/plain", b"overloaded")


async def test_a_redirect_is_the_agents_answer_not_followed() -> None:
    """A 3xx comes back as it is: the run's request is not sent elsewhere."""
    raw = b"HTTP/1.1 302 Found\r\nLocation: http://elsewhere/\r\nContent-Length: 0\r\n\r\n"
    answer = await _send(RawServer(lambda *_: raw))
    assert isinstance(answer, HttpAnswer)
    assert answer.status == 302


async def test_a_body_past_the_limit_is_cut_there() -> None:
    """Only ``limit`` bytes of a long answer are kept, and the answer says it is not whole."""
    answer = await _send(RawServer(answering(200, "text/plain", b"x" * 5000)), limit=1000)
    assert answer == HttpAnswer(200, "text/plain", b"x" * 1000, whole=False)


async def test_a_chunked_answer_is_read_whole() -> None:
    """An answer in chunks, as a streaming server sends one, is read to its end."""
    raw = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'3\r\n{"a\r\n4\r\n":1}\r\n0\r\n\r\n'
    )
    answer = await _send(RawServer(lambda *_: raw))
    assert answer == HttpAnswer(200, "application/json", b'{"a":1}')


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "AgentLost"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", "AgentLost"),
        (b"not http at all\r\n\r\n", "AgentLost"),
    ],
)
async def test_a_broken_answer_is_a_lost_agent(raw: bytes | None, reason: str) -> None:
    """No answer, one cut short, or one that is not HTTP: the agent's state is unknown."""
    answer = await _send(RawServer(lambda *_: raw))
    assert isinstance(answer, InvokeResult)
    assert (answer.ok, answer.reason, answer.lost) == (False, reason, True)


async def test_no_answer_within_the_timeout_is_a_call_timeout() -> None:
    """An agent that answers nothing in time is lost too, with the call timeout's reason."""
    hang = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await hang.wait()
        writer.close()

    listening = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    try:
        async with AgentClient() as client:
            answer = await client.send(
                f"http://127.0.0.1:{port}", "POST", "/", (), b"1", timeout=0.2, limit=100
            )
    finally:
        hang.set()
        listening.close()
    assert isinstance(answer, InvokeResult)
    assert (answer.reason, answer.lost) == ("CallTimeout", True)
