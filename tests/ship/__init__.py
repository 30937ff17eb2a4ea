"""What a cluster admin gets: the manual's reference, the operator's metrics and RBAC, the chart."""
