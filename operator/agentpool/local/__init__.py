"""The local cluster: a Kubernetes-compatible API server and a local kubelet, on loopback.

``apiserver`` and ``kubelet`` are its two parts. ``agentpool local up``, ``agentpool demo`` and the
test suite start it through :class:`agentpool.local.cluster.LocalCluster` and hand it the operator
to run, so this package never imports the operator's handlers or its I/O modules.
"""
