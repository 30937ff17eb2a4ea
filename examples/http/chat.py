"""chat: an OpenAI-compatible chat server on FastAPI that knows nothing of agentpool.

It serves ``POST /v1/chat/completions`` as the OpenAI API does, whole or streamed as server-sent
events (``"stream": true``), and ``GET /health``; its reply echoes the last user message word by
word, so a reader can see the stream arrive. It reads no agentpool variable, checks no token and
imports nothing of agentpool: a pool takes it as it is (``examples/http/pool.yaml``), and callers
reach it through the gateway with the ``openai`` client, given the pool's gateway path as the base
URL and a Kubernetes token as the API key. Run it by hand with
``uvicorn examples.http.chat:app --port 8080``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

#: Seconds between streamed words, as a model's tokens come.
WORD_SECONDS = float(os.environ.get("CHAT_WORD_SECONDS", "0.05"))

app = FastAPI(title="chat")


class Message(BaseModel):
    role: str
    content: str


class ChatRequest(BaseModel):
    model: str
    messages: list[Message]
    stream: bool = False


@app.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


def reply_to(request: ChatRequest) -> list[str]:
    said = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
    words = f"You said: {said}".split(" ")
    return [word if i == 0 else f" {word}" for i, word in enumerate(words)]


@app.post("/v1/chat/completions", response_model=None)
async def completions(request: ChatRequest) -> JSONResponse | StreamingResponse:
    ident = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    words = reply_to(request)
    if not request.stream:
        return JSONResponse(
            {
                "id": ident,
                "object": "chat.completion",
                "created": created,
                "model": request.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "".join(words)},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 0, "completion_tokens": len(words), "total_tokens": 0},
            }
        )

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        body = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": request.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(body)}\n\n"

    async def events() -> AsyncIterator[str]:
        yield chunk({"role": "assistant", "content": ""})
        for word in words:
            await asyncio.sleep(WORD_SECONDS)
            yield chunk({"content": word})
        yield chunk({}, "stop")
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")
