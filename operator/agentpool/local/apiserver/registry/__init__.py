"""What the local API server does with an object on its way into and out of the store.

``core`` holds the server's state (the resource registry, the store, the clock, the
garbage-collection queue); ``writes`` and ``deletion`` are the create, update, patch and delete
paths with the garbage collector; ``kinds``, ``builtins``, ``crds``, ``customs``, ``scale``,
``patch``, ``metadata`` and ``names`` hold the rules those paths apply, as the registry's REST
strategies do on a real API server. Above the storage, below the endpoints; no HTTP here.
"""
