"""bench_colocation's open-loop load generator (run as a child process: `python colocation_generator.py HOST:PORT
RATE RECORDS`, or `bench_colocation.py --generate`): requests on a fixed timetable, each latency counted from the
request's INTENDED send time (no coordinated omission; docs/benchmarks-colocation.md, "The load")."""

from __future__ import annotations

import array
import asyncio
import contextlib
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

PATH = "/index.txt"
REQUEST = (f"GET {PATH} HTTP/1.1\r\nHost: web\r\nAccept-Encoding: gzip\r\nUser-Agent: tidemark-colocation\r\n\r\n"
           ).encode()


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        while True:
            line = await reader.readuntil(b"\r\n")
            size = int(line.split(b";", 1)[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return status
            await reader.readexactly(size + 2)
    m = re.search(rb"content-length:\s*(\d+)", lower)
    if m and int(m[1]):
        await reader.readexactly(int(m[1]))
    return status


async def _generate(host: str, port: int, rate: float, out: str, max_conns: int, timeout: float,
                    duration: float | None = None) -> dict[str, Any]:
    """Sends GETs on a fixed timetable (request i at start + i / rate) until stdin closes (or for `duration`
    seconds); each latency is measured from the INTENDED send time, so waiting for a connection or behind a
    slow answer counts. At most `max_conns` connections (keep-alive, opened as needed); a failed request or
    one not answered within `timeout` is an error. Writes (intended, latency or NaN, send lag) triples of
    doubles to `out`."""
    loop = asyncio.get_running_loop()
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    slots = asyncio.Semaphore(max_conns)
    records = array.array("d")
    stop = asyncio.Event()
    opened = 0
    pending: dict[asyncio.Task[None], float] = {}

    def on_stdin() -> None:
        if not os.read(0, 4096):
            loop.remove_reader(0)
            stop.set()

    if duration is None:
        loop.add_reader(0, on_stdin)
    else:
        loop.call_later(duration, stop.set)

    async def one(intended: float) -> None:
        nonlocal opened
        conn = None
        async with slots:
            try:
                conn = idle.pop() if idle else None
                if conn is None:
                    conn = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
                    opened += 1
                sent = loop.time()
                conn[1].write(REQUEST)
                status = await asyncio.wait_for(_read_response(conn[0]), timeout)
                done = loop.time()
                if status != 200:
                    raise ValueError(status)
                records.extend((intended, done - intended, sent - intended))
                idle.append(conn)
            except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                records.extend((intended, math.nan, math.nan))
                if conn is not None:
                    conn[1].close()

    start = loop.time() + 0.05
    i = 0
    while not stop.is_set():
        intended = start + i / rate
        delay = intended - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        task = loop.create_task(one(intended))
        pending[task] = intended
        task.add_done_callback(lambda t: pending.pop(t, None))
        i += 1
    if pending:
        await asyncio.wait(list(pending), timeout=timeout)
    for task, intended in list(pending.items()):
        task.cancel()
        records.extend((intended, math.nan, math.nan))
    with open(out, "wb") as f:
        records.tofile(f)
    return {"sent": i, "connections": opened, "records": len(records) // 3}


def generator_main(target: str, rate: float, out: str, max_conns: int) -> int:
    host, port = target.rsplit(":", 1)
    summary = asyncio.run(_generate(host, int(port), rate, out, max_conns, timeout=10.0))
    print(json.dumps(summary), flush=True)
    return 0


class Generator:
    """The generator as a child process: `start()`, then `stop()` returns its records."""

    def __init__(self, target: str, rate: float, path: Path) -> None:
        self.target, self.rate, self.path = target, rate, path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Generator:
        self.path.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), self.target, str(self.rate), str(self.path)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        return self

    def stop(self) -> list[tuple[float, float, float]]:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        data = array.array("d")
        with contextlib.suppress(OSError), open(self.path, "rb") as f:
            data.frombytes(f.read())
        self.path.unlink(missing_ok=True)
        return [(data[i], data[i + 1], data[i + 2]) for i in range(0, len(data) - 2, 3)]



if __name__ == "__main__":
    sys.exit(generator_main(sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4]) if sys.argv[4:] else 64))
