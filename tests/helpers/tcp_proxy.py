"""A TCP fault proxy for tests: forwards 127.0.0.1:<port> to a server and can cut connections
after a chosen number of server-to-client bytes (so a cut lands inside a transaction).

It runs its own asyncio loop in a thread so that synchronous tests can drive it.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable


class FaultProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.cuts = 0
        self.connections = 0
        # Each new connection gets a byte budget from this function (None: never cut).
        self.budget: Callable[[], int | None] = lambda: None
        # A partition: open connections are reset and new ones refused until `heal()`.
        self.partitioned = False
        # A black hole: connections stay open (and new ones are accepted) but every byte is
        # dropped until `heal()`: a peer notices only by its own timeouts.
        self.silent = False
        self._open: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def cut_randomly(self, low: int, high: int, seed: int = 0) -> None:
        rng = random.Random(seed)
        self.budget = lambda: rng.randint(low, high)

    def never_cut(self) -> None:
        self.budget = lambda: None

    def partition(self) -> None:
        """Reset every open connection and refuse new ones (a network partition)."""

        def reset_all() -> None:
            self.partitioned = True
            for writer in list(self._open):
                writer.transport.abort()

        self._loop.call_soon_threadsafe(reset_all)

    def blackhole(self) -> None:
        """Drop every byte both ways, resetting nothing (a silent network)."""
        self.silent = True

    def heal(self) -> None:
        """End a partition or a black hole. Connections that lived through a black hole
        are reset (their streams lost bytes); new ones work."""
        if self.silent:
            self.partition()  # resets the connections that lost bytes; heals below

            def end() -> None:
                self.partitioned = False
                self.silent = False

            self._loop.call_soon_threadsafe(end)
            return
        self.partitioned = False

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter):
        self.connections += 1
        if self.partitioned:
            client_w.transport.abort()
            return
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.close()
            return
        self._open.update((client_w, server_w))
        cut = asyncio.Event()

        async def pipe(reader, writer, cuttable: bool) -> None:
            # The budget is taken when the first chunk flows after the proxy was armed, so
            # that arming also affects connections opened before.
            sent, limit = 0, None
            try:
                while not cut.is_set():
                    data = await reader.read(16384)
                    if not data:
                        break
                    if self.silent:
                        continue  # dropped
                    if cuttable and limit is None:
                        budget = self.budget()
                        limit = None if budget is None else sent + budget
                    if limit is not None and sent + len(data) >= limit:
                        writer.write(data[: max(limit - sent, 0)])
                        await writer.drain()
                        self.cuts += 1
                        cut.set()
                        # Reset both sides now: the other direction may be idle forever.
                        client_w.transport.abort()
                        server_w.transport.abort()
                        break
                    writer.write(data)
                    await writer.drain()
                    sent += len(data)
            except (ConnectionError, OSError):
                pass
            finally:
                cut.set()

        await asyncio.gather(
            pipe(client_r, server_w, False),
            pipe(server_r, client_w, True),
            return_exceptions=True,
        )
        for writer in (client_w, server_w):
            writer.transport.abort()
            self._open.discard(writer)
