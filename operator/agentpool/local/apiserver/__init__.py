"""The local API server: an in-memory, Kubernetes-compatible API on aiohttp, loopback only.

kubectl, the kubernetes client, kopf and the tests talk to it as to a cluster: discovery, OpenAPI,
CRUD with all four patch types, watch, selectors, Table output, subresources, CRDs with schema
and CEL validation, finalizers and garbage collection, service-account tokens, TokenReview and
SubjectAccessReview, impersonation and RBAC. ``ApiServer`` serves it in the caller's
event loop; ``serve_in_thread`` on a thread of its own.

It is laid out as a real one is: ``endpoints`` answers HTTP, admitting each request through
``auth`` (who is asking, what they may do: tokens, impersonation, RBAC), and calls ``registry``,
which applies each kind's rules (with ``schema`` for custom resources) and writes to ``storage``;
``errors`` and ``resources`` are the words all of them share, and ``server`` puts them together.
"""

from agentpool.local.apiserver.endpoints.logs import LOG_PATH_ANNOTATION
from agentpool.local.apiserver.server import ApiServer, ServerThread, serve_in_thread

__all__ = ["LOG_PATH_ANNOTATION", "ApiServer", "ServerThread", "serve_in_thread"]
