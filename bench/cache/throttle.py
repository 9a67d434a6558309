"""An in-process throttling TCP proxy (no netem on this kernel): bandwidth and latency on loopback.

Model of a WAN link to object storage:
- `link_rate`: bytes/s shared by every connection (the pipe), token bucket;
- `conn_rate`: bytes/s per connection (what one TCP stream gets: window / RTT);
- `rtt`: every client->server chunk (each request) is delivered `rtt` seconds late,
  pipelined, so a request/response round trip costs at least one RTT.
Runs its own event loop in a daemon thread so synchronous clients can use it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

CHUNK = 16 * 1024


class TokenBucket:
    """Bytes allowed per second with a small burst."""

    def __init__(self, rate: float, burst: int = 4 * CHUNK) -> None:
        self.rate, self.burst = rate, burst
        self.tokens = float(burst)
        self.t = time.monotonic()

    async def take(self, n: int) -> None:
        while True:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.t) * self.rate)
            self.t = now
            if self.tokens >= n:
                self.tokens -= n
                return
            await asyncio.sleep((n - self.tokens) / self.rate)


@dataclass
class ThrottleProxy:
    target_host: str
    target_port: int
    link_rate: float = 40e6
    conn_rate: float = 10e6
    rtt: float = 0.01
    port: int = 0
    bytes_down: int = 0
    connections: int = 0

    def start(self) -> "ThrottleProxy":
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._link = TokenBucket(self.link_rate)
            server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        threading.Thread(target=run, daemon=True, name="throttle-proxy").start()
        ready.wait(10)
        return self

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            sreader, swriter = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            cwriter.close()
            return
        up = asyncio.create_task(self._delayed(creader, swriter))
        down = asyncio.create_task(self._throttled(sreader, cwriter, TokenBucket(self.conn_rate)))
        # Either side closing ends the connection (S3 servers often send Connection: close).
        await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
        for t in (up, down):
            t.cancel()
        await asyncio.gather(up, down, return_exceptions=True)
        for w in (swriter, cwriter):
            w.close()

    async def _delayed(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                at, data = await queue.get()
                if not data:
                    writer.write_eof() if writer.can_write_eof() else None
                    return
                await asyncio.sleep(max(0.0, at - time.monotonic()))
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(deliver())
        try:
            while True:
                data = await reader.read(CHUNK)
                queue.put_nowait((time.monotonic() + self.rtt, data))
                if not data:
                    break
            await sender
        except (ConnectionError, asyncio.CancelledError):
            sender.cancel()

    async def _throttled(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         conn: TokenBucket) -> None:
        try:
            while data := await reader.read(CHUNK):
                await conn.take(len(data))
                await self._link.take(len(data))
                self.bytes_down += len(data)
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass


class ThrottleProxyProcess:
    """The same proxy in a child process, so it does not share the client's GIL (fairer on few cores)."""

    def __init__(self, target: str, link_rate: float, conn_rate: float, rtt: float) -> None:
        import subprocess
        import sys

        self.proc = subprocess.Popen(
            [sys.executable, __file__, target, str(link_rate), str(conn_rate), str(rtt)],
            stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("PORT "):
            self.proc.kill()
            raise RuntimeError("throttle proxy did not start")
        self.port = int(line.split()[1])

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


if __name__ == "__main__":
    import sys

    host, _, tport = sys.argv[1].rpartition(":")
    p = ThrottleProxy(host, int(tport), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])).start()
    print(f"PORT {p.port}", flush=True)
    threading.Event().wait()
