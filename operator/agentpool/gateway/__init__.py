"""The gateway: a pool's call and cast over HTTPS, from the operator's brokers, with no Kubernetes
object per call.

A program sends ``POST /v1/namespaces/{ns}/agentpools/{pool}/call`` (or ``.../cast``) with its
Kubernetes bearer token; the gateway checks the token with a TokenReview and the caller's right
with a SubjectAccessReview (both cached briefly, :mod:`~agentpool.gateway.access`), validates the
body (:mod:`~agentpool.gateway.requests`), and hands the item to the pool's waiting line, the
same one runs and leases wait in. :mod:`~agentpool.gateway.server` is the HTTP edge; what it calls
comes injected (:mod:`~agentpool.gateway.contracts`): the operator's handlers give it the brokers
and the agents (:mod:`agentpool.handlers.gateway`) and the reviews over the Kubernetes API. This
package imports no kopf, no kubernetes client, nothing of the handlers or the I/O modules.
"""
