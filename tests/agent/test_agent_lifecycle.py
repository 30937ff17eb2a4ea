"""An agent process's life: how it starts, how it refuses to, how it drains, what it logs."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agent_processes import (
    EXAMPLES,
    FIXTURES,
    REPO,
    Spawn,
    launch,
    wait_for,
    wait_until,
)

from agentpool.io.agents import AgentClient

GATED = f"{FIXTURES}:gated"


def envelope(item_id: str, item: object) -> dict[str, object]:
    return {"id": item_id, "item": item, "input": {"k": 1}, "attempt": 1, "run": "lifecycle"}


async def test_sigterm_drains_the_current_item(
    spawn: Spawn, client: AgentClient, tmp_path: Path
) -> None:
    """On SIGTERM the agent turns unready, refuses new items, finishes its item, and exits 0."""
    agent = await spawn(GATED)
    await wait_until(lambda: client.ready(agent.endpoint), what="the agent to become ready")
    gate = tmp_path / "drain-gate"
    running = asyncio.create_task(
        client.invoke(
            agent.endpoint, agent.token, envelope("held", {"gate": str(gate)}), timeout=60
        )
    )

    async def holding() -> bool:
        status = await client.status(agent.endpoint, agent.token)
        return status is not None and status.current == "held"

    await wait_until(holding, what="the agent to hold the item")
    agent.terminate()

    async def draining() -> bool:
        return not await client.ready(agent.endpoint)

    await wait_until(draining, what="/healthz to answer 503")
    refused = await client.invoke(agent.endpoint, agent.token, envelope("late", {}), timeout=10)
    assert (refused.ok, refused.reason, refused.status_code) == (False, "Draining", 503)
    status = await client.status(agent.endpoint, agent.token)
    assert status is not None
    assert (status.busy, status.draining) == (True, True)
    assert agent.process.poll() is None

    gate.touch()
    finished = await running
    assert finished.ok
    assert finished.output == {"id": "held", "count": 1, "uses": 1}
    assert await agent.exit_code() == 0
    assert "drained after 1 items" in agent.logs()


async def test_sigterm_during_startup_exits_at_once(spawn: Spawn, client: AgentClient) -> None:
    """An agent stopped before its start-up ends exits 0 without waiting for the start-up."""
    never = str(Path(FIXTURES).parent / "no-such-gate-ever")
    agent = await spawn(GATED, env={"STARTUP_GATE": never})
    assert not await client.ready(agent.endpoint)
    agent.terminate()
    assert await agent.exit_code(timeout=10) == 0


async def test_agent_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    """With no AGENTPOOL_TOKEN the agent does not serve at all, and says what to set."""
    process, stdout, stderr = launch(
        f"{EXAMPLES / 'echo.py'}:agent", tmp_path / "logs", token=None, cwd=tmp_path
    )
    await wait_for(lambda: process.poll() is not None, what="the agent to exit")
    assert process.returncode == 2
    text = stderr.read_text()
    assert "AGENTPOOL_TOKEN is not set" in text
    assert "listening" not in stdout.read_text()


async def test_failed_startup_exits_nonzero(tmp_path: Path) -> None:
    """A start-up that raises ends the process with status 1, and its log (stderr, with the
    traceback) names the exception."""
    process, _, stderr = launch(f"{FIXTURES}:broken", tmp_path / "logs", token="t", cwd=tmp_path)
    await wait_for(lambda: process.poll() is not None, what="the agent to exit")
    assert process.returncode == 1
    text = stderr.read_text()
    assert "start-up failed: FileNotFoundError: no model at /models/missing.bin" in text
    assert "Traceback (most recent call last)" in text


async def test_target_that_is_not_an_agent_is_refused(tmp_path: Path) -> None:
    """Targets naming no agent fail with status 2 and a message naming what was looked for."""
    cases = {
        f"{FIXTURES}:not_an_agent": "is a str, not an agentpool.agent.Agent",
        f"{FIXTURES}:missing": "has no 'missing'",
        "no_such_module_here:agent": "no module named 'no_such_module_here'",
        f"{tmp_path / 'absent.py'}:agent": "no such file",
    }
    for index, (target, expected) in enumerate(cases.items()):
        logs = tmp_path / f"logs-{index}"
        process, _, stderr = launch(target, logs, token="t", cwd=tmp_path)
        await wait_for(lambda p=process: p.poll() is not None, what=f"{target} to exit")
        assert process.returncode == 2, target
        assert expected in stderr.read_text(), target


async def test_examples_load_from_any_working_directory(spawn: Spawn, client: AgentClient) -> None:
    """An example runs by relative path from the checkout, by absolute path and as a module."""
    relative = await spawn("examples/agents/echo.py:agent", cwd=REPO)
    absolute = await spawn(f"{EXAMPLES / 'flaky.py'}:agent")
    dotted = await spawn("slow_start", env={"PYTHONPATH": str(EXAMPLES), "SLOW_START_SECONDS": "0"})
    for agent in (relative, absolute, dotted):
        await wait_until(lambda a=agent: client.ready(a.endpoint), what=f"{agent.endpoint} ready")
    echoed = await client.invoke(relative.endpoint, relative.token, envelope("e", [1]), timeout=10)
    assert echoed.output == [1]
    flaky = await client.invoke(absolute.endpoint, absolute.token, envelope("f", {}), timeout=10)
    assert flaky.output == {"id": "f", "attempt": 1, "item": {}}
    digest = await client.invoke(dotted.endpoint, dotted.token, envelope("d", {}), timeout=10)
    assert set(digest.output) == {"id", "digest", "length"}


async def test_async_agent_functions_are_awaited(spawn: Spawn, client: AgentClient) -> None:
    """An agent whose start-up and handler are coroutines works and fails like a sync one."""
    agent = await spawn(f"{FIXTURES}:coroutines")
    await wait_until(lambda: client.ready(agent.endpoint), what="the agent to become ready")
    result = await client.invoke(agent.endpoint, agent.token, envelope("a", 7), timeout=10)
    assert result.output == 21
    failed = await client.invoke(agent.endpoint, agent.token, envelope("b", "fail"), timeout=10)
    assert (failed.reason, failed.message) == (
        "HandlerError",
        "ValueError: async handlers fail like sync ones",
    )


async def test_invocations_are_recorded_once_each(
    spawn: Spawn, client: AgentClient, tmp_path: Path
) -> None:
    """INVOCATIONS_FILE gets one line per invocation, so tests can count runs of an item."""
    record = tmp_path / "invocations.jsonl"
    agent = await spawn(f"{EXAMPLES / 'echo.py'}:agent", env={"INVOCATIONS_FILE": str(record)})
    await wait_until(lambda: client.ready(agent.endpoint), what="echo to become ready")
    for item_id in ("a", "b", "a"):
        await client.invoke(agent.endpoint, agent.token, envelope(item_id, 0), timeout=10)
    lines = record.read_text().splitlines()
    assert [line.split('"id": ')[1].split(",")[0] for line in lines] == ['"a"', '"b"', '"a"']


async def test_token_never_appears_in_logs(
    spawn: Spawn, client: AgentClient, tmp_path: Path
) -> None:
    """Across items, failures, refusals, resets and a drain, the token is in no log line."""
    agent = await spawn(GATED)
    await wait_until(lambda: client.ready(agent.endpoint), what="the agent to become ready")
    await client.invoke(agent.endpoint, agent.token, envelope("ok", {}), timeout=10)
    await client.invoke(agent.endpoint, agent.token, envelope("bad", {"fail": "boom"}), timeout=10)
    await client.invoke(agent.endpoint, agent.token, {"id": "no-item"}, timeout=10)
    await client.invoke(agent.endpoint, "wrong", envelope("x", {}), timeout=10)
    await client.invoke(agent.endpoint, agent.token, envelope("r", {"breakReset": 1}), timeout=10)
    assert not await client.reset(agent.endpoint, agent.token)
    cast = await client.invoke(
        agent.endpoint, agent.token, envelope("c", {}), timeout=10, cast=True
    )
    assert cast.ok
    agent.terminate()
    assert await agent.exit_code() == 0
    logs = agent.logs()
    for item_id in ("ok", "bad", "r", "c"):
        assert f'id="{item_id}"' in logs, item_id
    assert 'message="RuntimeError: boom"' in logs
    assert agent.token not in logs
    assert agent.token[:8] not in logs
