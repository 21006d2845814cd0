"""The benchmarks' workloads: the tables, the rows and the binlogs each one measures."""
