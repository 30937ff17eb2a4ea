"""echo: an A2A agent on the official Python SDK (``a2a-sdk``) that knows nothing of agentpool.

It serves its agent card at ``/.well-known/agent-card.json`` and A2A's JSON-RPC binding at ``/``.
A message is answered as a task whose one artifact, the message's words, is streamed a word at a
time: a ``SendStreamingMessage`` call gets, as server-sent events, the task, its ``working``
status, each word as an artifact chunk as it is made, and the ``completed`` status; a
``SendMessage`` call gets the finished task. A message whose metadata names a file in ``hold``
is answered up to its first word, then held until that file exists, so a caller can see each
word arrive before the next is made (the task fails if the file has not come in a minute). Run
it by hand with ``uvicorn examples.http.a2a_server:app --port 8080``.

The card names the agent's address as ``A2A_URL`` gives it (``http://localhost:8080/`` unless
set). Behind a gateway, the address a caller uses is the gateway's, which the agent cannot know:
a caller reads the card from that address and points the client there (see
``examples/http/a2a-pool.yaml``).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from a2a.helpers import new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue_v2 import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks.inmemory_task_store import InMemoryTaskStore
from a2a.server.tasks.task_updater import TaskUpdater
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from starlette.applications import Starlette

#: How long a held answer waits for its file before it goes on anyway.
HOLD_SECONDS = 60.0

card = AgentCard(
    name="echo",
    description="Answers a message with its own words, streamed one word at a time.",
    version="0.1.0",
    supported_interfaces=[
        AgentInterface(
            url=os.environ.get("A2A_URL", "http://localhost:8080/"),
            protocol_binding="JSONRPC",
            protocol_version="1.0",
        )
    ],
    capabilities=AgentCapabilities(streaming=True),
    default_input_modes=["text/plain"],
    default_output_modes=["text/plain"],
    skills=[
        AgentSkill(
            id="echo",
            name="Echo",
            description="Streams the message's words back, one artifact chunk each.",
            tags=["echo", "streaming"],
            examples=["hello pool"],
        )
    ],
)


class Echo(AgentExecutor):
    """Answers a message as a task that streams the message's words back."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        assert message is not None
        task = context.current_task or new_task_from_user_message(message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        working = new_text_message("echoing", context_id=task.context_id, task_id=task.id)
        await updater.start_work(working)
        words = context.get_user_input().split() or ["(nothing)"]
        hold = str(message.metadata["hold"]) if "hold" in message.metadata else None
        for index, word in enumerate(words):
            if index == 1 and hold is not None and not await _until_exists(Path(hold)):
                why = f"{hold} did not come in {HOLD_SECONDS:g}s"
                await updater.failed(new_text_message(why, context_id=task.context_id))
                return
            await updater.add_artifact(
                [new_text_part(word)],
                artifact_id="echo",
                name="echo",
                append=index > 0,
                last_chunk=index == len(words) - 1,
            )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None
        assert context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


async def _until_exists(path: Path) -> bool:
    """Whether ``path`` (a file another process makes) came within ``HOLD_SECONDS``."""
    try:
        async with asyncio.timeout(HOLD_SECONDS):
            while not await asyncio.to_thread(path.exists):  # noqa: ASYNC110 (no event to await)
                await asyncio.sleep(0.02)
    except TimeoutError:
        return False
    return True


handler = DefaultRequestHandler(
    agent_executor=Echo(), task_store=InMemoryTaskStore(), agent_card=card
)
app = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")])
