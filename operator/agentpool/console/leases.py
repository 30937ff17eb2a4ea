"""``agentpool lease POOL``: one agent held for a person's own tools, from a shell.

``lease`` holds an agent for a person's own tools (curl, a notebook): it prints where the agent
is, the lease's name and how to read its token (never the token itself, which would land in a
terminal's scroll-back and a shell's history), renews the lease while it runs, and deletes it on
Ctrl-C or SIGTERM (`kill`, a container stopped). It goes through the Python client, as any
program would.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import signal
import sys
from collections.abc import Awaitable
from typing import Any, TextIO

from agentpool.client import AgentpoolError, Client, LeasedAgent
from agentpool.console.calls import failed, with_client


def run_lease(args: argparse.Namespace) -> int:
    """``agentpool lease``."""
    if (args.context or "").lstrip()[:1] in ("{", "["):
        # --context was the lease's JSON context before it named the kubeconfig's.
        print(
            "agentpool: --context names the kubeconfig context, as in kubectl; "
            f"give the lease's context as --lease-context '{args.context}'",
            file=sys.stderr,
        )
        return 2
    kubectl = [
        f"--{flag}={value}"
        for flag, value in (("kubeconfig", args.kubeconfig), ("context", args.context))
        if value
    ]
    try:
        return asyncio.run(
            until_terminated(
                with_client(
                    args,
                    lambda client: hold_lease(
                        client,
                        args.pool,
                        ttl=args.ttl,
                        context=args.lease_context,
                        checkout_timeout=args.checkout_timeout,
                        kubectl_options=kubectl,
                    ),
                )
            )
        )
    except AgentpoolError as error:
        return failed(error, sys.stderr, code=2)
    except (KeyboardInterrupt, asyncio.CancelledError):
        # Ctrl-C or SIGTERM is how a held lease is meant to end, and it is released by now.
        return 0


async def until_terminated(work: Awaitable[int]) -> int:
    """``work``, cancelled on SIGTERM or SIGINT (Ctrl-C), so that its clean-up (a lease's
    delete) runs rather than the process dying with the agent still held until the ttl. SIGINT
    is taken even when the process started with it ignored, as a shell starts a command it runs
    in the background: ``kill -INT`` still ends the lease."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None, "until_terminated runs as a task"
    for stop in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(stop, task.cancel)
    try:
        return await work
    finally:
        for stop in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(stop)


def token_command(agent: LeasedAgent, namespace: str, kubectl_options: list[str]) -> str:
    """The shell command that prints the lease's token, for the person to run when needed."""
    ref = agent.token_secret_ref
    words = ["kubectl", *kubectl_options, "get", "secret", ref.name, "-n", namespace, "-o"]
    jsonpath = shlex.quote(f"{{.data.{ref.key}}}")
    return f"{shlex.join(words)} jsonpath={jsonpath} | base64 -d"


async def hold_lease(
    client: Client,
    pool: str,
    *,
    ttl: int | None = None,
    context: Any = None,
    checkout_timeout: float | None = None,
    kubectl_options: list[str] | None = None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    """Hold an agent of ``pool`` until cancelled (Ctrl-C, SIGTERM) or the lease ends under it;
    1 with the reason when it ends under it. A cancelled hold says which lease it released."""
    held = ""
    try:
        async with client.lease(
            pool, ttl=ttl, context=context, checkout_timeout=checkout_timeout
        ) as agent:
            held = agent.lease
            out.write(
                f"lease {agent.lease}: agent {agent.name} of pool {pool}\n"
                f"endpoint: {agent.endpoint}\n"
                f"token:    {token_command(agent, client.namespace, kubectl_options or [])}\n"
                "renewing the lease until Ctrl-C (or SIGTERM), which releases it\n"
            )
            out.flush()
            ended = await agent.wait_ended()
            return failed(ended, err)
    except AgentpoolError as error:
        return failed(error, err)
    except asyncio.CancelledError:
        if held:
            out.write(f"released lease {held}\n")
        raise
