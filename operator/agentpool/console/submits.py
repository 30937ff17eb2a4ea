"""``agentpool submit POOL -f ITEMS.jsonl``: a PoolRun of the items in a JSON Lines file.

The items are read and checked here, before anything is created: one JSON value a line (blank
lines skipped), a broken line named by its number and what is wrong with it, from a file or from
standard input (``-f -``). The run is then created through the Python client, as any program
would, and its name printed, so that ``agentpool watch "$(agentpool submit ...)"`` follows it.
:func:`read_items` is pure, for the tests to feed any bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from agentpool.api import FailurePolicy, RunMode
from agentpool.api.runs import MAX_INLINE_ITEMS
from agentpool.console.calls import failed, with_client

if TYPE_CHECKING:
    from agentpool.client import Client, ClientSettings

#: What JSON Lines allows around a value: the whitespace of JSON itself.
_JSON_BLANKS = b" \t\r"


class ItemsError(ValueError):
    """The items file cannot be a run's items; the message says where and why, and how to fix
    it."""


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (JSON numbers are finite)")


def read_items(data: bytes, *, source: str) -> list[Any]:
    """The JSON value of each non-blank line of ``data``, in order; :class:`ItemsError` naming
    ``source`` and the line (counting from 1, blank lines included) for the first broken one."""
    items: list[Any] = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip(_JSON_BLANKS):
            continue
        where = f"{source} line {number}"
        try:
            text = line.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as error:
            raise ItemsError(
                f"{where}: not UTF-8 text ({error.reason} at byte {error.start + 1})"
            ) from None
        try:
            items.append(json.loads(text, parse_constant=_no_constants))
        except json.JSONDecodeError as error:
            raise ItemsError(
                f"{where}: not JSON ({error.msg} at column {error.colno}); "
                "give one JSON value a line"
            ) from None
        except ValueError as error:
            raise ItemsError(f"{where}: {error}") from None
    if not items:
        raise ItemsError(f"{source} has no items: give one JSON value a line")
    if len(items) > MAX_INLINE_ITEMS:
        raise ItemsError(
            f"{source} has {len(items)} items, more than the {MAX_INLINE_ITEMS} a PoolRun holds "
            "inline: put them in a ConfigMap (spec.source.configMapRef) or serve them over HTTP "
            "(spec.source.http) and apply the PoolRun with kubectl"
        )
    return items


def add_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    json_argument: Callable[[str], Any],
    add_cluster_options: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Add ``submit``; ``add_cluster_options`` adds the pool and how to reach the cluster, as
    the other client commands take them."""
    parser = sub.add_parser(
        "submit",
        help="start a PoolRun of the items in a JSON Lines file, print its name",
        description="Start a PoolRun of the items in a JSON Lines file (one JSON value a line; "
        "- reads standard input) and print the run's name, for `agentpool watch` and "
        "`agentpool results`. A broken line fails before anything is created, naming its line "
        "number. The run is deleted an hour after it ends unless --ttl-after-finished or "
        "--keep says otherwise.",
    )
    add_cluster_options(parser)
    add = parser.add_argument
    add(
        "--items-file",
        "-f",
        required=True,
        metavar="FILE",
        help="the items, one JSON value a line (- for standard input)",
    )
    add("--cap", type=int, default=1, help="the most items in flight at once (default: 1)")
    add("--item-id", metavar="FIELD", help="the item field that names each item (default: index)")
    add("--input", type=json_argument, help="run-wide input given beside every item, as JSON")
    add("--mode", choices=get_args(RunMode), default="Call", help="Call or Cast (default: Call)")
    add(
        "--failures",
        choices=get_args(FailurePolicy),
        default="Fail",
        help="Fail: the run fails if an item fails; Report: it reports them (default: Fail)",
    )
    add("--max-attempts", type=int, default=1, help="attempts per item (default: 1)")
    add("--priority", type=int, default=0, help="its checkouts' place in the line (default: 0)")
    add("--name", help="the run's name (default: POOL- and a random suffix)")
    add("--call-timeout", type=int, help="seconds one call may take (default: the pool's)")
    keep = parser.add_mutually_exclusive_group()
    keep.add_argument(
        "--ttl-after-finished",
        type=int,
        metavar="SECONDS",
        help="seconds after the run ends that it is deleted (default: 3600)",
    )
    keep.add_argument("--keep", action="store_true", help="never delete the run once it ends")
    parser.set_defaults(func=run_submit)


def _read(path: str) -> tuple[bytes, str]:
    """The bytes of the items file and the name to call it by in messages."""
    if path == "-":
        return sys.stdin.buffer.read(), "standard input"
    try:
        return Path(path).read_bytes(), path
    except OSError as error:
        raise ItemsError(f"cannot read the items file {path}: {error.strerror}") from None


def run_submit(args: argparse.Namespace) -> int:
    """``agentpool submit``."""
    from agentpool.client import AgentpoolError, ClientSettings

    try:
        data, source = _read(args.items_file)
        items = read_items(data, source=source)
    except ItemsError as error:
        print(f"agentpool: {error}", file=sys.stderr)
        return 2
    settings: ClientSettings | None = None
    if args.keep:
        settings = ClientSettings(run_ttl_seconds_after_finished=None)
    try:
        return asyncio.run(
            with_client(args, lambda client: _submit(client, args, items), settings=settings)
        )
    except AgentpoolError as error:
        return failed(error, sys.stderr, code=2)


async def _submit(client: Client, args: argparse.Namespace, items: list[Any]) -> int:
    from agentpool.client import AgentpoolError

    checkout = args.checkout_timeout
    try:
        run = await client.submit(
            args.pool,
            items,
            cap=args.cap,
            input=args.input,
            item_id=args.item_id,
            mode=args.mode,
            failures=args.failures,
            max_attempts=args.max_attempts,
            priority=args.priority,
            name=args.name,
            checkout_timeout=None if checkout is None else max(1, math.ceil(checkout)),
            call_timeout=args.call_timeout,
            ttl_seconds_after_finished=args.ttl_after_finished,
        )
    except AgentpoolError as error:
        return failed(error, sys.stderr)
    print(run.name)
    return 0
