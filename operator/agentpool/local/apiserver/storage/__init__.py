"""Where the local API server keeps objects: the store with its bounded event logs (``store``), and
the label and field selectors that pick stored objects for a list, a watch or a deletion
(``selectors``). Below the registry and the endpoints; it knows nothing of HTTP.
"""
