"""The data pipeline on Spark (docs/spark.md): replicad's change topics as typed DataFrames
(`replicad-kafka`), and lake tables that equal their source tables. Needs the `spark` extra
(`pip install replicad[spark]`): nothing else in replicad imports this package."""
