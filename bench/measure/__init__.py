"""The benchmarks' timed phases and the measured child processes they start."""
