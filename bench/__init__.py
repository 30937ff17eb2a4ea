"""Benchmarks: scripts that print figures and write them under bench/out/, never timed tests."""
