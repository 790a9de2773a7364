"""What every peer offers the benchmark: a server it starts and stops, and an asyncio client.

A :class:`Peer` is a context manager: entering makes a private temporary directory, installs
the server if needed, starts it on free loopback ports and waits until it serves; leaving stops
every process it started (also on exceptions and Ctrl-C) and removes the directory.

All clients are asyncio so that every peer is driven the same way: producers are asyncio
tasks in one client process, each with its own connection.
"""

from __future__ import annotations

import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from enum import Enum
from pathlib import Path
from types import TracebackType
from typing import Self

from bench.peers.cpu import process_cpu_seconds
from bench.peers.process import PeerUnavailable, ServerProcess, session_pids

__all__ = ["Durability", "OnBody", "Peer", "PeerClient", "TopicProducer"]

OnBody = Callable[[bytes], None]


class Durability(Enum):
    """Which lakemq flush mode a peer's acknowledgement is comparable to."""

    ASYNC = "ASYNC_FLUSH"  # acked once written (page cache); flushed to disk in the background
    SYNC = "SYNC_FLUSH"  # acked once fsync'ed


class TopicProducer(ABC):
    """One producer connection writing to one topic; each send returns once the peer acked."""

    @abstractmethod
    async def send(self, body: bytes) -> None: ...

    @abstractmethod
    async def send_batch(self, bodies: Sequence[bytes]) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...


class PeerClient(ABC):
    """The benchmark's view of a running peer through its usual Python client."""

    @abstractmethod
    async def create_topic(self, topic: str) -> None:
        """Make ``topic`` (stream, queue, subject) exist with the peer's durable settings."""

    @abstractmethod
    async def producer(self, topic: str) -> TopicProducer: ...

    @abstractmethod
    async def consume(self, topic: str, group: str, expected: int, on_body: OnBody,
                      timeout: float, ready: Callable[[], None] = lambda: None) -> int:
        """Read ``topic`` from its start as consumer group ``group``, acknowledging as the peer
        expects, until ``expected`` messages arrived or ``timeout`` seconds passed; call
        ``ready`` once subscribed. Returns how many arrived. ``on_body`` may be called on the
        client's own threads (a listener in worker threads, as its users' is)."""

    async def consume_pull(self, topic: str, expected: int, on_body: OnBody, timeout: float) -> int | None:
        """Read ``topic`` from its start by pulling, where the peer's client has a pull API
        besides the consumer group that ``consume`` uses; None where it has not."""
        return None

    @abstractmethod
    async def close(self) -> None: ...


class Peer(ABC):
    """A server under test. Subclasses set the class attributes and implement the hooks."""

    key: str  # short id used on the command line, e.g. "redis-everysec"
    title: str  # the table's row name
    client_name = "python"  # the row's client: its usual Python client, or "java" (the Java bench driver)
    durability: Durability
    batch_note: str  # how "a batch of 32" is sent with this client
    settings: str  # the durability settings, as the server is configured

    def __init__(self) -> None:
        self.workdir: Path | None = None
        self.processes: list[ServerProcess] = []
        self.broker: ServerProcess | None = None  # whose CPU is measured; default the last spawned

    def cpu_seconds(self) -> float:
        """CPU time so far of the broker's processes (its whole session: beam.smp's helpers,
        a JVM's threads)."""
        broker = self.broker or (self.processes[-1] if self.processes else None)
        return process_cpu_seconds(session_pids(broker.sid)) if broker is not None else 0.0

    def __enter__(self) -> Self:
        self.workdir = Path(tempfile.mkdtemp(prefix=f"lakemq-bench-{self.key}-"))
        try:
            self.start(self.workdir)
        except PeerUnavailable as exc:
            tail = self.processes[-1].log_tail(8) if self.processes else ""
            self.__exit__(None, None, None)
            raise PeerUnavailable(f"{exc}\n{tail}" if tail else str(exc)) from exc
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            # Last started first: a broker stops before its name server, RabbitMQ before epmd.
            while self.processes:
                self.processes.pop().stop()
        finally:
            if self.workdir is not None:
                shutil.rmtree(self.workdir, ignore_errors=True)
                self.workdir = None

    def spawn(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> ServerProcess:
        assert self.workdir is not None
        proc = ServerProcess(name, argv, self.workdir / f"{name}.log", env=env, cwd=self.workdir)
        self.processes.append(proc)
        return proc

    @abstractmethod
    def start(self, workdir: Path) -> None:
        """Install if needed, start the server(s) with :meth:`spawn`, and wait until ready."""

    @abstractmethod
    def client(self) -> PeerClient: ...
