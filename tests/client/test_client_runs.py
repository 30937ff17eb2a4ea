"""``client.submit``, ``run.results()``, ``run.wait()`` and ``client.cast`` on a cluster.

The promise of ``results()`` is exactly once: every item's output or failure, none twice, as
the operator records them, including those it moved out of the run's status into ConfigMaps.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter

import pytest
from client_support import FAST, ClientCluster, Outside

from agentpool.client import AgentpoolError, Client, ClientSettings, PoolExhausted, RunFailed

pytestmark = pytest.mark.cluster

ITEMS = 1000


def digest(item: object) -> str:
    canonical = json.dumps(item, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@pytest.mark.slow
async def test_submit_streams_every_result_exactly_once_including_offloaded_ones(
    client: Client, outside: Outside
) -> None:
    """A run of 1,000 items, some with outputs too large for status and some failing: results()
    yields 1,000 results with 1,000 distinct ids while the run goes on, each output the agent's
    answer to its own item, and the run did move results into ConfigMaps."""
    pool = outside.pool("p", agents=4, agent="slow_start", env=FAST)
    items = [
        {"id": f"item-{n:04}", "n": n, "fail": n % 97 == 0}
        | ({"outputBytes": 5000} if n % 50 == 0 else {})
        for n in range(ITEMS)
    ]
    run = await client.submit(pool, items, item_id="id", cap=8, failures="Report")
    results = [result async for result in run.results()]

    counts = Counter(result.id for result in results)
    assert len(results) == ITEMS
    assert set(counts) == {item["id"] for item in items}
    assert max(counts.values()) == 1
    by_id = {item["id"]: item for item in items}
    failed = {r.id for r in results if not r.ok}
    assert failed == {item["id"] for item in items if item["fail"]}
    for result in results:
        if result.ok:
            assert result.output["digest"] == digest(by_id[result.id])
        else:
            assert result.failure is not None
            assert result.failure.reason == "HandlerError"
    status = await run.wait()
    assert status.phase == "Succeeded"
    assert status.result_refs, "no result was moved to a ConfigMap; the test proves less"
    assert sum(ref.outputs + ref.failures for ref in status.result_refs) > 0


async def test_results_of_a_finished_run_come_back_from_status_and_configmaps(
    client: Client, outside: Outside
) -> None:
    """Followed only after it ended, a run still gives each result once, ConfigMaps included."""
    pool = outside.pool("p", agents=2, agent="slow_start", env=FAST)
    items = [{"id": f"i{n}", "outputBytes": 6000 if n % 2 else 0} for n in range(10)]
    run = await client.submit(pool, items, item_id="id", cap=4)
    await run.wait()
    later = await client.run(run.name)
    ids = [result.id async for result in later.results()]
    assert sorted(ids) == sorted(item["id"] for item in items)
    assert later.status.result_refs


async def test_wait_raises_RunFailed_with_the_operators_reason(
    client: Client, outside: Outside
) -> None:
    """Under the Fail policy a failed item fails the run: wait() raises RunFailed with the
    reason of its Failed condition and its "<n> of <m> items failed" message."""
    pool = outside.pool("p", agents=1, agent="slow_start", env=FAST)
    run = await client.submit(pool, [{"n": 1}, {"n": 2, "fail": True}, {"n": 3}])
    with pytest.raises(RunFailed) as failed:
        await run.wait(timeout=60)
    assert failed.value.reason == "ItemsFailed"
    assert failed.value.message == "1 of 3 items failed"
    assert failed.value.status.failed == 1


async def test_cast_hands_an_item_to_an_agent_without_a_run(
    client: Client, outside: Outside
) -> None:
    """``cast`` returns once an agent took the item, naming the agent, with no PoolRun made;
    the agent stays busy with the item until it reports it done, then goes back."""
    pool = outside.pool("p", agents=1, agent="slow_start", env=FAST)
    agent = await client.cast(pool, {"note": "fire and forget", "workSeconds": 3})
    pods = outside.core.list_namespaced_pod(outside.namespace).items
    assert agent in {pod.metadata.name for pod in pods}
    with pytest.raises(PoolExhausted) as busy:
        await client.cast(pool, {"note": "another"}, wait=False)
    assert busy.value.reason == "PoolExhausted"
    assert outside.objects("poolruns") == []
    await asyncio.to_thread(outside.returned, pool, 1, 60)


async def test_submit_refuses_a_spec_the_models_refuse(client: Client, outside: Outside) -> None:
    """A spec that cannot be a PoolRun is refused before anything is created."""
    with pytest.raises(AgentpoolError) as invalid:
        await client.submit("p", [1, 2], cap=0)
    assert invalid.value.reason == "Invalid"
    assert "cap" in invalid.value.message
    with pytest.raises(AgentpoolError):
        await client.submit("p", [1], source={"http": {"url": "http://x"}})
    assert outside.objects("poolruns") == []


async def test_submitted_runs_are_deleted_an_hour_after_they_end_unless_told_otherwise(
    client_cluster: ClientCluster, client: Client, outside: Outside
) -> None:
    """A run submitted without a ttl gets ttlSecondsAfterFinished of an hour, so runs from
    programs and shells do not pile up forever; a ttl given wins, and a client whose settings
    name no default ttl keeps its runs, as a PoolRun applied with kubectl is kept."""
    hour = await client.submit("p", [1], name="default-ttl")
    given = await client.submit("p", [1], name="given-ttl", ttl_seconds_after_finished=60)
    handle = client_cluster.handle
    keeping = ClientSettings(run_ttl_seconds_after_finished=None)
    async with Client.from_kubeconfig(
        handle.kubeconfig, handle.context, namespace=outside.namespace, settings=keeping
    ) as kept_client:
        kept = await kept_client.submit("p", [1], name="kept")
    ttls = {
        run["metadata"]["name"]: run["spec"].get("ttlSecondsAfterFinished")
        for run in outside.objects("poolruns")
    }
    assert ttls == {hour.name: 3600, given.name: 60, kept.name: None}
