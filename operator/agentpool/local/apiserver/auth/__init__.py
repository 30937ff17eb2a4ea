"""Who is asking and what they may do: authentication, impersonation and authorization.

``users`` (the user a request runs as), ``jwt`` and ``serviceaccounts`` (service-account tokens),
``attributes`` (a request as an authorizer sees it), ``rbac`` (the authorizer) and
``impersonation`` are pure; ``identities`` (who a token is), ``policy`` (the stored RBAC objects,
and the bootstrap ones from ``bootstrap``), ``tokenrequests`` and ``reviews`` read the registry's
store. Above the registry, below the endpoints, as kube-apiserver's authenticators and
authorizers sit between its filters and its storage.
"""
