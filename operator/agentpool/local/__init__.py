"""The local cluster: a Kubernetes-compatible API server and a local kubelet, on loopback.

``agentpool local up`` and the test suite start it through
:class:`agentpool.local.cluster.LocalCluster`; nothing outside this package and the CLI imports it.
"""
