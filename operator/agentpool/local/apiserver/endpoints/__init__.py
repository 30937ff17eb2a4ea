"""The local API server's HTTP face: the routes and everything that reads a request or writes an
answer.

``handlers`` routes each URL, ``parsing`` (with ``protobuf``) reads what a request asks for, and
``discovery``, ``openapi``, ``table``, ``watch`` and ``logs`` write the answers kubectl and the
clients expect; ``auth`` checks the bearer token. They call the registry and read the storage.
"""
