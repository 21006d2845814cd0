"""A TCP proxy that delays what the client sends by a fixed time (each chunk, in order), as a
primary a network link away would: every round trip of a client through it takes at least
`delay_s`, while the server's answers and streams flow at once.

A test uses it to widen the time between a client's statements (e.g. between releasing a lock
and reading a position) so that concurrent commits land in it for sure. It runs its own
asyncio loop in a thread, so that synchronous tests can use it (`with DelayProxy(...) as p`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class DelayProxy:
    def __init__(self, target_host: str, target_port: int, delay_s: float) -> None:
        self.target = (target_host, target_port)
        self.delay_s = delay_s
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DelayProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise AssertionError("the delay proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter):
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.close()
            return

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float):
            with contextlib.suppress(ConnectionError, OSError):
                while data := await reader.read(65536):
                    if delay:
                        await asyncio.sleep(delay)
                    writer.write(data)
                    await writer.drain()
            writer.transport.abort()

        await asyncio.gather(
            pipe(client_r, server_w, self.delay_s),
            pipe(server_r, client_w, 0.0),
            return_exceptions=True,
        )
        client_w.transport.abort()
        server_w.transport.abort()
