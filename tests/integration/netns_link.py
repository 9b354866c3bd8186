"""A real network partition of one node agent (issue 38 item 1): the agent runs in a network
namespace of its own (`unshare -n`, so root), where the only way out is a relay to the broker that
the test can cut and heal.

Two halves meet on a Unix socket (a file: it crosses network namespaces):
- inside the namespace, `python netns_link.py --listen HOST:PORT --unix PATH -- AGENT ARGV...`
  brings up loopback, listens on the broker's own address (so the broker's advertised listener
  resolves to it), relays every connection to PATH, and runs the agent as its child;
- outside, `BrokerLink` (in the test) accepts on PATH and relays to the real broker. `cut()` stops
  every byte both ways and keeps the connections open (packets dropped, as on a real partition:
  the agent's requests time out, nothing is refused); `heal()` drops the connections held open
  (the clients reconnect, as after a long partition) and lets traffic flow again.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

CHUNK = 65536


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, open_: asyncio.Event) -> None:
    with contextlib.suppress(ConnectionError, OSError, asyncio.CancelledError):
        while data := await reader.read(CHUNK):
            await open_.wait()  # cut: nothing passes (the sender's buffers fill, as on a dead link)
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(Exception):
        writer.close()


class BrokerLink:
    """The outside half: Unix socket `path` -> the broker at `host:port`; cut and heal."""

    def __init__(self, path: Path, host: str, port: int) -> None:
        self.path, self.host, self.port = path, host, port
        self._open = asyncio.Event()
        self._open.set()
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> BrokerLink:
        self._server = await asyncio.start_unix_server(self._accept, path=str(self.path))
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._open.wait()  # a connection opened during a cut hangs, as a SYN would
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.close()
            return
        self._writers += [writer, up_writer]
        await asyncio.gather(
            _pump(reader, up_writer, self._open), _pump(up_reader, writer, self._open), return_exceptions=True
        )

    def cut(self) -> None:
        self._open.clear()

    def heal(self) -> None:
        for writer in self._writers:
            with contextlib.suppress(Exception):
                writer.transport.abort()
        self._writers.clear()
        self._open.set()

    async def stop(self) -> None:
        self.heal()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


async def _inside(listen: str, unix: str, argv: list[str]) -> int:
    host, _, port = listen.rpartition(":")

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(unix)
        except OSError:
            writer.close()
            return
        always = asyncio.Event()
        always.set()
        await asyncio.gather(
            _pump(reader, up_writer, always), _pump(up_reader, writer, always), return_exceptions=True
        )

    server = await asyncio.start_server(accept, host, int(port))
    child = await asyncio.create_subprocess_exec(*argv)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, child.send_signal, sig)  # the agent stops as it would anywhere
    code = await child.wait()
    server.close()
    return code


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", required=True)
    parser.add_argument("--unix", required=True)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    sys.exit(asyncio.run(_inside(args.listen, args.unix, argv)))


def netns_argv(listen: str, unix: Path, agent_argv: list[str]) -> list[str]:
    """The command that runs `agent_argv` partitionable (see the module doc)."""
    return ["unshare", "-n", "--", sys.executable, os.path.abspath(__file__), "--listen", listen,
            "--unix", str(unix), "--", *agent_argv]  # fmt: skip


if __name__ == "__main__":
    main()
