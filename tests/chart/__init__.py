"""Tests of what ships outside the package: the Helm chart and the operator image."""
