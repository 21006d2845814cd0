"""The benchmarks' result tables, summary lines and verdicts."""
