"""What every side of the agent protocol shares: its words, its envelope and its HTTP/1.1 client.

Four sides speak the protocol: the agent SDK (:mod:`agentpool.agent`) serves it, and the operator
(:mod:`agentpool.io.agents`, the run engine, the handlers), the gateway (:mod:`agentpool.gateway`)
and the Python client (:mod:`agentpool.client`) call it. What they must agree on lives here, on
a floor below all four, so none of them reaches into another for it:
:mod:`~agentpool.wire.protocol` (paths, headers, reasons, variables),
:mod:`~agentpool.wire.envelopes` (the ``POST /invoke`` body) and
:mod:`~agentpool.wire.connections` (kept-alive HTTP/1.1 requests). This package imports nothing
else of agentpool; ``pyproject.toml`` keeps it so.
"""
