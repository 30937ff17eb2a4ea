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

from agentpool.io.kube import Conflict, Kube, Refused


class Answer:
    """What the client's ``call_api`` returns: the status and bytes the API server sent."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.reason = "scripted"
        self.data = json.dumps(body).encode()
        self.headers: dict[str, str] = {}

    def read(self) -> bytes:
        return self.data

    def getheaders(self) -> dict[str, str]:
        return {}


class Client(kubernetes.client.ApiClient):
    """An API client whose pod creates answer as scripted: an exception to raise, a Status
    with an HTTP error, or the pod as the API server makes it (with its creation time). It
    records the URL of each request."""

    def __init__(self, fault: BaseException | None = None, refusal: Answer | None = None) -> None:
        super().__init__(kubernetes.client.Configuration())
        self.fault = fault
        self.refusal = refusal
        self.urls: list[str] = []

    def call_api(
        self, method: str, url: str, header_params: Any = None, body: Any = None, **_: Any
    ) -> Answer:
        self.urls.append(url)
        if self.fault is not None:
            raise self.fault
        if self.refusal is not None:
            return self.refusal
        pod = json.loads(body) if isinstance(body, str | bytes) else body
        return Answer(201, {**pod, "metadata": {**pod["metadata"], "creationTimestamp": CREATED}})


CREATED = "2026-12-02T04:01:46Z"


def kube_with(fault: BaseException | None = None, refusal: Answer | None = None) -> Kube:
    return Kube(Client(fault, refusal))


async def test_a_write_the_api_server_answered_is_counted() -> None:
    kube = kube_with(None)
    await kube.create_pod("ns", {"metadata": {"name": "a"}})
    assert kube.writes["create", "pods"] == 1


async def test_a_created_pod_is_the_object_the_api_server_sent() -> None:
    """The pod a create returns is the API server's JSON as it came (the same form a watch
    event brings, timestamps included)."""
    kube = kube_with(None)
    pod = await kube.create_pod("ns", {"metadata": {"name": "a"}, "spec": {"nodeName": None}})
    assert pod == {
        "metadata": {"name": "a", "creationTimestamp": CREATED},
        "spec": {"nodeName": None},
    }


async def test_a_write_the_api_server_refused_is_counted() -> None:
    kube = kube_with(refusal=Answer(409, {"kind": "Status", "reason": "AlreadyExists"}))
    with pytest.raises(Conflict):
        await kube.create_pod("ns", {"metadata": {"name": "a"}})
    assert kube.writes["create", "pods"] == 1


async def test_a_write_that_never_reached_the_api_server_is_not_counted() -> None:
    lost = urllib3.exceptions.MaxRetryError(None, "/api/v1/pods", "connect timed out")  # type: ignore[arg-type]
    kube = kube_with(lost)
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        await kube.create_pod("ns", {"metadata": {"name": "a"}})
    assert kube.writes["create", "pods"] == 0


TYPO = {"metadata": {"name": "a"}, "spec": {"containers": [{"name": "agent", "comand": ["x"]}]}}


async def test_a_pod_with_a_typo_reaches_the_api_server_with_unknown_fields_refused() -> None:
    """The body goes to the API server as written, with fieldValidation=Strict, so the server
    (not the client's models) judges a template's typo; a dry run says dryRun=All."""
    client = Client()
    kube = Kube(client)
    await kube.create_pod("ns", TYPO)
    await kube.create_pod("ns", TYPO, dry_run=True)
    assert client.urls[0].endswith("/api/v1/namespaces/ns/pods?fieldValidation=Strict")
    assert client.urls[1].endswith("?fieldValidation=Strict&dryRun=All")


@pytest.mark.parametrize("status", [400, 403, 422])
async def test_a_refused_pod_carries_the_api_servers_own_words(status: int) -> None:
    message = (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
        'unknown field "spec.containers[0].comand"'
    )
    kube = kube_with(refusal=Answer(status, {"kind": "Status", "message": message}))
    with pytest.raises(Refused) as refused:
        await kube.create_pod("ns", TYPO)
    assert str(refused.value) == message


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
