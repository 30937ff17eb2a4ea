"""kopf against the local API server: a small operator with create, update and delete handlers,
a finalizer, a timer, a daemon and events runs without an error or a retry in its log, and
recovers when its watch falls past the server's history (an in-stream 410)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import kopf
import pytest
from kubernetes import client as k8s

from agentpool.local import eventloop
from agentpool.local.apiserver import ServerThread
from agentpool.local.kubeconfig import ApiAccess
from conftest import GROUP, PLURAL, VERSION, Cluster, eventually

# kopf's notice that it cannot install signal handlers off the main thread, which is by design here.
_THREAD_NOTICE = "OS signals are ignored: running not in the main thread"


@dataclass
class Seen:
    """What the test operator's handlers observed, shared with the test thread."""

    created: list[str] = field(default_factory=list)
    updated: list[tuple[str, Any]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    ticks: dict[str, int] = field(default_factory=dict)
    daemons: set[str] = field(default_factory=set)


class Capture(logging.Handler):
    """Collects kopf's log records so the test can look for warnings, errors and retries."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def problems(self) -> list[str]:
        bad = []
        for record in self.records:
            text = record.getMessage()
            if text.startswith(_THREAD_NOTICE):
                continue
            if record.levelno >= logging.WARNING or "retry" in text.lower():
                bad.append(f"{record.levelname} {record.name}: {text}")
        return bad


def _registry(access: ApiAccess, namespace: str, seen: Seen) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(
            server=access.server,
            ca_data=access.ca_pem,
            scheme="Bearer",
            token=access.token,
            default_namespace=namespace,
        )

    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry)
    def created(name: str, body: Any, **_: Any) -> None:
        seen.created.append(name)
        kopf.info(body, reason="Created", message=f"widget {name} seen")

    @kopf.on.update(GROUP, VERSION, PLURAL, field="spec.replicas", registry=registry)
    def updated(name: str, new: Any, **_: Any) -> None:
        seen.updated.append((name, new))

    @kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry)
    def deleted(name: str, **_: Any) -> None:
        seen.deleted.append(name)

    @kopf.timer(GROUP, VERSION, PLURAL, interval=0.3, registry=registry)
    def tick(name: str, **_: Any) -> None:
        seen.ticks[name] = seen.ticks.get(name, 0) + 1

    @kopf.daemon(GROUP, VERSION, PLURAL, cancellation_polling=0.1, registry=registry)
    async def watch_over(name: str, stopped: Any, **_: Any) -> None:
        seen.daemons.add(name)
        await stopped.wait()

    return registry


@dataclass
class Operator:
    """The test operator, running in its own thread and event loop."""

    seen: Seen
    capture: Capture
    namespace: str
    server: ServerThread | None


@pytest.fixture
def operator(cluster: Cluster, namespace: str, widgets: str) -> Iterator[Operator]:
    server = cluster.local
    seen = Seen()
    capture = Capture()
    logger = logging.getLogger("kopf")
    logger.addHandler(capture)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    settings = kopf.OperatorSettings()
    settings.process.ultimate_exiting_timeout = None
    settings.persistence.consistency_timeout = 5
    settings.watching.server_timeout = 30
    stop = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        # The TLS connections kopf closes on its way out are closed for good before the loop
        # ends: each waits for the server's close_notify.
        try:
            eventloop.run(
                kopf.operator(
                    registry=_registry(cluster.access, namespace, seen),
                    settings=settings,
                    standalone=True,
                    namespaces=[namespace],
                    stop_flag=stop,
                )
            )
        except BaseException as error:
            failure.append(error)

    thread = threading.Thread(target=run, name="kopf-test-operator", daemon=True)
    thread.start()
    try:
        yield Operator(seen, capture, namespace, server)
    finally:
        stop.set()
        thread.join(30)
        logger.removeHandler(capture)
        logger.setLevel(old_level)
    assert not thread.is_alive(), "the operator did not stop"
    assert not failure, failure


def _widget(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"replicas": replicas},
    }


def test_kopf_operator_runs_cleanly(operator: Operator, api_client: k8s.ApiClient) -> None:
    """Create, update, timer, daemon, events, finalizer and delete work with nothing retried."""
    custom = k8s.CustomObjectsApi(api_client)
    ns = operator.namespace
    seen = operator.seen
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, _widget("k1", 1))
    eventually(lambda: "k1" in seen.created, timeout=30, what="the create handler")
    finalizers = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "k1")["metadata"]
    assert finalizers.get("finalizers"), "kopf should have added its finalizer"
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, "k1", {"spec": {"replicas": 2}}
    )
    eventually(lambda: ("k1", 2) in seen.updated, timeout=30, what="the update handler")
    eventually(lambda: seen.ticks.get("k1", 0) >= 2, timeout=30, what="the timer to fire twice")
    eventually(lambda: "k1" in seen.daemons, timeout=30, what="the daemon to start")
    core = k8s.CoreV1Api(api_client)
    eventually(
        lambda: any(
            e.reason == "Created" and e.involved_object.name == "k1"
            for e in core.list_namespaced_event(ns).items
        ),
        timeout=30,
        what="kopf's event to be posted",
    )
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "k1")
    eventually(lambda: "k1" in seen.deleted, timeout=30, what="the delete handler")

    def gone() -> bool:
        items = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]
        return not items

    eventually(gone, timeout=30, what="the finalizer to be released")
    assert operator.capture.problems() == []


@pytest.mark.local_only("compacts the local API server's watch history to expire a watch")
def test_kopf_recovers_from_an_expired_watch(operator: Operator, api_client: k8s.ApiClient) -> None:
    """After a compaction expires its watches (410 in-stream), kopf lists again and carries on."""
    custom = k8s.CustomObjectsApi(api_client)
    ns = operator.namespace
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, _widget("before", 1))
    eventually(lambda: "before" in operator.seen.created, timeout=30, what="the first widget")
    server = operator.server
    assert server is not None
    lists = server.counts().get(("list", PLURAL), 0)
    server.compact()
    eventually(
        lambda: server.counts().get(("list", PLURAL), 0) > lists,
        timeout=30,
        what="kopf to list again after the 410",
    )
    restarted = [
        r
        for r in operator.capture.records
        if r.getMessage().startswith("Restarting the watch-stream for widgets")
    ]
    assert restarted, "kopf should have restarted its widget watch after the 410"
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, _widget("after", 1))
    eventually(lambda: "after" in operator.seen.created, timeout=30, what="the second widget")
    for name in ("before", "after"):
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
    eventually(
        lambda: {"before", "after"} <= set(operator.seen.deleted), timeout=30, what="both deletions"
    )
    assert operator.capture.problems() == []
