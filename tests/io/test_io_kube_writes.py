"""The API write counter (``agentpool_api_writes_total`` and ``Kube.writes``) counts the writes
the API server got: one it answered, with an object or an error, counts; one that never reached
it (the connection refused or timed out) does not, although the operator tried to send it."""

from __future__ import annotations

import json
from typing import Any

import kubernetes
import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from agentpool.io.kube import Conflict, Kube


class Answer:
    """What the client's call returns with ``_preload_content=False``: the bytes it was sent."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = json.dumps(body).encode()
        self.released = False

    def read(self) -> bytes:
        return self.body

    def release_conn(self) -> None:
        self.released = True


class Pods:
    """CoreV1Api whose pod creates fail as scripted: an exception to raise, or None to succeed
    (answering the pod as the API server would, with its creation time)."""

    def __init__(self, fault: BaseException | None) -> None:
        self.fault = fault
        self.answers: list[Answer] = []

    def create_namespaced_pod(self, namespace: str, body: dict[str, Any], **_: Any) -> Any:
        if self.fault is not None:
            raise self.fault
        created = {**body, "metadata": {**body["metadata"], "creationTimestamp": CREATED}}
        self.answers.append(Answer(created))
        return self.answers[-1]


CREATED = "2026-12-02T04:01:46Z"


def kube_with(fault: BaseException | None) -> Kube:
    kube = Kube(kubernetes.client.ApiClient(kubernetes.client.Configuration()))
    kube._core = Pods(fault)
    return kube


async def test_a_write_the_api_server_answered_is_counted() -> None:
    kube = kube_with(None)
    await kube.create_pod("ns", {"metadata": {"name": "a"}})
    assert kube.writes["create", "pods"] == 1


async def test_a_created_pod_is_the_object_the_api_server_sent() -> None:
    """The pod a create returns is the API server's JSON as it came (the same form a watch
    event brings, timestamps included), and the connection goes back to the pool."""
    kube = kube_with(None)
    pod = await kube.create_pod("ns", {"metadata": {"name": "a"}, "spec": {"nodeName": None}})
    assert pod == {
        "metadata": {"name": "a", "creationTimestamp": CREATED},
        "spec": {"nodeName": None},
    }
    assert all(answer.released for answer in kube._core.answers)


async def test_a_write_the_api_server_refused_is_counted() -> None:
    kube = kube_with(ApiException(status=409, reason="AlreadyExists"))
    with pytest.raises(Conflict):
        await kube.create_pod("ns", {"metadata": {"name": "a"}})
    assert kube.writes["create", "pods"] == 1


async def test_a_write_that_never_reached_the_api_server_is_not_counted() -> None:
    lost = urllib3.exceptions.MaxRetryError(None, "/api/v1/pods", "connect timed out")  # type: ignore[arg-type]
    kube = kube_with(lost)
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        await kube.create_pod("ns", {"metadata": {"name": "a"}})
    assert kube.writes["create", "pods"] == 0


class Secrets:
    """CoreV1Api whose Secret deletes answer as scripted, recording what each asked."""

    def __init__(self, status: int | None) -> None:
        self.status = status
        self.asked: list[tuple[str, str, Any]] = []

    def delete_namespaced_secret(self, name: str, namespace: str, body: Any, **_: Any) -> None:
        self.asked.append((namespace, name, body))
        if self.status is not None:
            raise ApiException(status=self.status, reason="scripted")


@pytest.mark.parametrize("status", [None, 404, 409])
async def test_a_secret_delete_may_name_the_very_secret(status: int | None) -> None:
    """A lease's token Secret is deleted by name, or with its uid as a precondition so that one
    made since under the same name stays; one already gone, or made since, is no error."""
    kube = Kube(kubernetes.client.ApiClient(kubernetes.client.Configuration()))
    kube._core = secrets = Secrets(status)
    await kube.delete_secret("ns", "chat-lease-token")
    await kube.delete_secret("ns", "chat-lease-token", uid="s-1")
    assert secrets.asked == [
        ("ns", "chat-lease-token", None),
        ("ns", "chat-lease-token", {"preconditions": {"uid": "s-1"}}),
    ]
