"""``agentpool call POOL`` and ``agentpool lease POOL``: one agent, from a shell.

``call`` sends one item through :meth:`agentpool.client.Client.call` and prints its output as
JSON. ``lease`` holds an agent for a person's own tools (curl, a notebook): it prints where the
agent is, the lease's name and how to read its token (never the token itself, which would land in
a terminal's scroll-back and a shell's history), renews the lease while it runs, and deletes it on
Ctrl-C. Both go through the Python client, as any program would.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

from agentpool.client import AgentpoolError, Client, LeasedAgent


async def _with_client(args: argparse.Namespace, work: Callable[[Client], Awaitable[int]]) -> int:
    """``work`` done with a client for the kubeconfig and namespace the options name, or the
    pod's service account when none is named and the command runs in a pod."""
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not (args.kubeconfig or args.kube_context):
        client = Client.in_cluster(namespace=args.namespace)
    else:
        client = Client.from_kubeconfig(
            args.kubeconfig, args.kube_context, namespace=args.namespace
        )
    async with client:
        return await work(client)


def run_call(args: argparse.Namespace) -> int:
    """``agentpool call``."""
    try:
        return asyncio.run(
            _with_client(
                args,
                lambda client: print_output(
                    client.call(
                        args.pool,
                        args.item,
                        input=args.input,
                        context=args.context,
                        checkout_timeout=args.checkout_timeout,
                        call_timeout=args.call_timeout,
                    )
                ),
            )
        )
    except AgentpoolError as error:
        return _failed(error, sys.stderr, code=2)


def run_lease(args: argparse.Namespace) -> int:
    """``agentpool lease``."""
    kubectl = [
        f"--{flag}={value}"
        for flag, value in (("kubeconfig", args.kubeconfig), ("context", args.kube_context))
        if value
    ]
    try:
        return asyncio.run(
            _with_client(
                args,
                lambda client: hold_lease(
                    client,
                    args.pool,
                    ttl=args.ttl,
                    context=args.context,
                    checkout_timeout=args.checkout_timeout,
                    kubectl_options=kubectl,
                ),
            )
        )
    except AgentpoolError as error:
        return _failed(error, sys.stderr, code=2)
    except KeyboardInterrupt:
        # Ctrl-C is how a held lease is meant to end, and it is released by now.
        return 0


def _failed(error: AgentpoolError, err: TextIO, *, code: int = 1) -> int:
    err.write(f"agentpool: {error.reason}: {error.message}\n")
    return code


async def print_output(
    call: Awaitable[Any], *, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    """Print what ``call`` (a :meth:`Client.call`) outputs, as JSON; 1 with the reason on
    failure."""
    try:
        output = await call
    except AgentpoolError as error:
        return _failed(error, err)
    out.write(json.dumps(output) + "\n")
    return 0


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
    """Hold an agent of ``pool`` until cancelled (Ctrl-C) or the lease ends under it; 1 with the
    reason when it ends under it. A cancelled hold says which lease it released."""
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
                "renewing the lease until Ctrl-C, which releases it\n"
            )
            out.flush()
            ended = await agent.wait_ended()
            return _failed(ended, err)
    except AgentpoolError as error:
        return _failed(error, err)
    except asyncio.CancelledError:
        if held:
            out.write(f"released lease {held}\n")
        raise
