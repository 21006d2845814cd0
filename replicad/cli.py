"""`replicad` command line: argument parsing and dispatch. What the commands print is built
elsewhere (service.dump_view, service.status_view, relay.inspect).

Each command imports what only it needs (config, the worker, ZooKeeper ...) when it runs:
`replicad dump` is a tool run on a file, and those imports were half its time on a 40 MB
binlog. structlog too is imported where it is used (replicad.lazy_logging says why)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NoReturn, TypeAlias

import replicad
from replicad.dump_view import DumpHistory, dump_input
from replicad.errors import (
    ConfigError,
    RelayError,
    ReplicadError,
)
from replicad.exit_codes import (
    EXIT_CONFIG,
    EXIT_DATA_ERROR,
    EXIT_OK,
    EXIT_TEMPFAIL,
    EXIT_USAGE,
)
from replicad.relay.decode import input_kind
from replicad.service.logging import configure_logging, configure_logging_on_first_use

if TYPE_CHECKING:
    from replicad.config import Config


CONFIG_ENV = "REPLICAD_CONFIG"  # the config file when a command has no -c


def _position(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a byte offset: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a byte offset cannot be negative: {value}")
    return value


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"a timeout must be more than 0 seconds: {text!r}")
    return value


def _version() -> str:
    return replicad.__version__


class _Parser(argparse.ArgumentParser):
    """Usage errors exit 64 (EX_USAGE, as the README promises), not argparse's 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


# One function per command adds its subparser; build_parser lists them in the order of
# `replicad --help`.
_Commands: TypeAlias = "argparse._SubParsersAction[_Parser]"  # subparsers are _Parser too: 64
_CONFIG_HELP = "YAML config file (default: $REPLICAD_CONFIG, else built-in defaults)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="replicad", description="MySQL/MariaDB replica that publishes row changes."
    )
    parser.add_argument("--version", action="version", version=f"replicad {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    operator = _operator_options()
    _add_dump(commands)
    _add_run(commands)
    _add_check(commands)
    _add_status(commands)
    _add_position(commands, operator)
    _add_snapshot(commands, operator)
    _add_invalidate(commands)
    _add_spark(commands, operator)
    _add_relay(commands)
    return parser


def _operator_options() -> _Parser:
    """-c and --json, the parent of every subcommand of position, snapshot and spark."""
    options = _Parser(add_help=False)
    options.add_argument("-c", "--config", help=_CONFIG_HELP)
    options.add_argument("--json", action="store_true", help="print JSON instead of text")
    return options


def _add_dump(commands: _Commands) -> None:
    dump = commands.add_parser(
        "dump",
        help="decode binlog files or relay segments and print JSON lines",
        description=(
            "Decode binlog files, relay segments or relay directories and print one JSON "
            "object per row change (the envelope the Kafka sink publishes), or per event with "
            "--events (relay inputs add RELAY_SEGMENT and RELAY_COMMIT lines)."
        ),
    )
    dump.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="binlog files, relay segments or relay directories, in order",
    )
    dump.add_argument(
        "--start-position",
        type=_position,
        help="byte offset of the first event to decode (an event boundary; first file only)",
    )
    dump.add_argument(
        "--stop-position",
        type=_position,
        help="stop before the event at or after this byte offset (last file only)",
    )
    dump.add_argument("--events", action="store_true", help="print every event, not row changes")
    dump.add_argument(
        "--include-query",
        action="store_true",
        help="give each row change the statement logged with it (source.query), as "
        "envelope.include_query does; off by default like the daemon's messages",
    )
    dump.add_argument(
        "--no-verify-checksum",
        dest="verify_checksum",
        action="store_false",
        help="decode even when an event's CRC32 does not match",
    )
    dump.set_defaults(func=cmd_dump)


