"""`replicad spark verify` (docs/spark.md): each lake table compared with its live MySQL table.

MySQL is read through Spark's JDBC source (MariaDB Connector/J for MariaDB, MySQL Connector/J
for MySQL: `jdbc_driver` below), in primary-key ranges: for
each range MySQL computes a checksum in SQL (the row count and the sum of 60 bits of each row's
hash, replicad/spark/canonical.py, in the forms of the server's kind: MariaDB or MySQL)
and only the checksums travel; Spark computes the same over
the lake table. Only ranges whose checksums differ are read row by row, in parallel, and joined
with the lake's rows by key: a key only in MySQL is `missing`, only in the lake `extra`, in
both with another hash `different` (the columns named).

MySQL keeps changing while it is read, and the lake follows it with a lag. A difference counts
only when it is *settled*: the rows were read from MySQL between binlog positions Pb and Pa,
the lake was then waited for until it had applied every change up to Pa (replicad's stored
position reached Pa, and the `materialize` query's checkpoint passed the topic's end offsets
seen after that), and the lake's last change of the key (its coordinates, kept also for a
deleted key) lies before Pb. Then no change of the key happened between Pb and Pa, so the lake
and the MySQL read describe the same moment, and a difference is real: a change made behind
the pipeline's back (`sql_log_bin=0`), a lost message, a wrong value. A key whose last change
is at or after Pb is read again in the next round (`spark.verify_rounds`); one still moving
after the last round is reported `unsettled`, not as a difference.

Ranges: when the first key column is an integer, `verify_ranges` contiguous value ranges
between its MIN and MAX (MySQL reads each through the primary key index); otherwise hash
buckets of the key (one grouped pass over the table).
"""

from __future__ import annotations

import asyncio
import time
import zipfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import structlog
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from replicad.config import Config
from replicad.coordination.stored import stored_position
from replicad.errors import ConfigError, ReplicadError
from replicad.spark import storage
from replicad.spark.canonical import (
    mysql_hash_number,
    mysql_row_hash,
    mysql_token,
    quote_name,
    spark_hash_number,
    spark_row_hash,
    spark_token,
)
from replicad.spark.kafka_source import ReplicadKafkaSource, Settings, topic_ranges
from replicad.spark.lake import FILE, POS
from replicad.spark.types import table_struct
from replicad.spark.verified_lake import VerifiedLake

log = structlog.get_logger("replicad.spark")
MARIADB_DRIVER = "org.mariadb.jdbc.Driver"
MYSQL_DRIVER = "com.mysql.cj.jdbc.Driver"
# Where a checkout of replicad gets MySQL Connector/J (scripts/spark/pom.xml).
FETCH_COMMAND = "bash scripts/services.sh spark-jars"
# replicad's tls.mode as Connector/J's sslMode: the same trust decisions as its own connection.
_SSL_MODES = {
    "disabled": "DISABLED",
    "preferred": "PREFERRED",
    "required": "REQUIRED",
    "verify-ca": "VERIFY_CA",
    "verify-identity": "VERIFY_IDENTITY",
}
_INTEGER_KEYS = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint"})
WAIT_POLL_S = 0.5


class VerifyError(ReplicadError):
    """A verification that could not be carried out: the lake did not catch up in time, a
    table that cannot be read (exit 75; a configuration problem raises ConfigError, 78)."""


Coordinates = tuple[str, int]  # (binlog file, position): what SHOW MASTER STATUS gives


