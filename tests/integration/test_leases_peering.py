"""Two replicas in one kopf peering: a Bound lease lives through the hand-over both ways.

A replica of higher priority joins and the first one pauses; later it leaves and the first
resumes. The lease stays Bound to its one agent throughout, its holder renewing it, and only
the replica that acts drives it: the paused one neither expires it nor deletes its token Secret.
This needs a cluster of its own, with kopf's peering CRDs and no operator but the two replicas,
so it runs on a local cluster only.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from operator_support import REPO, Api, OperatorProcess, pool_spec

from agentpool.api.conditions import format_micro_time

PEERING = "agentpool"
TTL = 4
#: What kopf logs as a replica pauses for a peer that outranks it, and as it resumes.
PAUSING = "Pausing operations in favour of"
RESUMING = "Resuming operations after the pause"


class Replica(OperatorProcess):
    """An operator replica in the peering; kopf knows it as host-pid."""

    @property
    def identity(self) -> str:
        assert self.process is not None
        return f"{socket.gethostname()}-{self.process.pid}"


@pytest.fixture
def peered(
    cluster_alone: tuple[Api, list[str], Path],
) -> tuple[Api, list[str], Path]:
    """The test's own cluster, with kopf's peering CRDs and a ClusterKopfPeering."""
    api = cluster_alone[0]
    extensions = kubernetes.client.ApiextensionsV1Api(api.client)
    crds = (REPO / "charts/agentpool/crds/kopf-peerings.yaml").read_text()
    for crd in yaml.safe_load_all(crds):
        if crd:
            extensions.create_custom_resource_definition(crd)
    peering = {
        "apiVersion": "kopf.dev/v1",
        "kind": "ClusterKopfPeering",
        "metadata": {"name": PEERING},
    }
    wait_for(lambda: created(api.custom, peering), "the peering object")
    return cluster_alone


def created(custom: Any, peering: dict[str, Any]) -> bool:
    """Create the peering object once its CRD serves; whether it is there."""
    try:
        custom.create_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", peering)
    except kubernetes.client.exceptions.ApiException as error:
        return error.status == 409
    return True


def wait_for(predicate: Any, message: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"waited {timeout:g}s for {message}")


def priorities(api: Api) -> dict[str, int]:
    peering = api.custom.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", PEERING)
    return {name: int(info["priority"]) for name, info in (peering.get("status") or {}).items()}


class Holder:
    """The lease's holder, renewing it every ttl/4 from a thread of its own as the client's
    lease does, and noting on each renewal what the lease's status said and whether its token
    Secret was there."""

    def __init__(self, api: Api, namespace: str, lease: str) -> None:
        self.api, self.namespace, self.lease = api, namespace, lease
        self.seen: list[tuple[object, object, bool]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, daemon=True)

    def __enter__(self) -> Holder:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _renew(self) -> None:
        while not self._stop.is_set():
            renewal = {"renewTime": format_micro_time(time.time())}
            self.api.patch_spec("agentleases", self.namespace, self.lease, renewal)
            status = self.api.status("agentleases", self.namespace, self.lease)
            try:
                self.api.core.read_namespaced_secret(f"{self.lease}-lease-token", self.namespace)
                secret = True
            except kubernetes.client.exceptions.ApiException:
                secret = False
            self.seen.append((status.get("phase"), status.get("agent"), secret))
            self._stop.wait(TTL / 4)


def test_a_bound_lease_outlives_the_hand_over_between_replicas(
    peered: tuple[Api, list[str], Path],
) -> None:
    """The lease is Bound under the first replica; a replica that outranks it joins and the
    first pauses; the lease stays Bound past several terms, renewed, with its Secret; the second
    leaves and the first resumes, and still the lease is Bound to the same agent; once its
    holder stops renewing, it expires."""
    api, connection, directory = peered
    first = Replica([*connection, "--peering", PEERING, "--priority", "1"], directory / "first.log")
    first.start()
    second: Replica | None = None
    try:
        namespace = api.new_namespace()
        api.create("agentpools", namespace, "p", pool_spec(minSize=1, maxSize=1))
        api.create("agentleases", namespace, "chat", {"poolRef": {"name": "p"}, "ttlSeconds": TTL})
        wait_for(
            lambda: api.status("agentleases", namespace, "chat").get("phase") == "Bound",
            "the lease Bound",
        )
        with Holder(api, namespace, "chat") as holder:
            # A replica that outranks the first joins.
            second = Replica(
                [*connection, "--peering", PEERING, "--priority", "2"], directory / "second.log"
            )
            second.start()
            seen = wait_for(
                lambda: (found := priorities(api)).get(second.identity) and found,
                "the second replica in the peering",
            )
            assert (seen[first.identity], seen[second.identity]) == (1, 2)
            wait_for(lambda: PAUSING in first.log(), "the first replica to pause")
            # Three terms while the second acts, then two after the first resumed.
            paused = len(holder.seen)
            wait_for(lambda: len(holder.seen) >= paused + 12, "12 renewals", timeout=60)
            resumes = first.log().count(RESUMING)
            second.stop()
            wait_for(lambda: first.log().count(RESUMING) > resumes, "the first to resume")
            resumed = len(holder.seen)
            wait_for(lambda: len(holder.seen) >= resumed + 8, "8 renewals", timeout=60)
        assert {phase for phase, _, _ in holder.seen} == {"Bound"}
        assert len({agent for _, agent, _ in holder.seen}) == 1, holder.seen
        assert all(secret for _, _, secret in holder.seen), holder.seen
        wait_for(
            lambda: api.status("agentleases", namespace, "chat").get("phase") == "Expired",
            "the lease to expire once no longer renewed",
            timeout=3 * TTL + 30,
        )
    finally:
        if second is not None:
            second.stop()
        first.stop()
