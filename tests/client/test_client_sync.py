"""``agentpool.client.sync``: the same client for code that does not ``await``.

The facade runs the client on a loop of its own thread, so these tests are plain functions, as a
script or a notebook cell would be.
"""

from __future__ import annotations

import pytest
from client_support import FAST, ClientCluster, Outside

from agentpool.client import CallFailed, PoolExhausted
from agentpool.client.sync import Client
from cluster import wait_for

pytestmark = pytest.mark.cluster


class Boom(Exception):
    """What the holder's block raises."""


def _client(client_cluster: ClientCluster, outside: Outside) -> Client:
    handle = client_cluster.handle
    return Client.from_kubeconfig(handle.kubeconfig, handle.context, namespace=outside.namespace)


def test_the_sync_client_leases_calls_and_submits(
    client_cluster: ClientCluster, outside: Outside
) -> None:
    """A ``with`` lease serves several calls; ``call``, ``submit`` with ``results()`` and
    ``pool_status`` answer as the async client's do, and errors are the same types."""
    pool = outside.pool("p", agents=1, agent="slow_start", env=FAST)
    with _client(client_cluster, outside) as client:
        with client.lease(pool, ttl=60) as agent:
            lengths = [agent.invoke({"n": n})["length"] for n in range(3)]
        assert lengths == [len('{"n":0}')] * 3
        assert client.call(pool, {"n": 9})["length"] == len('{"n":9}')
        with pytest.raises(CallFailed) as failed:
            client.call(pool, {"fail": True})
        assert failed.value.reason == "HandlerError"
        run = client.submit(pool, [{"id": f"i{n}"} for n in range(20)], item_id="id", cap=2)
        ids = sorted(result.id for result in run.results())
        assert ids == sorted(f"i{n}" for n in range(20))
        assert run.wait().succeeded == 20
        # The pool's status is written a moment after its agent comes back from the run.
        wait_for(lambda: client.pool_status(pool).state == "Ready", 30, message="pool Ready")
    outside.returned(pool, 1)


def test_a_sync_block_that_raises_gives_its_agent_back(
    client_cluster: ClientCluster, outside: Outside
) -> None:
    """The block's exception comes out unchanged and the agent is back soon after, as with the
    async client; a second lease while the first is held meets a full pool."""
    pool = outside.pool("p", agents=1)

    def holder(client: Client) -> None:
        with client.lease(pool, ttl=300):
            with pytest.raises(PoolExhausted), client.lease(pool, wait=False):
                pass
            raise Boom

    with _client(client_cluster, outside) as client, pytest.raises(Boom):
        holder(client)
    outside.returned(pool, 1, 10)