@dataclass
class TableReport:
    table: str
    ranges: int = 0
    ranges_differing: int = 0
    rows_mysql: int = 0
    rows_lake: int = 0
    position: dict[str, Any] | None = None  # MySQL's binlog end when its checksums were read
    rounds: int = 0
    missing: list[dict[str, str | None]] = field(default_factory=list)
    extra: list[dict[str, str | None]] = field(default_factory=list)
    different: list[dict[str, Any]] = field(default_factory=list)
    unsettled: list[dict[str, str | None]] = field(default_factory=list)
    counts: dict[str, int] = field(
        default_factory=lambda: {"missing": 0, "extra": 0, "different": 0, "unsettled": 0}
    )

    @property
    def equal(self) -> bool:
        return not any(self.counts.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "equal": self.equal,
            "position": self.position,
            "rows_mysql": self.rows_mysql,
            "rows_lake": self.rows_lake,
            "ranges": self.ranges,
            "ranges_differing": self.ranges_differing,
            "rounds": self.rounds,
            "counts": self.counts,
            "missing": self.missing,
            "extra": self.extra,
            "different": self.different,
            "unsettled": self.unsettled,
        }


@dataclass(frozen=True)
class Partitioning:
    """How a table's keys fall into ranges, computed alike in SQL and in Spark."""

    count: int
    column: dict[str, Any]  # the first key column
    bounds: tuple[int, ...] = ()  # integer ranges: the lower bounds of ranges 1..count-1
    mariadb: bool = field(kw_only=True)  # the server's kind: its canonical forms of the key

    @property
    def by_value(self) -> bool:
        return bool(self.bounds) or self.column["type"] in _INTEGER_KEYS

    def sql_predicate(self, index: int) -> str:
        """The WHERE of range `index` over the table (a subquery's `_range` for buckets)."""
        if not self.by_value:
            return f"_range = {index}"
        name = "_first"
        parts = []
        if index > 0:
            parts.append(f"{name} >= {self.bounds[index - 1]}")
        if index < len(self.bounds):
            parts.append(f"{name} < {self.bounds[index]}")
        return " AND ".join(parts) or "1 = 1"

    def sql_range(self, key: Sequence[dict[str, Any]]) -> str:
        """SQL for a row's range number."""
        if self.by_value:
            first = quote_name(self.column["name"])
            cases = " ".join(f"WHEN {first} < {b} THEN {i}" for i, b in enumerate(self.bounds))
            return f"CASE {cases} ELSE {len(self.bounds)} END" if cases else "0"
        tokens = ", ".join(mysql_token(c, mariadb=self.mariadb) for c in key)
        return f"CRC32(CONCAT({tokens})) % {self.count}"

    def spark_range(self, key: Sequence[dict[str, Any]]) -> Column:
        if self.by_value:
            first = F.col(self.column["name"])
            expression: Column = F.lit(len(self.bounds))
            for index in range(len(self.bounds) - 1, -1, -1):
                expression = F.when(first < F.lit(self.bounds[index]), index).otherwise(expression)
            return expression
        tokens = F.concat(*[spark_token(c, F.col(c["name"]), mariadb=self.mariadb) for c in key])
        return F.pmod(F.crc32(tokens.cast("binary")), F.lit(self.count))


@dataclass(frozen=True)
class JdbcDriver:
    """The JDBC driver verify reads the source with: its jar goes on Spark's classpath
    (spark.jars) before the session starts."""

    kind: str  # "mariadb" or "mysql": whose Connector/J
    class_name: str
    jar: Path
    properties: dict[str, str]  # derived from source.tls, then spark.verify_jdbc_properties


