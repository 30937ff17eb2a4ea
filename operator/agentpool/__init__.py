"""agentpool: a Kubernetes operator that keeps pools of warm agents and drives work through them.

The package is laid out in layers (see the import-linter contracts in ``pyproject.toml``):
``api`` holds the typed resource models, ``pool`` the pure pool decisions, ``runs`` the PoolRun
engine, ``handlers`` the thin kopf wiring, ``io`` the only modules that talk to the Kubernetes API
and to agents, ``agent`` the SDK agent authors import, and ``local`` the embedded local cluster.
"""

__version__ = "0.1.0"

GROUP = "agentpool.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
