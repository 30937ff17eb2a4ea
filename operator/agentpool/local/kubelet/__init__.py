"""The local kubelet: the local cluster's one node, running its pods as local process groups.

``Kubelet`` (in ``kubelet``) watches the pods, hands each to a ``podworker.PodWorker`` that runs,
probes and reports it, and keeps the node (``node``) and the kubelet's own HTTPS endpoint
(``kubeletserver``) up; ``podapi`` is how it talks to the API server. The local cluster starts it.
For the benchmarks it can simulate its pods instead (``simulatedpods``): Ready without a process,
one in-process agent (``simulator``) answering on every pod's address.
"""

from agentpool.local.kubelet.kubelet import Kubelet

__all__ = ["Kubelet"]
