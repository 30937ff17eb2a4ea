"""``agentpool call POOL`` and ``agentpool cast POOL``: one item to a pool from a shell.

Both go through the operator's gateway with the Python client, as any program would: ``call``
prints the agent's output as JSON (``--stream``: each part as a JSON line as the agent makes
it), ``cast`` the agent that took the item; a failure is one line
naming the reason and its message, exit 1 (2 when no client could be made). :func:`add_commands`
adds the two to the command line; the client is imported only when one runs, so ``agentpool
crds`` does not pay for it. :mod:`agentpool.console.leases` shares :func:`with_client`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TextIO, TypedDict

if TYPE_CHECKING:
    from agentpool.client import AgentpoolError, Client, ClientSettings


def add_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    json_argument: Callable[[str], Any],
    add_cluster_options: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Add ``call`` and ``cast``; ``add_cluster_options`` adds the pool and how to reach the
    cluster, as the other client commands take them."""
    for verb, what, more, run in (
        (
            "call",
            "send one item to an agent of a pool, print its output",
            "Print the agent's output as JSON; on failure, one line with the reason, exit 1.",
            run_call,
        ),
        (
            "cast",
            "hand one item to an agent of a pool, print which took it",
            "Do not wait for the output: print the agent (pod) that took the item, which stays "
            "busy with it until it reports the item done.",
            run_cast,
        ),
    ):
        parser = sub.add_parser(
            verb,
            help=what + " (through the operator's gateway)",
            description=f"{what[0].upper()}{what[1:]}, through the operator's gateway. {more}",
        )
        add_cluster_options(parser)
        add = parser.add_argument
        add("--item", required=True, type=json_argument, help="the item, as JSON")
        add("--input", type=json_argument, help="input beside the item, as JSON")
        add("--id", help="the item's id the agent sees (default: one the gateway names)")
        add("--priority", type=int, default=0, help="its place in the pool's line (default: 0)")
        add("--no-wait", dest="wait", action="store_false", help="fail unless an agent is free")
        add("--call-timeout", type=float, help="seconds the agent may take (default: the pool's)")
        add("--gateway-url", help="the gateway (default: the namespace's agentpool-gateway)")
        add("--gateway-ca", help="the PEM file the gateway's certificate is checked with")
        if verb == "call":
            add(
                "--stream",
                action="store_true",
                help="print each part of the output as the agent makes it, one JSON line each",
            )
        parser.set_defaults(func=run)


async def with_client(
    args: argparse.Namespace,
    work: Callable[[Client], Awaitable[int]],
    *,
    settings: ClientSettings | None = None,
) -> int:
    """``work`` done with a client for the kubeconfig and namespace the options name, or the
    pod's service account when none is named and the command runs in a pod; ``settings`` as
    :class:`Client` takes them (its defaults unless given)."""
    from agentpool.client import Client

    gateway = {
        "gateway_url": getattr(args, "gateway_url", None),
        "gateway_ca": getattr(args, "gateway_ca", None),
    }
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not (args.kubeconfig or args.context):
        client = Client.in_cluster(namespace=args.namespace, settings=settings, **gateway)
    else:
        client = Client.from_kubeconfig(
            args.kubeconfig, args.context, namespace=args.namespace, settings=settings, **gateway
        )
    async with client:
        return await work(client)


def run_call(args: argparse.Namespace) -> int:
    """``agentpool call``; with ``--stream``, the parts as they come."""
    if args.stream:
        return _run(
            args, lambda client: print_parts(client.stream(args.pool, args.item, **_of(args)))
        )
    return _run(args, lambda client: print_output(client.call(args.pool, args.item, **_of(args))))


def run_cast(args: argparse.Namespace) -> int:
    """``agentpool cast``."""
    return _run(
        args, lambda client: print_output(client.cast(args.pool, args.item, **_of(args)), raw=True)
    )


class _CallOptions(TypedDict):
    """The keywords of ``Client.call`` and ``Client.cast`` the command line sets."""

    input: Any
    id: str | None
    priority: int
    wait: bool
    checkout_timeout: float | None
    call_timeout: float | None


def _of(args: argparse.Namespace) -> _CallOptions:
    return {
        "input": args.input,
        "id": args.id,
        "priority": args.priority,
        "wait": args.wait,
        "checkout_timeout": args.checkout_timeout,
        "call_timeout": args.call_timeout,
    }


def _run(args: argparse.Namespace, work: Callable[[Client], Awaitable[int]]) -> int:
    from agentpool.client import AgentpoolError

    try:
        return asyncio.run(with_client(args, work))
    except AgentpoolError as error:
        return failed(error, sys.stderr, code=2)


def failed(error: AgentpoolError, err: TextIO, *, code: int = 1) -> int:
    """Say why in one line, ``agentpool: REASON: message``; the exit code."""
    err.write(f"agentpool: {error.reason}: {error.message}\n")
    return code


async def print_parts(
    parts: AsyncIterator[Any], *, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    """Print each part as one JSON line as it comes; 1 with the reason on failure, which may
    come after some parts."""
    from agentpool.client import AgentpoolError

    try:
        async for part in parts:
            out.write(json.dumps(part) + "\n")
            out.flush()
    except AgentpoolError as error:
        return failed(error, err)
    return 0


async def print_output(
    call: Awaitable[Any], *, out: TextIO = sys.stdout, err: TextIO = sys.stderr, raw: bool = False
) -> int:
    """Print what ``call`` answers, as JSON (``raw``: as text); 1 with the reason on failure."""
    from agentpool.client import AgentpoolError

    try:
        output = await call
    except AgentpoolError as error:
        return failed(error, err)
    out.write((str(output) if raw else json.dumps(output)) + "\n")
    return 0