def _add_run(commands: _Commands) -> None:
    run = commands.add_parser(
        "run",
        help="stream changes from the primary",
        description=(
            "Connect to the primary as a replica and publish every committed row change. "
            "Without Kafka/ZooKeeper settings, changes go to standard output as JSON lines "
            "and the position to a local file. SIGTERM/SIGINT finish the transaction in "
            "flight, save the position and exit 0. With coordination.zookeeper, the worker "
            "campaigns for the pipeline of each -c file (one source each) and leads at most "
            "coordination.zookeeper.max_pipelines of them at once."
        ),
    )
    run.add_argument(
        "-c",
        "--config",
        action="append",
        help="YAML config file (default: $REPLICAD_CONFIG, else built-in defaults); repeat "
        "for several pipelines (ZooKeeper only)",
    )
    run.set_defaults(func=cmd_run)


def _add_check(commands: _Commands) -> None:
    check = commands.add_parser(
        "check",
        help="preflight every dependency the config names: the primary (connectivity, binlog "
        "settings, privileges, retention), Kafka, ZooKeeper, MQTT, Redis, the snapshot signal "
        "table, the metrics port",
        description=(
            "Check every dependency the config names in one pass; each finding is PASS, WARN "
            "or FAIL, with a one-line remedy for WARN and FAIL. Exits 1 if anything FAILs, "
            "78 for a configuration error, else 0."
        ),
    )
    check.add_argument("-c", "--config", help=_CONFIG_HELP)
    check.add_argument(
        "--json",
        action="store_true",
        help='print one JSON document: {"findings": [{level, topic, text, remedy}], "ok"}',
    )
    check.set_defaults(func=cmd_check)


def _add_status(commands: _Commands) -> None:
    status = commands.add_parser(
        "status",
        help="each pipeline's leader, epoch, position, lag and last error",
        description=(
            "Show the pipeline's state: from ZooKeeper when coordination.zookeeper is "
            "configured (every pipeline of the cluster), else from the local position file."
        ),
    )
    status.add_argument("-c", "--config", help=_CONFIG_HELP)
    status.add_argument("--json", action="store_true", help="print JSON instead of text")
    status.set_defaults(func=cmd_status)


def _add_position(commands: _Commands, operator: _Parser) -> None:
    position = commands.add_parser(
        "position",
        help="show, set or reset the stored position",
        description=(
            "Show or change where the pipeline continues. VALUE: earliest | latest | FILE:POS "
            "| a MySQL GTID set | a MariaDB GTID position. It is checked against the primary "
            "before anything is written. With ZooKeeper and a live leader the change is queued "
            "and applied by the leader at a transaction boundary; --force writes it directly "
            "and is only accepted when no leader is alive. Without ZooKeeper the daemon must be "
            "stopped."
        ),
    )
    actions = position.add_subparsers(dest="action", required=True)
    actions.add_parser("show", help="print the stored position", parents=[operator])
    set_ = actions.add_parser("set", help="set the position to VALUE", parents=[operator])
    set_.add_argument("value", metavar="VALUE")
    reset = actions.add_parser(
        "reset", help="set the position to source.start of the config", parents=[operator]
    )
    for action in (set_, reset):
        action.add_argument(
            "--force", action="store_true", help="write directly (only when no leader is alive)"
        )
        action.add_argument(
            "--timeout",
            type=_timeout,
            default=60.0,
            help="seconds to wait for the leader to apply a queued change (default 60)",
        )
    position.set_defaults(func=cmd_position)


def _add_snapshot(commands: _Commands, operator: _Parser) -> None:
    snapshot = commands.add_parser(
        "snapshot",
        help="request, follow or cancel incremental snapshots of tables",
        description=(
            "Queue an incremental snapshot of a table for the pipeline's leader: it reads the "
            "table in key-ordered chunks between watermarks while it streams, as op r "
            "messages (docs/snapshots.md). The request is checked against the primary first "
            "(table, --where, signal table and grant); nothing is queued when it fails."
        ),
    )
    actions = snapshot.add_subparsers(dest="action", required=True)
    request = actions.add_parser("request", help="queue a snapshot of DB.TABLE", parents=[operator])
    request.add_argument("table", metavar="DB.TABLE")
    request.add_argument("--where", help="an SQL condition: only the rows it selects")
    request.add_argument(
        "--chunk-rows", type=int, help="rows per chunk (default: snapshot.chunk_rows)"
    )
    actions.add_parser(
        "status", help="the active, queued and finished snapshots", parents=[operator]
    )
    cancel = actions.add_parser(
        "cancel", help="cancel a snapshot (default: all of them)", parents=[operator]
    )
    cancel.add_argument("id", nargs="?", metavar="ID", help="the request id (snap-...)")
    snapshot.set_defaults(func=cmd_snapshot)


