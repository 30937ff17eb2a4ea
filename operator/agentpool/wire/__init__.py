"""What goes on the wire between agentpool's sides, which every side shares: the agent protocol's
words, its envelope, its bearer token and its HTTP/1.1 client, and a run's results as read back.

Four sides speak the protocol: the agent SDK (:mod:`agentpool.agent`) serves it, and the operator
(:mod:`agentpool.io.agents`, the run engine, the handlers), the gateway (:mod:`agentpool.gateway`)
and the Python client (:mod:`agentpool.client`) call it; the operator writes a run's results and
the client reads them. What they must agree on lives here, on a floor below all of them, so none
reaches into another for it: :mod:`~agentpool.wire.protocol` (paths, headers, reasons,
variables), :mod:`~agentpool.wire.envelopes` (the ``POST /invoke`` body),
:mod:`~agentpool.wire.tokens` (the ``Authorization: Bearer`` header),
:mod:`~agentpool.wire.events` (a streamed answer's server-sent events),
:mod:`~agentpool.wire.connections` (kept-alive HTTP/1.1 requests) and
:mod:`~agentpool.wire.results` (a run's records in its status and result ConfigMaps). This
package imports nothing else of agentpool; ``pyproject.toml`` keeps it so.
"""
