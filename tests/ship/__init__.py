"""What a cluster admin gets: the README's reference, the operator's metrics and RBAC, the chart."""
