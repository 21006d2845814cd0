"""Peers that run beside replicad for contract tests and benchmarks (issue 32)."""