def _add_invalidate(commands: _Commands) -> None:
    invalidate = commands.add_parser(
        "invalidate",
        help="invalidate cache keys in Redis from the change topics",
        description=(
            "A Kafka consumer group over the change topics of sinks.kafka: each change "
            "deletes (UNLINK) or announces (PUBLISH) the cache keys invalidate.rules map its "
            "row to, before and after images both; offsets are committed only after Redis "
            "acknowledged (docs/invalidate.md). Stops cleanly on SIGTERM/SIGINT."
        ),
    )
    invalidate.add_argument(
        "-c",
        "--config",
        required=not os.environ.get(CONFIG_ENV),
        help="YAML config file (default: $REPLICAD_CONFIG)",
    )
    invalidate.set_defaults(func=cmd_invalidate)


def _add_spark(commands: _Commands, operator: _Parser) -> None:
    spark = commands.add_parser(
        "spark",
        help="run a Spark job over the pipeline's change topics",
        description=(
            "Spark jobs over the change topics of sinks.kafka, typed from the schema topic "
            "(docs/spark.md). Local mode (spark.master, default local[*]) unless --master or "
            "spark-submit says otherwise. Needs the spark extra: pip install replicad[spark]."
        ),
    )
    jobs = spark.add_subparsers(dest="job", required=True)
    materialize = jobs.add_parser(
        "materialize",
        help="keep one lake table per source table equal to it (Parquet)",
        parents=[operator],
        description=(
            "Stream every table spark.tables takes into spark.lake_path/<db>/<table>: the "
            "current row per primary key, versions switched atomically, offsets in "
            "spark.checkpoint_path. Stops cleanly on SIGTERM/SIGINT."
        ),
    )
    changes = jobs.add_parser(
        "changes",
        help="append every change to Parquet by db, table and commit date",
        parents=[operator],
        description=(
            "Stream every table spark.tables takes into spark.changes_path/db=<db>/table=<table>"
            "/date=<commit date>/ (Parquet, Spark's file sink: each topic record once across "
            "restarts). Stops cleanly on SIGTERM/SIGINT."
        ),
    )
    for job in (materialize, changes):
        job.add_argument(
            "--once", action="store_true", help="take what the topics hold now, then exit"
        )
    verify = jobs.add_parser(
        "verify",
        help="compare every lake table with its live MySQL table (exit 1 on a difference)",
        parents=[operator],
        description=(
            "Checksums per primary-key range on MySQL (through JDBC and MariaDB Connector/J) "
            "and on the lake table, row diffs where they differ, at a known binlog position: "
            "rows still changing are read again once the lake has passed them. Prints a JSON "
            "report of missing, extra and different keys; exit 0 equal, 1 different."
        ),
    )
    maintain = jobs.add_parser(
        "maintain",
        help="compact and vacuum the Delta lake tables (spark.lake_format: delta)",
        parents=[operator],
        description=(
            "Per Delta table under spark.lake_path: OPTIMIZE (small files compacted), then "
            "VACUUM (files no version younger than --retain-hours references deleted; older "
            "versions can no longer be read). Runs beside the materialize job; a conflicting "
            "commit exits 75 (run it again). Prints a JSON report per table."
        ),
    )
    maintain.add_argument(
        "--retain-hours",
        type=float,
        default=168.0,
        help="keep the files of versions younger than this (default 168, Delta's)",
    )
    maintain.add_argument("--no-optimize", action="store_true", help="only VACUUM")
    for job in (materialize, changes, verify, maintain):
        job.add_argument("--master", help="Spark master URL (default: spark.master)")
    cut = jobs.add_parser(
        "cut",
        help="every Delta lake table's version at one binlog position (a consistent cut)",
        parents=[operator],
        description=(
            "Reads the commit logs of the Delta tables under spark.lake_path (no Spark) and "
            "prints, as JSON, each table's version holding exactly the changes before "
            "POSITION: read them at those versions for one transactionally consistent state. "
            "Exit 1 naming the table when one has no version at POSITION (docs/spark.md)."
        ),
    )
    cut.add_argument(
        "--at",
        required=True,
        metavar="POSITION",
        help="FILE:POS (SHOW MASTER STATUS), or latest: the newest position every table has",
    )
    spark.set_defaults(func=cmd_spark)


