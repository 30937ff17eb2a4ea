"""Fixtures for the agent SDK tests: agents as real processes, and the operator's agent client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from agent_processes import AgentProcess, Spawn, start_agent

from agentpool.io.agents import AgentClient


@pytest.fixture
async def client() -> AsyncIterator[AgentClient]:
    """The operator's agent client, closed after the test."""
    async with AgentClient() as agents:
        yield agents


@pytest.fixture
async def spawn(tmp_path: Path) -> AsyncIterator[Spawn]:
    """Start agents by target; every one still running is stopped after the test."""
    started: list[AgentProcess] = []

    async def spawn(target: str, **kwargs: object) -> AgentProcess:
        logs = tmp_path / f"agent-{len(started)}"
        agent = await start_agent(target, logs, **kwargs)  # type: ignore[arg-type]
        started.append(agent)
        return agent

    yield spawn
    for agent in started:
        agent.stop()
