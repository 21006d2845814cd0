"""`replicad spark changes` with `spark.lake_format: delta`: each table's change rows appended
to a Delta table at `<changes_path>/db=<db>/table=<table>`, partitioned by the commit date,
read from the change topic by Spark's own Kafka source (as the Delta `materialize` is).

Delta's streaming sink records each micro-batch's id in the table's log (the query's id and
batch id as a transaction), so a batch run again after a crash is not appended twice, and
with the checkpoint each topic record lands once. A schema version the query was not started
with stops the query, which the job starts again; the new columns are merged into the table's
schema (`mergeSchema`), older rows read them as null. TIME values in the row images are
stored as microseconds (delta_types.py: Delta holds no intervals).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter

from replicad.consumers.typed import TypedSchema
from replicad.spark.delta_types import stored_images
from replicad.spark.jobs import Changes
from replicad.spark.table_format import kafka_changes


class DeltaChanges(Changes):
    def _read(self, options: dict[str, str], versions: list[TypedSchema]) -> DataFrame:
        return kafka_changes(self.spark, options, versions, self.settings.max_offsets_per_trigger)

    def _sink(
        self, table: str, changes: DataFrame, versions: list[TypedSchema]
    ) -> DataStreamWriter:
        dated = stored_images(changes).withColumn("date", F.to_date("commit_ts"))
        return (
            dated.writeStream.format("delta")
            .outputMode("append")
            .option("path", self.changes_path(table))
            .option("mergeSchema", "true")
            .partitionBy("date")
        )
