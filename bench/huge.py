"""Scenario 9: a 100,000-item run, and reading every result of it back.

A ConfigMap holds at most 1 MiB, so a run this large takes its items from the HTTP source: the
bench's source service (:class:`bench.scale.ItemSource`, batched, so it answers as many items as
each request's ``max`` allows) hands out ``items`` items to a PoolRun with ``cap: 64`` on a pool
of 8 to 32 echo agents. The figures: items a second from the run's creation to its completion,
the operator's peak resident memory (``VmHWM``), the PoolRun object's size as the API server
serves it at the end (its JSON bytes), and the time to read every result back, both with
``agentpool results RUN`` (its own process, output to a file) and with the Python client's
``Run.results()``. Each reader's records are checked: every item's id exactly once, each output
the item the source handed out.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from agentpool.client import Client
from bench.harness import ROOT, Stage, Watcher, finished, pool_spec
from bench.scale import CAP, MAX_AGENTS, MIN_AGENTS, ItemSource, run_figures

AGENT = ROOT / "bench" / "echo_agent.py"
SAMPLE_SECONDS = 0.5
NAMESPACE, RUN = "bench", "huge"


def check_records(records: list[dict[str, Any]], expected: dict[str, Any]) -> dict[str, int]:
    """How the records read back compare with the items handed out: ids missing, ids given
    more than once, ids never handed out, outputs that differ from their item, failures."""
    counts = Counter(str(record.get("id")) for record in records)
    wrong = sum(
        1
        for record in records
        if "output" in record and record["output"] != expected.get(str(record.get("id")))
    )
    return {
        "records": len(records),
        "missing": sum(1 for key in expected if key not in counts),
        "duplicates": sum(n - 1 for n in counts.values() if n > 1),
        "unknown": sum(1 for key in counts if key not in expected),
        "wrong_outputs": wrong,
        "failures": sum(1 for record in records if "failure" in record),
    }


def read_with_cli(kubeconfig: Path, out: Path) -> float:
    """Seconds ``agentpool results RUN`` takes to write every record to ``out``."""
    argv = [sys.executable, "-m", "agentpool", "results", RUN, "-n", NAMESPACE]
    argv += ["--kubeconfig", str(kubeconfig)]
    started = time.monotonic()
    with out.open("wb") as sink:
        subprocess.run(argv, cwd=ROOT, stdout=sink, stderr=subprocess.PIPE, check=True, timeout=600)
    return time.monotonic() - started


async def read_with_client(kubeconfig: Path) -> tuple[float, list[dict[str, Any]]]:
    """Seconds the Python client's ``Run.results()`` takes to give every record, and them."""
    records: list[dict[str, Any]] = []
    started = time.monotonic()
    async with Client.from_kubeconfig(kubeconfig, namespace=NAMESPACE) as client:
        run = await client.run(RUN)
        async for result in run.results():
            record: dict[str, Any] = {"id": result.id}
            if result.ok:
                record["output"] = result.output
            else:
                record["failure"] = result.failure
            records.append(record)
    return time.monotonic() - started, records


async def run(work: Path, *, items: int) -> dict[str, Any]:
    """Scenario 9; the figures for results.json and the samples for the plots."""
    source = ItemSource(items, batched=True)
    await source.start()
    try:
        async with Stage(work, "huge") as stage:
            kube = stage.kube
            operator = stage.operator
            assert operator is not None
            await kube.new_namespace(NAMESPACE)
            spec = pool_spec(AGENT, minSize=MIN_AGENTS, maxSize=MAX_AGENTS)
            await kube.create("agentpools", NAMESPACE, "echo", spec)
            runs = Watcher(kube, f"/apis/agentpool.dev/v1alpha1/namespaces/{NAMESPACE}/poolruns")
            await runs.start()
            run_spec = {
                "poolRef": {"name": "echo"},
                "cap": CAP,
                "itemId": "id",
                "checkoutTimeoutSeconds": 120,
                "source": {"http": {"url": source.url}},
            }
            started = time.monotonic()
            await kube.create("poolruns", NAMESPACE, RUN, run_spec)
            memory: list[tuple[float, float]] = []
            deadline = started + 120 + items * 0.005
            while not finished(runs.objects.get(RUN, {})):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the huge run did not finish in {deadline - started:.0f}s")
                memory.append((time.monotonic() - started, operator.memory_kib("VmRSS") / 1024))
                await asyncio.sleep(SAMPLE_SECONDS)
            ended_at, _ = await runs.wait(
                lambda name, obj: name == RUN and finished(obj), timeout=1, what="the end"
            )
            seconds = ended_at - started
            peak = operator.memory_kib("VmHWM") / 1024
            await runs.stop()
            raw = await kube.get_raw("poolruns", NAMESPACE, RUN)
            kubeconfig = stage.cluster.kubeconfig
            listing = stage.dir / "results.jsonl"
            cli_seconds = await asyncio.to_thread(read_with_cli, kubeconfig, listing)
            client_seconds, client_records = await read_with_client(kubeconfig)
            agents = len(await kube.pods(NAMESPACE, "echo"))
    finally:
        await source.stop()
    expected = {f"item-{n:06d}": {"id": f"item-{n:06d}", "text": source.text} for n in range(items)}
    cli_records = [json.loads(line) for line in listing.read_text().splitlines() if line.strip()]
    cli_check = check_records(cli_records, expected)
    client_check = check_records(client_records, expected)
    return {
        "huge": {
            **run_figures(items, seconds=seconds, peak=peak, raw=raw, agents=agents),
            "source_requests": source.requests,
            "results_read_seconds": round(cli_seconds, 3),
            "client_results_read_seconds": round(client_seconds, 3),
            "results_exactly_once": all(
                check["records"] == items
                and not (check["missing"] or check["duplicates"] or check["unknown"])
                and not (check["wrong_outputs"] or check["failures"])
                for check in (cli_check, client_check)
            ),
            "cli_check": cli_check,
            "client_check": client_check,
        },
        "_samples": {"huge_rss_mib": memory},
    }