def _add_relay(commands: _Commands) -> None:
    relay = commands.add_parser(
        "relay",
        help="look at the local relay log",
        description=(
            "Look at a relay directory (<relay.directory>/<pipeline>). To print its events: "
            "replicad dump RELAY_DIR."
        ),
    )
    actions = relay.add_subparsers(dest="action", required=True)
    inspect = actions.add_parser(
        "inspect",
        help="list the segments, the durable position and the relay's health",
        description=(
            "List the MANIFEST's segments (positions, transactions, newest commit), the durable "
            "offset and position, and the health: missing or short segments, and with --verify "
            "every record's CRC and the transaction grammar. Exit 65 when damaged."
        ),
    )
    inspect.add_argument("directory", metavar="RELAY_DIR", help="the relay directory")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of text")
    inspect.add_argument(
        "--verify", action="store_true", help="read every segment and check every record"
    )
    relay.set_defaults(func=cmd_relay)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _config_from_environment(args)
    try:
        return int(args.func(args))
    except BrokenPipeError:
        return EXIT_OK


def _config_from_environment(args: argparse.Namespace) -> None:
    """REPLICAD_CONFIG names the config file of a command given no -c (as systemd or a
    container sets it once for every command); -c wins."""
    path = os.environ.get(CONFIG_ENV)
    if not path or getattr(args, "config", "absent") is not None:
        return
    args.config = [path] if args.func is cmd_run else path


def _configure_logging(config: Config, level: str, *others: Config, one_shot: bool = False) -> None:
    """Logging as the config says, then the warnings only a configured log can carry.
    `one_shot`: a command that reads ZooKeeper once and says in one line why it could not
    (status, snapshot, position): kazoo's own retries (a warning per attempt) are not shown."""
    import logging

    import structlog

    from replicad.config import unknown_env_names

    configure_logging(config.log.format, level)
    if one_shot:
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    for name in unknown_env_names(config, *others):
        # Not an override (no double underscore) nor a variable replicad reads: most likely
        # a misspelt override such as REPLICAD_SOURCE_HOST; ignored, said out loud.
        structlog.get_logger("replicad.config").warning(
            "env_variable_ignored",
            variable=name,
            note="not a config override (those join keys with '__', e.g. REPLICAD_SOURCE__HOST)",
        )


