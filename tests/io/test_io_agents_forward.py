"""A request forwarded to a plain HTTP agent reaches it as its caller sent it, with only the
agent's own ``Host`` added, at any address the pod has, IPv6 included."""

from __future__ import annotations

import pytest
from aiohttp import web

from agentpool.io.agents import AgentClient, ForwardBroken


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
async def test_a_forwarded_request_names_the_agent_s_own_host_and_adds_nothing(host: str) -> None:
    seen: list[dict[str, str]] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.Response(text=request.path_qs)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, host, 0).start()
    port = runner.addresses[0][1]
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    client = AgentClient()
    try:
        async with client.forward(
            f"http://{authority}", "GET", "/x?y=1", [("X-Trace", "t")], None, timeout=5
        ) as answer:
            body = b"".join([piece async for piece in answer.body])
        assert (answer.status, body) == (200, b"/x?y=1")
        assert seen == [{"Host": authority, "X-Trace": "t"}]
    finally:
        await client.close()
        await runner.cleanup()


async def test_an_agent_that_is_not_there_is_lost() -> None:
    client = AgentClient()
    try:
        with pytest.raises(ForwardBroken) as broken:
            async with client.forward("http://127.0.0.1:1", "GET", "/", [], None, timeout=5):
                pass
        assert broken.value.lost
        assert broken.value.reason == "AgentLost"
    finally:
        await client.close()