def jdbc_driver(config: Config, password: str) -> JdbcDriver:
    """The driver `spark.jdbc_driver` names; `auto` asks the server what it is, through
    replicad's own connection (wrong credentials: its clear error, exit 78). A jar that is
    not there, or holds no such driver, is a ConfigError naming the key."""
    settings = config.spark
    for key in ("jdbc_driver_jar", "mysql_jdbc_driver_jar"):  # given, so wrong whatever
        given = getattr(settings, key)  # the server turns out to be
        if key in settings.model_fields_set and given is not None:
            _check_jar(key, Path(given), None)
    kind = settings.jdbc_driver
    if kind == "auto":
        kind = "mariadb" if _server_is_mariadb(config, password) else "mysql"
    if kind == "mariadb":
        jar = Path(settings.jdbc_driver_jar)
        _check_jar("jdbc_driver_jar", jar, MARIADB_DRIVER)
        return JdbcDriver(kind, MARIADB_DRIVER, jar, dict(settings.verify_jdbc_properties))
    if settings.mysql_jdbc_driver_jar is None:
        raise ConfigError(
            "verify reads MySQL through MySQL Connector/J (com.mysql:mysql-connector-j on "
            f"Maven Central; in a replicad checkout `{FETCH_COMMAND}` fetches it and prints "
            "its directory): set this key to its jar",
            key="spark.mysql_jdbc_driver_jar",
        )
    jar = Path(settings.mysql_jdbc_driver_jar)
    _check_jar("mysql_jdbc_driver_jar", jar, MYSQL_DRIVER)
    properties = {**connector_j_tls(config), **settings.verify_jdbc_properties}
    return JdbcDriver(kind, MYSQL_DRIVER, jar, properties)


def connector_j_tls(config: Config) -> dict[str, str]:
    """MySQL Connector/J's properties for the trust decisions replicad's own connection makes
    (source.tls): the same sslMode; the pinned RSA key, else the key asked of the server for
    caching_sha2's full authentication without TLS (allowPublicKeyRetrieval), as replicad
    does. Connector/J verifies a certificate only against a Java trust store, not a PEM file:
    the verify modes need one in spark.verify_jdbc_properties."""
    tls = config.source.tls
    properties = {"sslMode": _SSL_MODES[tls.mode]}
    if tls.server_public_key is not None:
        properties["serverRSAPublicKeyFile"] = str(tls.server_public_key)
    elif tls.mode in ("disabled", "preferred"):
        properties["allowPublicKeyRetrieval"] = "true"
    given = config.spark.verify_jdbc_properties
    wanted = []
    if tls.mode in ("verify-ca", "verify-identity"):
        wanted.append("trustCertificateKeyStoreUrl")
    if tls.cert is not None:
        wanted.append("clientCertificateKeyStoreUrl")
    missing = [name for name in wanted if name not in given]
    if missing:
        raise ConfigError(
            f"source.tls is {tls.mode}{' with a client certificate' if tls.cert else ''}, and "
            "MySQL Connector/J reads certificates only from Java key stores: give "
            + " and ".join(missing)
            + " (a file: URL) in this key",
            key="spark.verify_jdbc_properties",
        )
    return properties


def _check_jar(key: str, jar: Path, driver: str | None) -> None:
    if not jar.is_file():
        hint = (
            "Debian: apt install libmariadb-java"
            if key == "jdbc_driver_jar"
            else f"in a replicad checkout `{FETCH_COMMAND}` fetches it"
        )
        raise ConfigError(
            f"verify's JDBC driver jar is not there ({hint})", key=f"spark.{key}", value=str(jar)
        )
    if driver is None:
        return
    try:
        with zipfile.ZipFile(jar) as archive:
            found = driver.replace(".", "/") + ".class" in archive.namelist()
    except (OSError, zipfile.BadZipFile) as exc:
        raise ConfigError(
            f"cannot read the jar: {exc}", key=f"spark.{key}", value=str(jar)
        ) from None
    if not found:
        raise ConfigError(f"the jar holds no {driver}", key=f"spark.{key}", value=str(jar))


def _server_is_mariadb(config: Config, password: str) -> bool:
    from replicad.source.stream import open_connection

    async def ask() -> bool:
        conn = await open_connection(config.source, password)
        try:
            return bool(conn.server.mariadb)
        finally:
            await conn.close()

    return asyncio.run(ask())