def cmd_run(args: argparse.Namespace) -> int:
    import asyncio

    from replicad.config import load_config
    from replicad.published.exits import exit_code
    from replicad.service.worker import run_worker

    if sys.stderr is None:  # started with `2>&-`: nowhere to say anything, and a daemon
        return EXIT_CONFIG  # whose failures nobody can read must not look healthy
    try:
        configs = [load_config(path) for path in args.config or [None]]
        config = configs[0]
        _configure_logging(config, config.log.level, *configs[1:])
        passwords = [c.source.resolve_password() for c in configs]
        zookeeper = config.coordination.zookeeper
        if zookeeper is None and len(configs) > 1:
            raise ConfigError(
                "several pipelines in one worker need coordination.zookeeper",
                key="coordination.zookeeper",
            )
    except ConfigError as exc:
        print(f"replicad run: {exc}", file=sys.stderr)
        return EXIT_CONFIG

    try:
        asyncio.run(run_worker(configs, passwords))
    except BrokenPipeError:
        # Standard error (or the stdout sink's output) is a pipe whose reader went away
        # (`2>&1 | head`): the log is lost, so the run ends; not 0, so that a supervisor
        # notices and restarts it with a working one.
        _silence_closed_streams()
        return EXIT_TEMPFAIL
    except ConfigError as exc:  # found only once running: the same plain line as at load
        print(f"replicad run: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except ReplicadError as exc:
        # 78 tells systemd not to restart (see deploy/ and docs/operations.md); 75 to restart.
        code = exit_code(exc)
        event = "fatal" if code == EXIT_CONFIG else "failed"
        import structlog

        structlog.get_logger("replicad").error(event, error=str(exc), kind=type(exc).__name__)
        return code
    return EXIT_OK


def _silence_closed_streams() -> None:
    """After a broken pipe, point standard output and error at /dev/null: Python's final
    flush would otherwise fail again and print 'Exception ignored ... BrokenPipeError'."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            os.dup2(devnull, stream.fileno())


def cmd_check(args: argparse.Namespace) -> int:
    import asyncio

    from replicad.config import load_config
    from replicad.service.check import exit_status, render_json, render_text, run_check

    try:
        config = load_config(args.config)
        # Standard output carries the report; the log (standard error) only what went wrong,
        # without kazoo's warning per retry while ZooKeeper is away (its finding says so).
        level = "debug" if config.log.level == "debug" else "warning"
        _configure_logging(config, level, one_shot=True)
        password = config.source.resolve_password()
    except ConfigError as exc:
        print(f"replicad check: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    findings = asyncio.run(run_check(config, password))
    print(render_json(findings) if args.json else render_text(findings))
    return exit_status(findings)


def cmd_dump(args: argparse.Namespace) -> int:
    # Standard output carries the changes only: warnings (a torn tail, a DDL the schema
    # history could not follow) go to standard error, progress is not logged. structlog is
    # imported only if something warns (replicad.lazy_logging).
    configure_logging_on_first_use("console", "warning")
    out: BinaryIO = sys.stdout.buffer
    usage = _dump_range_problem(args)
    if usage:  # it would print nothing and exit 0, as if the range held no events
        print(f"replicad dump: {usage}", file=sys.stderr)
        return EXIT_USAGE
    history = DumpHistory()  # one schema history across the inputs, in order
    last = len(args.files) - 1
    for index, path in enumerate(args.files):
        start = args.start_position if index == 0 else None
        stop = args.stop_position if index == last else None
        try:
            kind = input_kind(path)
        except OSError as exc:
            print(f"replicad dump: {path}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_DATA_ERROR
        if kind != "binlog" and (start is not None or stop is not None):
            print(
                f"replicad dump: {path}: --start-position/--stop-position are binlog file "
                "offsets; they do not apply to a relay",
                file=sys.stderr,
            )
            return EXIT_USAGE
        try:
            dump_input(
                out,
                path,
                kind,
                start=start,
                stop=stop,
                events=args.events,
                verify_checksum=args.verify_checksum,
                history=history,
                include_query=args.include_query,
            )
        except OSError as exc:
            if isinstance(exc, BrokenPipeError):
                raise
            out.flush()
            print(f"replicad dump: {path}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_DATA_ERROR
        except ReplicadError as exc:
            out.flush()
            hint = ""
            if start and exc.context.get("offset") == start:
                hint = " (is --start-position the offset of an event?)"
            print(f"replicad dump: {path}: {exc}{hint}", file=sys.stderr)
            return EXIT_DATA_ERROR
    out.flush()
    return EXIT_OK


def _dump_range_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with --start-position/--stop-position before anything is read: a start
    past the end of its (first) file, or after the stop in the same file."""
    start, stop = args.start_position, args.stop_position
    if start is not None and stop is not None and len(args.files) == 1 and start > stop:
        return f"--start-position {start} is after --stop-position {stop}"
    if start is None:
        return None
    try:
        size = Path(args.files[0]).stat().st_size
    except OSError:
        return None  # said, with the exit status of an unreadable input, when it is read
    if Path(args.files[0]).is_file() and start > size:
        return f"--start-position {start} is past the end of {args.files[0]} ({size} bytes)"
    return None


# ---------------------------------------------------------------------- operator commands


def _emit(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    print(json.dumps(data, indent=2, sort_keys=True) if args.json else text)


def _zookeeper(config: Config) -> Any:
    return getattr(config.coordination, "zookeeper", None)


def cmd_status(args: argparse.Namespace) -> int:
    from replicad.config import load_config
    from replicad.published.exits import exit_code
    from replicad.service.status_view import local_pipeline_status, render_status

    try:
        config = load_config(args.config)
        _configure_logging(config, "warning", one_shot=True)
        zk = _zookeeper(config)
        if zk is not None:
            from replicad.service.ha import zk_status

            pipelines = zk_status(config)
            for p in pipelines:  # which ensemble, not only which node
                p["store"] = f"zookeeper {zk.hosts} {p['store'].removeprefix('zookeeper ')}"
        else:
            pipelines = [local_pipeline_status(config)]
    except ReplicadError as exc:
        print(f"replicad status: {exc}", file=sys.stderr)
        return exit_code(exc)
    for p in pipelines:
        p["config"] = str(Path(args.config).resolve()) if args.config else None
    _emit(args, {"pipelines": pipelines}, "\n\n".join(render_status(p) for p in pipelines))
    return EXIT_OK


def cmd_snapshot(args: argparse.Namespace) -> int:
    from replicad.config import load_config
    from replicad.published.exits import exit_code
    from replicad.service import snapshot_requests as snapshots

    try:
        config = load_config(args.config)
        _configure_logging(config, "warning", one_shot=True)
        if args.action == "request":
            result = snapshots.request_snapshot(
                config,
                config.source.resolve_password(),
                args.table,
                args.where,
                args.chunk_rows,
            )
            request = result["request"]
            text = (
                f"{request['id']}: {request['table']} queued ({result['queued_as']}), chunks "
                f"of {request['chunk_rows']} rows by {', '.join(result['key']) or 'no key'}"
            )
        elif args.action == "cancel":
            result = snapshots.cancel_snapshot(config, args.id)
            text = f"cancel of {args.id or 'every snapshot'} queued ({result['queued_as']})"
        else:
            result = snapshots.snapshot_status(config)
            text = snapshots.render_snapshot_status(result)
    except ReplicadError as exc:
        print(f"replicad snapshot {args.action}: {exc}", file=sys.stderr)
        return exit_code(exc)
    _emit(args, result, text)
    return EXIT_OK


def cmd_invalidate(args: argparse.Namespace) -> int:
    from replicad.config import load_config

    try:
        config = load_config(args.config)
        _configure_logging(config, config.log.level)
        from replicad.invalidate.run import run_invalidator
    except ConfigError as exc:
        print(f"replicad invalidate: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    return run_invalidator(config)


def cmd_spark(args: argparse.Namespace) -> int:
    from replicad.config import load_config

    if args.job == "cut":
        return cmd_spark_cut(args)
    from replicad.spark.run import master_problem

    if args.job == "maintain" and args.retain_hours < 0:
        print("replicad spark maintain: --retain-hours must be >= 0", file=sys.stderr)
        return EXIT_USAGE
    problem = args.master is not None and master_problem(args.master)
    if problem:  # before the config and the JVM: a command line's mistake, 64
        print(f"replicad spark {args.job}: --master: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        config = load_config(args.config)
        problem = master_problem(config.spark.master)
        if problem:
            raise ConfigError(problem, key="spark.master")
        _configure_logging(config, config.log.level)
        import pyspark  # noqa: F401  (the optional extra: a clear message when it is missing)

        from replicad.spark.run import run_job
    except ConfigError as exc:
        print(f"replicad spark {args.job}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except ImportError as exc:
        print(
            f"replicad spark: PySpark is not installed ({exc}); pip install 'replicad[spark]'",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    if args.job == "verify":
        from replicad.spark.run import run_verify

        return run_verify(config, master=args.master, as_json=args.json)
    if args.job == "maintain":
        from replicad.spark.run import run_maintain

        return run_maintain(
            config,
            master=args.master,
            retain_hours=args.retain_hours,
            optimize=not args.no_optimize,
        )
    return run_job(args.job, config, master=args.master, once=args.once)


def cmd_spark_cut(args: argparse.Namespace) -> int:
    """`spark cut`: pure reading of the Delta logs, no Spark: 0 found, 1 no cut, 64/78."""
    from replicad.config import load_config
    from replicad.spark.cut import LATEST, CutError, cut_lake, parse_position

    try:
        if args.at != LATEST:
            parse_position(args.at)  # the syntax first, before the config: 64
    except CutError as exc:
        print(f"replicad spark cut: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"replicad spark cut: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        found = cut_lake(config.spark.lake_path, args.at)
    except CutError as exc:
        print(f"replicad spark cut: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(found, indent=2))
    return 0


def cmd_position(args: argparse.Namespace) -> int:
    import asyncio

    import structlog

    from replicad.config import load_config
    from replicad.coordination.local import LocalPositionStore
    from replicad.published.exits import exit_code
    from replicad.service.operator import (
        PositionValueError,
        describe_position,
        parse_position_value,
    )

    log = structlog.get_logger("replicad.cli")
    try:
        if args.action == "set":
            parse_position_value(args.value)  # the syntax first, offline: 64, not a timeout
        config = load_config(args.config)
        _configure_logging(config, "info", one_shot=True)
        zk = _zookeeper(config)
        if args.action == "show":
            if zk is not None:
                from replicad.service.ha import zk_status

                state = next(p for p in zk_status(config) if p["pipeline"] == config.pipeline)
                position = state.get("position")
            else:
                stored = LocalPositionStore(config.coordination.local.path, config.pipeline).load()
                position = None if stored is None else stored.to_json()
            _emit(
                args,
                {"pipeline": config.pipeline, "position": position},
                describe_position(position),
            )
            return EXIT_OK
        value = args.value if args.action == "set" else _start_value(config)
        password = config.source.resolve_password()
        if zk is not None:
            from replicad.service.ha import zk_change_position

            result = zk_change_position(config, password, value, args.force, args.timeout)
        else:
            result = asyncio.run(_local_change_position(config, password, value))
    except ReplicadError as exc:
        print(f"replicad position {args.action}: {exc}", file=sys.stderr)
        if isinstance(exc, PositionValueError):
            return EXIT_USAGE
        return exit_code(exc)
    log.info("position_changed", pipeline=config.pipeline, **result)
    _emit(
        args,
        {"pipeline": config.pipeline, **result},
        f"{config.pipeline}: {describe_position(result.get('old'))} -> "
        f"{describe_position(result.get('new'))} ({result.get('how')})",
    )
    return EXIT_OK


def cmd_relay(args: argparse.Namespace) -> int:
    from replicad.relay.inspect import inspect_relay, render_report

    try:
        report = inspect_relay(Path(args.directory), verify=args.verify)
    except RelayError as exc:
        print(f"replicad relay {args.action}: {exc}", file=sys.stderr)
        return EXIT_DATA_ERROR
    except OSError as exc:
        print(f"replicad relay {args.action}: {exc}", file=sys.stderr)
        return EXIT_DATA_ERROR
    _emit(args, report, render_report(report))
    return EXIT_OK if report["healthy"] else EXIT_DATA_ERROR


def _start_value(config: Config) -> str:
    start = config.source.start
    if isinstance(start, str):
        return start
    if start.gtid is not None:
        return start.gtid
    return f"{start.file}:{start.pos}"


async def _local_change_position(config: Config, password: str, value: str) -> dict[str, Any]:
    from replicad.checkpoint_record import Checkpoint
    from replicad.coordination.local import LocalPipelineStore, PositionFileLock
    from replicad.service.operator import resolve_position
    from replicad.source.schema import default_history_path

    path = config.coordination.local.path
    lock = PositionFileLock(path)
    lock.acquire()  # refuses while a daemon runs: the local store has no command queue
    try:
        position, history = await resolve_position(config, password, value)
        store = LocalPipelineStore(
            path,
            config.schema_.history_path or default_history_path(path),
            config.pipeline,
        )
        old = store.load_checkpoint()
        store.save_history(history, None)  # the history first: never behind the position
        store.save_checkpoint(Checkpoint(position))  # incremental snapshots are not carried
    finally:
        lock.release()
    return {
        "old": None if old is None else old.to_json(),
        "new": position.to_json(),
        "how": "written to the local position file",
    }


if __name__ == "__main__":
    sys.exit(main())
