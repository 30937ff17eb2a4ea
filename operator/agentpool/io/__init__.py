"""The edges of the operator: the only modules that talk to the outside world.

``kube`` is the one module that talks to the Kubernetes API; ``agents`` is the one module that
talks to agents over HTTP; ``sources`` asks a run's source service for items; ``journal`` keeps
each run's finished items on local disk. Everything else receives their results as values.
"""
