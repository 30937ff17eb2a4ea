"""The kopf wiring: thin handlers that read what is observed, call the pure cores, and write.

``operator`` assembles the registry and runs kopf; ``pools``, ``pods``, ``runs`` and ``leases`` hold
the handlers of each resource; ``dispatch`` adapts the brokers and the agent client to the run
engine and ``sources`` the source service's client to it; ``runtime`` is the in-memory state they
share.
"""
