"""The client's calls and casts go through the operator's gateway: found from the namespace's
ConfigMap, or where the program says, as the kubeconfig's user or with a token it is given."""

from __future__ import annotations

import asyncio

import pytest
from client_support import FAST, ClientCluster, Outside

from agentpool.client import AgentpoolError, Client, PoolExhausted
from agentpool.gateway import tls
from cluster import wait_for

pytestmark = pytest.mark.cluster


async def test_a_full_pool_says_when_to_try_again(client: Client, outside: Outside) -> None:
    """With the only agent busy, a call that will not wait raises PoolExhausted with the
    gateway's Retry-After; no lease or run is made for any call."""
    pool = outside.pool("p", agents=1, agent="slow_start", env=FAST)
    # Long enough that the pool's status, written about once a second, says it is busy first.
    busy = asyncio.create_task(client.call(pool, {"workSeconds": 60}))
    await asyncio.to_thread(wait_for, lambda: outside.available(pool) == 0, 30)
    assert not busy.done()
    with pytest.raises(PoolExhausted) as full:
        await client.call(pool, {"n": 1}, wait=False)
    assert full.value.reason == "PoolExhausted"
    assert full.value.retry_after is not None
    assert full.value.retry_after >= 1
    assert outside.leases() == []
    assert outside.objects("poolruns") == []
    busy.cancel()


async def test_a_namespace_without_a_pool_has_no_gateway_to_find(
    client_cluster: ClientCluster, outside: Outside
) -> None:
    """Where no pool was ever made there is no ConfigMap, and the client says what to do."""
    handle = client_cluster.handle
    async with Client.from_kubeconfig(
        handle.kubeconfig, handle.context, namespace=outside.namespace
    ) as client:
        with pytest.raises(AgentpoolError) as missing:
            await client.call("p", 1)
    assert missing.value.reason == "NoGateway"
    assert "gateway_url" in missing.value.message


async def test_a_gateway_given_by_url_with_a_service_accounts_token(
    client_cluster: ClientCluster, outside: Outside
) -> None:
    """A program that names the gateway, its CA and a token is served as that token's holder:
    refused while the ServiceAccount holds no grant."""
    pool = outside.pool("p", agents=1)
    found = outside.core.read_namespaced_config_map("agentpool-gateway", outside.namespace)
    outside.core.create_namespaced_service_account(
        outside.namespace, {"metadata": {"name": "stranger"}}
    )
    token = outside.core.create_namespaced_service_account_token(
        "stranger", outside.namespace, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    handle = client_cluster.handle
    async with Client.from_kubeconfig(
        handle.kubeconfig,
        handle.context,
        namespace=outside.namespace,
        gateway_url=found.data["url"],
        gateway_ca=found.data["ca.crt"].encode(),
        gateway_token=token,
    ) as client:
        with pytest.raises(AgentpoolError) as refused:
            await client.call(pool, 1)
    assert refused.value.reason == "Forbidden"
    assert f"system:serviceaccount:{outside.namespace}:stranger" in refused.value.message


async def test_a_client_follows_the_gateway_its_configmap_names_now(
    client_cluster: ClientCluster, outside: Outside
) -> None:
    """A gateway whose certificate was renewed under a new CA (or that moved) is found again from
    the ConfigMap: a call refused at the handshake, so never sent, is sent once more where the
    ConfigMap says now; while the ConfigMap names a CA that does not sign it, the call fails
    saying so."""
    pool = outside.pool("p", agents=1)
    published = dict(
        outside.core.read_namespaced_config_map("agentpool-gateway", outside.namespace).data
    )

    def publish(data: dict[str, str]) -> None:
        outside.core.patch_namespaced_config_map(
            "agentpool-gateway", outside.namespace, {"data": data}
        )

    publish({**published, "ca.crt": tls.fresh(("localhost",)).ca_pem.decode()})
    handle = client_cluster.handle
    async with Client.from_kubeconfig(
        handle.kubeconfig, handle.context, namespace=outside.namespace
    ) as client:
        with pytest.raises(AgentpoolError) as untrusted:
            await client.call(pool, {"n": 1})
        assert untrusted.value.reason == "GatewayUnreachable"
        assert "certificate verify failed" in untrusted.value.message
        publish(published)
        assert await client.call(pool, {"n": 2}) == {"n": 2}
    # A streamed call finds it again the same way.
    publish({**published, "ca.crt": tls.fresh(("localhost",)).ca_pem.decode()})
    async with Client.from_kubeconfig(
        handle.kubeconfig, handle.context, namespace=outside.namespace
    ) as client:
        with pytest.raises(AgentpoolError) as untrusted:
            await anext(client.stream(pool, {"n": 3}))
        assert "certificate verify failed" in untrusted.value.message
        publish(published)
        assert [part async for part in client.stream(pool, {"n": 4})] == [{"n": 4}]
