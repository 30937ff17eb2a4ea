"""Who is asking and what they may do: the user a request runs as, the attributes an authorizer
decides on, RBAC, and impersonation.

``users``, ``attributes``, ``rbac`` and ``impersonation`` are pure: they take roles, bindings and
requests as values and return decisions. Above the registry, below the endpoints, as
kube-apiserver's authenticators and authorizers sit between its filters and its storage.
"""