class Verifier:
    """One verification run over every lake table `spark.tables` takes."""

    def __init__(
        self,
        spark: SparkSession,
        config: Config,
        password: str,
        driver: JdbcDriver | None = None,
    ) -> None:
        """`driver`: the one whose jar the session was started with (default: what
        `jdbc_driver` resolves to)."""
        from replicad.spark.jobs import Materialize, Source

        self.spark = spark
        self.config = config
        self.settings = config.spark
        self.lake = VerifiedLake(config.spark)
        self.source = Source.of(config)
        self.materialize = Materialize  # where the lake tables and their checkpoints are
        source = config.source
        self.driver = driver or jdbc_driver(config, password)
        log.info("verify_jdbc_driver", driver=self.driver.class_name, jar=str(self.driver.jar))
        # jdbc:mysql: selects Spark's MySQL dialect; both drivers accept that scheme (MariaDB
        # Connector/J 2.x does; 3.x would need permitMysqlScheme).
        self.jdbc_url = f"jdbc:mysql://{source.host}:{source.port}/"
        self.jdbc_properties = {
            "user": source.user,
            "password": password,
            "driver": self.driver.class_name,
            **self.driver.properties,  # TLS and the like: the driver's own names
        }
        self.password = password

    # ------------------------------------------------------------------ MySQL

    @cached_property
    def mariadb(self) -> bool:
        """Whether the server is MariaDB (its canonical forms differ from MySQL's: a
        double's text), asked through replicad's own connection: the JDBC driver's kind
        does not say (MySQL Connector/J reads MariaDB too)."""
        return _server_is_mariadb(self.config, self.password)

    def _query(self, sql: str) -> DataFrame:
        return self.spark.read.jdbc(
            self.jdbc_url, f"({sql}) AS _q", properties=self.jdbc_properties
        )

    def _binlog_end(self) -> Coordinates:
        from replicad.source.schema import binlog_end
        from replicad.source.stream import open_connection

        async def read() -> Coordinates:
            conn = await open_connection(self.config.source, self.password)
            try:
                end = await binlog_end(conn)
            finally:
                await conn.close()
            if end is None:
                raise ConfigError("the primary has binary logging off", key="source")
            return end.file, end.pos

        return asyncio.run(read())

    # ------------------------------------------------------------------ lake progress

    def _stored_position(self) -> Coordinates | None:
        position = stored_position(self.config)
        if not position or not position.get("file"):
            return None
        return str(position["file"]), int(position["pos"])

    def _committed_offsets(self, table: str) -> dict[str, int]:
        return self.lake.committed_offsets(table, self.source.options(table)["topic"])

    def wait_for_lake(self, table: str, position: Coordinates, deadline: float) -> None:
        """Until the lake table has applied every change up to `position`."""
        while True:
            stored = self._stored_position()
            if stored is not None and stored >= position:
                break
            if time.monotonic() > deadline:
                raise VerifyError(
                    "replicad's stored position did not reach the position verified at",
                    table=table,
                    stored=stored,
                    position=position,
                )
            time.sleep(WAIT_POLL_S)
        settings = Settings.of(self.source.options(table))
        ends = {str(r.partition): r.end for r in topic_ranges(settings, None) if r.end > r.start}
        while True:
            committed = self._committed_offsets(table)
            if all(committed.get(p, 0) >= end for p, end in ends.items()):
                return
            if time.monotonic() > deadline:
                raise VerifyError(
                    "the materialize job has not applied the change topic up to the position "
                    "verified at (is it running?)",
                    table=table,
                    topic_ends=ends,
                    committed=committed,
                )
            time.sleep(WAIT_POLL_S)

    # ------------------------------------------------------------------ one table

    def tables(self) -> list[str]:
        import re

        pattern = re.compile(self.settings.tables)
        storage.local_only(self.settings.lake_path, "spark.lake_path", "verify")
        return [t for t in self.lake.tables() if pattern.fullmatch(t)]

    def verify(self, table: str, timeout_s: float) -> TableReport:
        report = TableReport(table)
        versions = ReplicadKafkaSource(self.source.options(table)).versions
        columns = list(versions[-1].columns)
        key_names = list(versions[-1].primary_key)
        if not key_names:
            raise VerifyError("a table without a primary key cannot be verified", table=table)
        by_name = {c["name"]: c for c in columns}
        key = [by_name[k] for k in key_names]
        struct = table_struct(versions)

        def lake() -> DataFrame:  # the current version, read again each round
            return self.lake.stored(self.spark, table, struct)

        db, _, name = table.partition(".")
        source_table = f"{quote_name(db)}.{quote_name(name)}"
        deadline = time.monotonic() + timeout_s
        # First through replicad's own connection: wrong credentials end the run with its
        # clear error (exit 78) rather than a JDBC stack trace.
        self._binlog_end()
        partitioning = self._partitioning(source_table, key)
        report.ranges = partitioning.count

        # Round 0: checksums per range on both sides.
        mysql_sums = self._mysql_checksums(source_table, columns, key, partitioning)
        after = self._binlog_end()
        report.position = {"file": after[0], "pos": after[1]}
        self.wait_for_lake(table, after, deadline)
        lake_rows = self._lake_rows(lake(), columns, key, partitioning)
        lake_sums = {
            int(r["_range"]): (int(r["n"]), int(r["s"] or 0))
            for r in lake_rows.groupBy("_range")
            .agg(F.count(F.lit(1)).alias("n"), F.sum("_number").alias("s"))
            .collect()
        }
        report.rows_mysql = sum(n for n, _ in mysql_sums.values())
        report.rows_lake = sum(n for n, _ in lake_sums.values())
        pending = sorted(
            r
            for r in range(partitioning.count)
            if mysql_sums.get(r, (0, 0)) != lake_sums.get(r, (0, 0))
        )
        report.ranges_differing = len(pending)
        log.info(
            "verify_checksums",
            table=table,
            ranges=partitioning.count,
            differing=len(pending),
            rows_mysql=report.rows_mysql,
            rows_lake=report.rows_lake,
        )
        unsettled: DataFrame | None = None
        again: DataFrame | None = None  # the keys to look at again (None: every key)
        positions = {c["name"]: i for i, c in enumerate(columns)}
        key_columns = [f"_c{positions[k]}" for k in key_names]
        while pending and report.rounds < self.settings.verify_rounds:
            report.rounds += 1
            before = self._binlog_end()
            mysql_rows = self._mysql_rows(source_table, columns, key, partitioning, pending)
            mysql_rows = mysql_rows.persist()
            mysql_rows.count()  # read now: between `before` and `after`
            after = self._binlog_end()
            self.wait_for_lake(table, after, deadline)
            lake_rows = self._lake_rows(lake(), columns, key, partitioning).filter(
                F.col("_range").isin(pending)
            )
            # A key the lake lacks has no coordinates to say when it went: settled only
            # when a second round finds it still missing.
            diff = self._diff(mysql_rows, lake_rows, columns, key, before, report.rounds > 1)
            if again is not None:  # a key recorded in an earlier round is not looked at again
                diff = diff.join(again, key_columns, "left_semi")
            diff = diff.persist()
            settled = diff.filter("_settled")
            self._record(report, settled, columns, key)
            unsettled = diff.filter("NOT _settled")
            again = self.spark.createDataFrame(
                unsettled.select(*key_columns).collect(), unsettled.select(*key_columns).schema
            )
            pending = sorted(
                int(r["_range"]) for r in unsettled.select("_range").distinct().collect()
            )
            log.info("verify_round", table=table, round=report.rounds, ranges_again=len(pending))
            if pending and report.rounds < self.settings.verify_rounds:
                diff.unpersist()
                mysql_rows.unpersist()
                unsettled = None
        if pending and unsettled is not None:
            report.counts["unsettled"] = unsettled.count()
            report.unsettled = [
                _key_of(r, key, positions)
                for r in unsettled.limit(self.settings.verify_max_keys).collect()
            ]
        return report

    # ------------------------------------------------------------------ pieces

    def _partitioning(self, source_table: str, key: list[dict[str, Any]]) -> Partitioning:
        count = self.settings.verify_ranges
        first = key[0]
        if first["type"] not in _INTEGER_KEYS:
            return Partitioning(count, first, mariadb=self.mariadb)
        name = quote_name(first["name"])
        bounds = self._query(
            f"SELECT MIN({name}) AS lo, MAX({name}) AS hi FROM {source_table}"
        ).first()
        if bounds is None or bounds["lo"] is None:
            return Partitioning(1, first, (), mariadb=self.mariadb)
        low, high = int(bounds["lo"]), int(bounds["hi"])
        step = max(1, (high - low + 1) // count)
        cuts = tuple(sorted({low + step * i for i in range(1, count) if low + step * i <= high}))
        return Partitioning(len(cuts) + 1, first, cuts, mariadb=self.mariadb)

    def _mysql_checksums(
        self,
        source_table: str,
        columns: list[dict[str, Any]],
        key: list[dict[str, Any]],
        partitioning: Partitioning,
    ) -> dict[int, tuple[int, int]]:
        number = mysql_hash_number(mysql_row_hash(columns, mariadb=self.mariadb))
        if not partitioning.by_value:
            grouped = self._query(
                f"SELECT {partitioning.sql_range(key)} AS _range, COUNT(*) AS n, "
                f"SUM({number}) AS s FROM {source_table} GROUP BY _range"
            )
            return {int(r["_range"]): (int(r["n"]), int(r["s"] or 0)) for r in grouped.collect()}
        first = quote_name(key[0]["name"])

        def one(index: int) -> tuple[int, tuple[int, int]]:
            where = partitioning.sql_predicate(index).replace("_first", first)
            row = self._query(
                f"SELECT COUNT(*) AS n, SUM({number}) AS s FROM {source_table} WHERE {where}"
            ).first()
            assert row is not None
            return index, (int(row["n"]), int(row["s"] or 0))

        workers = max(1, min(partitioning.count, self.spark.sparkContext.defaultParallelism * 2))
        with ThreadPoolExecutor(workers) as pool:  # the ranges read side by side
            return dict(pool.map(one, range(partitioning.count)))

    def _mysql_rows(
        self,
        source_table: str,
        columns: list[dict[str, Any]],
        key: list[dict[str, Any]],
        partitioning: Partitioning,
        ranges: Sequence[int],
    ) -> DataFrame:
        """The rows of some ranges, as canonical tokens: one JDBC partition per range."""
        first = quote_name(key[0]["name"])
        tokens = ", ".join(
            f"{mysql_token(c, mariadb=self.mariadb)} AS _c{i}" for i, c in enumerate(columns)
        )
        subquery = (
            f"(SELECT {first} AS _first, {partitioning.sql_range(key)} AS _range, {tokens} "
            f"FROM {source_table}) AS _rows"
        )
        # One partition per range; a value range is a predicate on the key column itself
        # (`_first`), which MySQL reads through the primary key index.
        predicates = [partitioning.sql_predicate(r) for r in ranges]
        rows = self.spark.read.jdbc(
            self.jdbc_url, subquery, predicates=predicates, properties=self.jdbc_properties
        )
        return rows.select("_range", *[F.col(f"_c{i}") for i in range(len(columns))])

    def _lake_rows(
        self,
        stored: DataFrame,
        columns: list[dict[str, Any]],
        key: list[dict[str, Any]],
        partitioning: Partitioning,
    ) -> DataFrame:
        """Every key the lake holds, with its range, tokens, hash and last
        coordinates."""
        tokens = [
            spark_token(c, F.col(c["name"]), mariadb=self.mariadb).alias(f"_c{i}")
            for i, c in enumerate(columns)
        ]
        with_tokens = stored.select(
            partitioning.spark_range(key).alias("_range"),
            *tokens,
            F.col(FILE),
            F.col(POS),
        )
        row_hash = spark_row_hash([F.col(f"_c{i}") for i in range(len(columns))])
        return with_tokens.withColumn("_number", spark_hash_number(row_hash))

    def _diff(
        self,
        mysql_rows: DataFrame,
        lake_rows: DataFrame,
        columns: list[dict[str, Any]],
        key: list[dict[str, Any]],
        before: Coordinates,
        absent_settle: bool,
    ) -> DataFrame:
        """The keys that differ, with their kind and columns; `_settled` when the lake's last
        change of the key lies before `before` or, if `absent_settle`, the lake lacks it."""
        positions = {c["name"]: i for i, c in enumerate(columns)}
        key_columns = [f"_c{positions[k['name']]}" for k in key]
        others = [f"_c{i}" for i in range(len(columns)) if f"_c{i}" not in key_columns]
        mine = mysql_rows.select(
            F.col("_range").alias("_mrange"),
            *key_columns,
            *[F.col(c).alias(f"m{c}") for c in others],
            F.lit(True).alias("_in_mysql"),
        )
        theirs = lake_rows.select(
            F.col("_range").alias("_lrange"),
            *key_columns,
            *[F.col(c).alias(f"l{c}") for c in others],
            F.col(FILE),
            F.col(POS),
            F.lit(True).alias("_in_lake"),
        )
        joined = mine.join(theirs, key_columns, "full_outer")
        in_mysql = F.coalesce(F.col("_in_mysql"), F.lit(False))
        in_lake = F.coalesce(F.col("_in_lake"), F.lit(False))
        names = {f"_c{i}": c["name"] for i, c in enumerate(columns)}
        differs = [
            F.when(~F.col(f"m{c}").eqNullSafe(F.col(f"l{c}")), F.lit(names[c])) for c in others
        ]
        differing = (
            F.array_compact(F.array(*differs)) if differs else F.array().cast("array<string>")
        )
        changed_before = F.struct(F.col(FILE).alias("f"), F.col(POS).alias("p")) < F.struct(
            F.lit(before[0]).alias("f"), F.lit(before[1]).cast("bigint").alias("p")
        )
        kind = (
            F.when(in_mysql & ~in_lake, "missing")
            .when(~in_mysql & in_lake, "extra")
            .when(in_mysql & in_lake & (F.size(differing) > 0), "different")
        )
        return (
            joined.withColumn("_kind", kind)
            .withColumn("_columns", differing)
            .filter(F.col("_kind").isNotNull())
            .withColumn(
                "_settled",
                (F.col(FILE).isNull() & F.lit(absent_settle))
                | F.coalesce(changed_before, F.lit(False)),
            )
            .withColumn("_range", F.coalesce("_mrange", "_lrange"))
        )

    def _record(
        self,
        report: TableReport,
        settled: DataFrame,
        columns: list[dict[str, Any]],
        key: list[dict[str, Any]],
    ) -> None:
        limit = self.settings.verify_max_keys
        found = {str(kind): int(n) for kind, n in settled.groupBy("_kind").count().collect()}
        positions = {c["name"]: i for i, c in enumerate(columns)}
        for kind, count in found.items():
            report.counts[kind] += count
            target = getattr(report, kind)
            room = limit - len(target)
            if room <= 0:
                continue
            for row in settled.filter(F.col("_kind") == kind).limit(room).collect():
                entry = _key_of(row, key, positions)
                if kind == "different":
                    target.append({"key": entry, "columns": sorted(row["_columns"])})
                else:
                    target.append(entry)


def _key_of(row: Any, key: list[dict[str, Any]], positions: dict[str, int]) -> dict[str, Any]:
    """A key as its columns' canonical texts (each token's text after `V<length>:`)."""
    out: dict[str, Any] = {}
    for column in key:
        token = row[f"_c{positions[column['name']]}"]
        out[column["name"]] = None if token in (None, "N") else token.split(":", 1)[1]
    return out
