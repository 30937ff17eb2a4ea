"""Structural schemas and CEL rules, applied as the API server's apiextensions part applies them.

``validation`` prunes, defaults and validates a custom resource against its CRD's schema;
``celrules`` compiles and evaluates the ``x-kubernetes-validations`` rules it meets. The registry
calls them on every custom-resource write and CRD; the tests call them to prove the generated
CRDs accept and refuse what they should. Pure: data in, data out.
"""
