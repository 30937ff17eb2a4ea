"""The one module through which the operator talks to the Kubernetes API.

It wraps the official ``kubernetes`` client, whose calls block, and runs each call in a worker
thread of its own pool (as many as the client's connections) so the operator's event loop never
stalls. In the operator (:meth:`Kube.open_session`), the raw calls of :meth:`Kube.request` (a
lease's token Secret and every status write among them) go over an aiohttp session on the event
loop instead, with the client's own server, TLS settings and credentials: a burst of 32 leases
spent a fifth to a third of the operator's CPU less so, without 64 worker threads taking the
interpreter's lock in turn. Everything it returns is a plain dict in wire
form (camelCase), so the rest of the operator deals in values, not client objects. It also counts
the writes it makes, by verb and resource, for the operator's metrics.

kopf does its own watching and its own bookkeeping patches; this module covers the calls the
operator makes on its own behalf: pods, the per-pool token Secret, ConfigMaps for run sources and
results, and status patches of the three custom resources; and, over the session, one watch of
its own (:meth:`Kube.watch`), which the leases follow without kopf's per-event handling.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import json
import logging
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast

import aiohttp
import kubernetes
from kubernetes.client.exceptions import ApiException

from agentpool import GROUP, VERSION, metrics
from agentpool.api.raw import (
    RawAccessReviewStatus,
    RawBody,
    RawEvent,
    RawReviewedUser,
    RawTokenReviewStatus,
    raw_body,
    raw_events,
    raw_items,
)
from agentpool.io.connection import (
    CALLS_AT_ONCE,
    Connection,
    Transport,
    make_api_client,
    transport,
)
from agentpool.pool.backoff import retry_delay

T = TypeVar("T")

MERGE_PATCH = "application/merge-patch+json"
#: (connect, read) seconds for every call: a request the API server never answers fails and is
#: retried by its caller, instead of holding one of the few worker threads for good.
TIMEOUT = (5.0, 60.0)
#: How long the session reuses the credentials the client's refresh hook last gave.
CREDENTIALS_SECONDS = 1.0
SESSION_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=TIMEOUT[0], sock_read=TIMEOUT[1])
#: Tries of a status write that meets 409s or 5xx, backing off from base to cap (about 5 s in
#: all) before the error reaches the daemon, whose restart is for the unexpected only.
STATUS_ATTEMPTS = 8
RETRY_BASE_SECONDS, RETRY_MAX_SECONDS = 0.05, 2.0
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
#: Answers to a write that no retry of the same body can change: bad, forbidden, invalid.
REFUSED_STATUSES = frozenset({400, 403, 422})
#: How long the server keeps one watch request open, and how long the client waits for a line
#: (bookmarks come about once a minute), as kopf's watches are set.
WATCH_SECONDS, WATCH_READ_SECONDS = 300, 330
#: A watch that fails, or ends having given nothing, is tried again after base, 2 base, ...
#: up to cap seconds.
WATCH_RETRY_BASE_SECONDS, WATCH_RETRY_MAX_SECONDS = 1.0, 30.0

#: One event of :meth:`Kube.watch`: ADDED, MODIFIED or DELETED, or None for an object listed.
WatchEvent = tuple[str | None, RawBody]

log = logging.getLogger(__name__)


class ObjectNotFound(Exception):
    """The object asked for does not exist: the API server's 404 to the operator's own reads and
    writes. (``agentpool.client.NotFound`` is another idea: the Python client's error for a pool
    or run its user named that does not exist.)"""


class Conflict(Exception):
    """The object already exists, or changed since it was read."""


class Refused(Exception):
    """The API server refused a write as invalid or forbidden; the message is its own words
    (``Pod "x" is invalid: spec.containers[0].name: ...``), for the user to act on."""


def server_message(error: ApiException) -> str:
    """The message of the Status the API server answered ``error`` with, else its HTTP reason."""
    try:
        status = json.loads(error.body or b"null")
    except ValueError:
        status = None
    message = status.get("message") if isinstance(status, dict) else None
    return str(message or f"{error.status} {error.reason}")


class Kube:
    """Async access to the resources the operator reads and writes."""

    def __init__(self, api_client: Any) -> None:
        # The client's generated methods are loosely typed; the boundary is kept to this class.
        self._client: Any = api_client
        self._core: Any = kubernetes.client.CoreV1Api(api_client)
        self._custom: Any = kubernetes.client.CustomObjectsApi(api_client)
        self.writes: collections.Counter[tuple[str, str]] = collections.Counter()
        self._counting = threading.Lock()
        # Threads of its own, as many as the client's connections: the event loop's default
        # executor has CPUs + 4, fewer than the calls a burst of leases or pods makes at once.
        self._threads = ThreadPoolExecutor(CALLS_AT_ONCE, thread_name_prefix="kube")
        self._session: aiohttp.ClientSession | None = None
        # The watches' own: each holds a connection for good, which the calls must not wait for.
        self._watching: aiohttp.ClientSession | None = None
        self._transport: Transport | None = None
        self._auth: tuple[float, dict[str, str]] | None = None

    @classmethod
    def connect(cls, connection: Connection) -> Kube:
        return cls(make_api_client(connection))

    async def open_session(self) -> None:
        """Send :meth:`request`'s calls over an aiohttp session on the running event loop from
        now on, until :meth:`aclose`; a connection through a proxy keeps the worker threads."""
        self._transport = transport(self._client.configuration)
        if self._transport is not None and self._session is None:
            ssl = self._transport.ssl or False
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=ssl, limit=CALLS_AT_ONCE),
                timeout=SESSION_TIMEOUT,
                trust_env=False,
            )
            self._watching = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=ssl, limit=0), trust_env=False
            )

    async def aclose(self) -> None:
        """:meth:`close`, the sessions of :meth:`open_session` first."""
        for session in (self._session, self._watching):
            if session is not None:
                await session.close()
        self._session = self._watching = None
        self.close()

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    def _count_write(self, verb: str, resource: str) -> None:
        with self._counting:
            self.writes[verb, resource] += 1
        metrics.API_WRITES.labels(verb, resource).inc()

    async def _call(self, verb: str, resource: str, fn: Callable[[], T]) -> T:
        def sent() -> T:
            # A write counts once the API server answered it, with an object or an error: one
            # cancelled while queued, or whose connection failed, never reached it.
            if verb in ("get", "list"):
                return fn()
            try:
                result = fn()
            except ApiException:
                self._count_write(verb, resource)
                raise
            self._count_write(verb, resource)
            return result

        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._threads, contextvars.copy_context().run, sent)
        except ApiException as error:
            if error.status == 404:
                raise ObjectNotFound(f"{resource}: {error.reason}") from None
            if error.status == 409:
                raise Conflict(f"{resource}: {error.reason}") from None
            raise

    @staticmethod
    def _unread(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[[], None]:
        """``call`` for a write whose answer nobody reads: the object the API server sends back
        is drained as bytes, not decoded into models (for a run's status or a result ConfigMap
        that is hundreds of KiB, and the decoding would hold the event loop's lock)."""

        def write() -> None:
            response = call(*args, _preload_content=False, _request_timeout=TIMEOUT, **kwargs)
            try:
                response.read()
            finally:
                response.release_conn()

        return write

    @staticmethod
    def _timed(call: Callable[..., T], *args: Any) -> Callable[[], T]:
        """``call(*args)`` with the timeout every call has."""
        return functools.partial(call, *args, _request_timeout=TIMEOUT)

    async def _plain_call(
        self, verb: str, resource: str, call: Callable[..., Any], *args: Any
    ) -> dict[str, Any]:
        """A typed client call's answer, as the plain dict the API server sent: its JSON decoded
        as it came, never through the client's models. Their round trip (decoded into models,
        then back to a dict) took 1.8 ms of CPU for a created pod against 0.03 ms for its JSON,
        in a worker thread holding the event loop's lock: 18 s of a 10,000-agent start."""

        def sent() -> dict[str, Any]:
            response = call(*args, _preload_content=False, _request_timeout=TIMEOUT)
            try:
                result: dict[str, Any] = json.loads(response.read())
            finally:
                response.release_conn()
            return result

        return await self._call(verb, resource, sent)

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        accept: str = "application/json",
        content_type: str = "application/json",
        query: list[tuple[str, str]] | None = None,
        resource: str | None = None,
        read: bool = True,
    ) -> Any:
        """A raw call for what the typed APIs do not cover (Table output, any manifest), or
        whose body the API server should judge rather than the client's models. ``resource``
        names it in the counts (the path's last segment by default); without ``read`` the
        answer is not decoded (None is returned)."""
        resource = resource or path.rstrip("/").split("/")[-1]
        verb = {"GET": "get", "POST": "create", "PATCH": "patch", "DELETE": "delete"}.get(
            method, method.lower()
        )
        if self._session is not None and self._transport is not None:
            headers = {
                "Accept": accept,
                "Content-Type": content_type,
                # As the client's own calls: the same field manager, and answers not compressed
                # (a run's status answer is not even read).
                "User-Agent": self._client.user_agent,
                "Accept-Encoding": "identity",
            }
            data = None if body is None else json.dumps(body).encode()
            answer = await self._send(
                self._session, self._transport, (verb, resource), method, path, headers, data, query
            )
            return json.loads(answer or b"null") if read else None

        def call() -> Any:
            method_, url, headers, body_, _post = self._client.param_serialize(
                method,
                path,
                query_params=query,
                header_params={"Accept": accept, "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self._client.call_api(
                method_, url, header_params=headers, body=body_, _request_timeout=TIMEOUT
            )
            response.read()
            if response.status >= 400:
                raise ApiException(http_resp=response)
            return json.loads(response.data or b"null") if read else None

        return await self._call(verb, resource, call)

    async def authorization(self) -> dict[str, str]:
        """This client's own credentials as request headers (``Authorization``, if a token):
        what the operator presents when it passes a request on to another replica."""
        return dict(await self._credentials())

    async def _credentials(self) -> dict[str, str]:
        """The client's own credentials (its Authorization header, if any), as it refreshes them
        before each call, but at most every ``CREDENTIALS_SECONDS``: the refresh applies the
        whole kubeconfig again, a tenth of the operator's CPU in a burst of leases when done
        per call, and a token it refreshes is renewed minutes before it expires. The refresh
        runs in a worker thread: it may run an exec plugin or ask an identity provider."""
        now = time.monotonic()
        if self._auth is None or now - self._auth[0] >= CREDENTIALS_SECONDS:

            def refreshed() -> dict[str, str]:
                headers: dict[str, str] = {}
                self._client.update_params_for_auth(headers, [], ["BearerToken"], "", "", None)
                return headers

            loop = asyncio.get_running_loop()
            self._auth = (now, await loop.run_in_executor(self._threads, refreshed))
        return self._auth[1]

    async def _send(
        self,
        session: aiohttp.ClientSession,
        place: Transport,
        counted: tuple[str, str],
        method: str,
        path: str,
        headers: dict[str, str],
        data: bytes | None,
        query: list[tuple[str, str]] | None,
    ) -> bytes:
        """One call over ``session`` to the server at ``place``, counted as ``counted`` (verb,
        resource): the answer's bytes; ObjectNotFound, Conflict, or the ApiException the client
        would raise for any other error status."""
        verb, resource = counted
        async with self._opened(
            session, place, method, path, headers, params=query, data=data
        ) as response:
            answer = await response.read()
        if verb not in ("get", "list"):
            self._count_write(verb, resource)
        if response.status == 404:
            raise ObjectNotFound(f"{resource}: {response.reason}")
        if response.status == 409:
            raise Conflict(f"{resource}: {response.reason}")
        if response.status >= 400:
            raise ApiException(
                status=response.status,
                reason=response.reason,
                body=answer.decode(errors="replace"),
            )
        return answer

    @contextlib.asynccontextmanager
    async def _opened(
        self,
        session: aiohttp.ClientSession,
        place: Transport,
        method: str,
        path: str,
        headers: dict[str, str],
        **options: Any,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """The answer to one request over ``session`` to the server at ``place``, with the
        client's credentials and TLS server name: the one place they are put on a request."""
        headers.update(await self._credentials())
        async with session.request(
            method,
            place.server + path,
            headers=headers,
            server_hostname=place.server_hostname,
            **options,
        ) as response:
            yield response

    @property
    def watches(self) -> bool:
        """Whether :meth:`watch` can be used: the sessions are open."""
        return self._session is not None and self._watching is not None

    async def watch(self, path: str) -> AsyncGenerator[WatchEvent, None]:
        """Every object of the collection at ``path`` (a kind's, in a namespace or in all) as
        listed, with type None, then each change as the server's watch gives it, for as long
        as it is iterated. A watch that ends (its time is up, the connection broke) starts
        again from the last version seen; one the server no longer has (410 Gone) lists the
        collection again, so an object deleted meanwhile is not told of; one that fails, for
        whatever reason, is tried again, backing off, as is one that ends at once. Needs the
        session (:attr:`watches`); the watches have one of their own, as each holds a
        connection for as long as it lasts."""
        if self._session is None or self._watching is None or self._transport is None:
            raise RuntimeError("Kube.watch needs the session: call open_session first")
        session, watching, place = self._session, self._watching, self._transport
        resource = path.rstrip("/").split("/")[-1]
        version: str | None = None
        failures = 0
        while True:
            given, started = False, time.monotonic()
            try:
                if version is None:
                    headers = {"Accept": "application/json", "User-Agent": self._client.user_agent}
                    answer = await self._send(
                        session, place, ("list", resource), "GET", path, headers, None, None
                    )
                    listing = json.loads(answer)
                    version = str(listing["metadata"]["resourceVersion"])
                    for item in listing.get("items") or []:
                        yield None, item
                events = self._watch_from(watching, place, path, version)
                async with contextlib.aclosing(events):
                    async for kind, body in events:
                        if kind == "ERROR" and body.get("code") == 410:
                            version = None  # Gone: too old a version to watch from; list again
                            break
                        if kind == "ERROR":
                            raise ApiException(status=body.get("code"), reason=body.get("message"))
                        given, failures = True, 0
                        version = str(body.get("metadata", {}).get("resourceVersion") or version)
                        if kind in ("ADDED", "MODIFIED", "DELETED"):
                            yield kind, body
            except Exception as error:  # the watch must outlive any failure: it is tried again
                failed: Exception | None = error
            else:
                if given or time.monotonic() - started >= 1.0:
                    continue
                failed = None  # ended at once (Gone again, or not even a bookmark)
            # Not again at once: later each time, until an event comes.
            failures += 1
            delay = retry_delay(
                failures, base=WATCH_RETRY_BASE_SECONDS, cap=WATCH_RETRY_MAX_SECONDS
            )
            if failed is not None:
                log.warning("watching %s failed, again in %g s: %s", path, delay, failed)
            await asyncio.sleep(delay)

    async def _watch_from(
        self, session: aiohttp.ClientSession, place: Transport, path: str, version: str
    ) -> AsyncGenerator[tuple[str, RawBody], None]:
        """The events of one watch request from ``version``, bookmarks and errors included,
        until the server ends it. Lines are split here: one may hold a lease's 64 KiB context,
        past the length aiohttp's own line reader takes."""
        query = [
            ("watch", "true"),
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(WATCH_SECONDS)),
        ]
        headers = {"Accept": "application/json", "User-Agent": self._client.user_agent}
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=TIMEOUT[0], sock_read=WATCH_READ_SECONDS
        )
        async with self._opened(
            session, place, "GET", path, headers, params=query, timeout=timeout
        ) as response:
            if response.status == 410:
                yield "ERROR", cast(RawBody, {"code": 410})
                return
            if response.status >= 400:
                text = (await response.read()).decode(errors="replace")
                raise ApiException(status=response.status, reason=response.reason, body=text)
            rest = b""
            async for chunk in response.content.iter_any():
                *lines, rest = (rest + chunk).split(b"\n")
                for line in lines:
                    if line.strip():
                        event = json.loads(line)
                        yield str(event.get("type")), cast(RawBody, event.get("object") or {})

    async def create_manifest(self, manifest: Mapping[str, Any], namespace: str) -> RawBody:
        """Create any namespaced object from its manifest, as ``kubectl create -f`` would."""
        api_version = manifest["apiVersion"]
        plural = manifest["kind"].lower() + "s"
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        created = await self.request(
            "POST", f"{prefix}/namespaces/{namespace}/{plural}", body=manifest
        )
        return raw_body(created)

    # Pods -----------------------------------------------------------------------------------

    async def create_pod(
        self, namespace: str, body: Mapping[str, Any], *, dry_run: bool = False
    ) -> RawBody:
        """Create a pod, or with ``dry_run`` only ask whether the API server would (it checks
        everything and stores nothing). The body goes to the server as it is, with unknown
        fields refused (``fieldValidation=Strict``, as kubectl sends): the client's own models
        would refuse a template's typo with a dump of their validation, and drop nothing the
        server would; the server names the field. A refusal raises :class:`Refused`."""
        query = [("fieldValidation", "Strict")]
        if dry_run:
            query.append(("dryRun", "All"))
        try:
            created = await self.request(
                "POST", f"/api/v1/namespaces/{namespace}/pods", body=body, query=query
            )
        except ApiException as error:
            if error.status in REFUSED_STATUSES:
                raise Refused(server_message(error)) from None
            raise
        return raw_body(created)

    async def list_pods(self, namespace: str, labels: str) -> list[RawBody]:
        """The pods of ``namespace`` matching the label selector ``labels``, as plain dicts."""
        call = functools.partial(self._core.list_namespaced_pod, label_selector=labels)
        return raw_items(await self._plain_call("list", "pods", call, namespace))

    async def delete_pod(self, namespace: str, name: str) -> None:
        """Delete a pod; one already gone is not an error."""
        with contextlib.suppress(ObjectNotFound):
            await self._call(
                "delete", "pods", self._timed(self._core.delete_namespaced_pod, name, namespace)
            )

    # Events -----------------------------------------------------------------------------------

    async def create_event(self, namespace: str, body: Mapping[str, Any]) -> RawBody:
        """Create a core/v1 Event (those of an :class:`agentpool.io.events.EventSeries`)."""
        path = f"/api/v1/namespaces/{namespace}/events"
        return raw_body(await self.request("POST", path, body=body))

    async def list_events(self, namespace: str, fields: str) -> list[RawEvent]:
        """The core/v1 Events of ``namespace`` matching the field selector ``fields`` (Events
        select on involvedObject.*, reason, source, type), as plain dicts."""
        call = functools.partial(self._core.list_namespaced_event, field_selector=fields)
        return raw_events(await self._plain_call("list", "events", call, namespace))

    # Secrets and ConfigMaps -----------------------------------------------------------------

    async def read_secret(self, namespace: str, name: str) -> RawBody:
        return raw_body(
            await self._plain_call(
                "get", "secrets", self._core.read_namespaced_secret, name, namespace
            )
        )

    async def create_secret(self, namespace: str, body: Mapping[str, Any]) -> RawBody:
        path = f"/api/v1/namespaces/{namespace}/secrets"
        return raw_body(await self.request("POST", path, body=body))

    async def delete_secret(self, namespace: str, name: str, *, uid: str | None = None) -> None:
        """Delete a Secret; one already gone is not an error. With ``uid``, only that very
        Secret: one made since under the same name stays (the API server answers 409)."""
        options = None if uid is None else {"preconditions": {"uid": uid}}
        delete = functools.partial(self._core.delete_namespaced_secret, body=options)
        with contextlib.suppress(ObjectNotFound, Conflict):
            await self._call("delete", "secrets", self._timed(delete, name, namespace))

    async def read_configmap(self, namespace: str, name: str) -> RawBody:
        return raw_body(
            await self._plain_call(
                "get", "configmaps", self._core.read_namespaced_config_map, name, namespace
            )
        )

    async def apply_configmap(
        self, namespace: str, body: Mapping[str, Any], *, exists: bool = False
    ) -> None:
        """Create the ConfigMap, or replace its data if it exists.

        ``exists`` says the caller made it before: its data is patched at once, saving the
        create that would fail.
        """
        name = body["metadata"]["name"]
        data = {"data": body.get("data", {})}

        async def patch() -> None:
            await self._call(
                "patch",
                "configmaps",
                self._unread(self._core.patch_namespaced_config_map, name, namespace, data),
            )

        if exists:
            try:
                await patch()
                return
            except ObjectNotFound:
                pass
        try:
            await self._call(
                "create",
                "configmaps",
                self._unread(self._core.create_namespaced_config_map, namespace, body),
            )
        except Conflict:
            await patch()

    async def patch_secret(self, namespace: str, name: str, data: dict[str, str]) -> None:
        """Merge ``data`` (base64 values) into the Secret's data."""
        await self._call(
            "patch",
            "secrets",
            self._unread(self._core.patch_namespaced_secret, name, namespace, {"data": data}),
        )

    # Reviews: who holds a token, and what they may do ---------------------------------------

    async def review_token(self, token: str) -> RawTokenReviewStatus:
        """The status of the cluster's TokenReview of ``token`` (``authenticated``, ``user``,
        ``error``), for the API server's own audience."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        answer = await self.request(
            "POST", "/apis/authentication.k8s.io/v1/tokenreviews", body=body
        )
        return cast(RawTokenReviewStatus, dict((answer or {}).get("status") or {}))

    async def review_access(
        self, user: RawReviewedUser, attributes: dict[str, str]
    ) -> RawAccessReviewStatus:
        """The status of the cluster's SubjectAccessReview (``allowed``, ``denied``, ``reason``)
        of ``user`` (``user``, ``uid``, ``groups``, ``extra``) for ``attributes`` (a
        ``resourceAttributes``)."""
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {**user, "resourceAttributes": attributes},
        }
        answer = await self.request(
            "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=body
        )
        return cast(RawAccessReviewStatus, dict((answer or {}).get("status") or {}))

    # Custom resources -----------------------------------------------------------------------

    async def get_custom(self, plural: str, namespace: str, name: str) -> RawBody:
        call = self._custom.get_namespaced_custom_object
        obj = await self._call(
            "get", plural, self._timed(call, GROUP, VERSION, namespace, plural, name)
        )
        return raw_body(obj)

    async def list_custom(self, plural: str, namespace: str) -> list[RawBody]:
        call = self._custom.list_namespaced_custom_object
        listed = await self._call(
            "list", plural, self._timed(call, GROUP, VERSION, namespace, plural)
        )
        return raw_items(listed)

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None:
        """Merge-patch a custom object's status. A 409 re-reads the object (ObjectNotFound if it is
        gone) and tries again; a 429 or 5xx tries again after a back-off; `STATUS_ATTEMPTS`
        tries in all. Anything else raises at once."""
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}/{name}/status"
        conflicted = False
        for attempt in range(1, STATUS_ATTEMPTS + 1):
            last = attempt == STATUS_ATTEMPTS
            try:
                if conflicted:
                    await self.get_custom(plural, namespace, name)
                    conflicted = False
                # The answer is not read: a run's status can be hundreds of KiB.
                await self.request(
                    "PATCH",
                    path,
                    body={"status": status},
                    content_type=MERGE_PATCH,
                    resource=f"{plural}/status",
                    read=False,
                )
                return
            except Conflict:
                if last:
                    raise
                conflicted = True
            except ApiException as error:
                if last or error.status not in RETRYABLE_STATUSES:
                    raise
                delay = retry_delay(attempt, base=RETRY_BASE_SECONDS, cap=RETRY_MAX_SECONDS)
                await asyncio.sleep(delay)
            except aiohttp.ClientConnectionError:
                # Refused or dropped before an answer, which the client's connection pool
                # retried three times on its own.
                if last:
                    raise
                delay = retry_delay(attempt, base=RETRY_BASE_SECONDS, cap=RETRY_MAX_SECONDS)
                await asyncio.sleep(delay)

    async def delete_custom(self, plural: str, namespace: str, name: str) -> None:
        with contextlib.suppress(ObjectNotFound):
            call = self._custom.delete_namespaced_custom_object
            await self._call(
                "delete", plural, self._timed(call, GROUP, VERSION, namespace, plural, name)
            )

    async def patch_metadata(
        self,
        plural: str,
        namespace: str,
        name: str,
        metadata: Mapping[str, Any],
        *,
        resource_version: str | None = None,
    ) -> None:
        """Merge-patch a custom object's labels and annotations (a None value removes one).
        With ``resource_version``, only the object as it was then: Conflict if it changed."""
        body: dict[str, Any] = {"metadata": dict(metadata)}
        if resource_version is not None:
            body["metadata"]["resourceVersion"] = resource_version
        await self.request(
            "PATCH",
            f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}/{name}",
            body=body,
            content_type=MERGE_PATCH,
            resource=plural,
            read=False,
        )

    # coordination.k8s.io Leases (the replicas' membership and their assigner) ---------------

    @staticmethod
    def _leases(namespace: str) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    async def list_leases(self, namespace: str, labels: str) -> list[RawBody]:
        listed = await self.request(
            "GET", self._leases(namespace), query=[("labelSelector", labels)], resource="leases"
        )
        return raw_items(listed)

    async def read_lease(self, namespace: str, name: str) -> RawBody:
        return raw_body(await self.request("GET", f"{self._leases(namespace)}/{name}"))

    async def create_lease(self, namespace: str, body: Mapping[str, Any]) -> RawBody:
        """Create a Lease: Conflict when one of its name exists."""
        return raw_body(await self.request("POST", self._leases(namespace), body=dict(body)))

    async def replace_lease(self, namespace: str, body: Mapping[str, Any]) -> RawBody:
        """Replace a Lease as it was read (its ``resourceVersion``): Conflict when another
        wrote it since, so two replicas never both take it."""
        path = f"{self._leases(namespace)}/{body['metadata']['name']}"
        return raw_body(await self.request("PUT", path, body=dict(body), resource="leases"))

    async def patch_lease(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        await self.request(
            "PATCH",
            f"{self._leases(namespace)}/{name}",
            body=dict(patch),
            content_type=MERGE_PATCH,
            resource="leases",
            read=False,
        )

    async def delete_lease(
        self, namespace: str, name: str, *, resource_version: str | None = None
    ) -> None:
        """Delete the Lease; with ``resource_version``, only as read then (Conflict if it
        changed since)."""
        options = None
        if resource_version is not None:
            options = {"preconditions": {"resourceVersion": resource_version}}
        with contextlib.suppress(ObjectNotFound):
            await self.request(
                "DELETE",
                f"{self._leases(namespace)}/{name}",
                body=options,
                resource="leases",
                read=False,
            )
