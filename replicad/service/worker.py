"""One `replicad run` process: its pipelines (coordinated through ZooKeeper, or one alone
with a local position file), and around them the stop signals, the metrics and health
endpoints and systemd's notify protocol. The first config's `metrics` and `shutdown`
settings are the worker's."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from replicad.config import Config
from replicad.coordination.local import PositionFileLock
from replicad.published.http import Endpoints, beat
from replicad.service.daemon import run_until_stopped
from replicad.service.notify import Notifier
from replicad.service.signals import install_stop_handlers
from replicad.service.telemetry import Telemetry


async def run_worker(configs: Sequence[Config], passwords: Sequence[str]) -> None:
    config = configs[0]
    stop = asyncio.Event()
    telemetry = Telemetry(config.metrics.ready_ack_stall_s)
    notifier = Notifier()

    def stopping() -> None:
        telemetry.stopping = True  # /readyz says so at once: no new traffic our way
        notifier.stopping()

    install_stop_handlers(stop, max(c.shutdown.timeout_s for c in configs), stopping)
    endpoints = beating = None
    if config.metrics.listen is not None:
        endpoints = Endpoints(telemetry, config.metrics.listen, config.metrics.loop_stall_s)
        endpoints.start()  # a port taken is an error before anything else starts
        beating = asyncio.create_task(beat(telemetry))
    notifier.start(telemetry)
    try:
        if config.coordination.zookeeper is not None:
            from replicad.service.ha import run_with_zookeeper

            await run_with_zookeeper(configs, passwords, stop, telemetry)
            return
        lock = PositionFileLock(config.coordination.local.path)
        lock.acquire()  # one daemon per position file; `replicad position` checks it too
        try:
            telemetry.set_role(config.pipeline, "leading")  # nobody else may, no election
            await run_until_stopped(config, passwords[0], stop, telemetry=telemetry)
        finally:
            lock.release()
    finally:
        for name in telemetry.pipelines:
            telemetry.set_role(name, "stopped")
        await notifier.close()
        if beating is not None:
            beating.cancel()
        if endpoints is not None:
            await asyncio.to_thread(endpoints.stop)
