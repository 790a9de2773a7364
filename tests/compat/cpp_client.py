"""Runs tests/compat/cpp_driver.py (the official C++ client) as a bounded subprocess.

HOME and the client's log directory point into the test's tmp dir, so the native library
writes nothing under the real home; on failure the driver's stderr and the tail of the C++
client's own log are in the assertion message.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DRIVER = Path(__file__).with_name("cpp_driver.py")


@dataclass
class Delivery:
    """What the C++ PushConsumer handed to its listener, as printed by the driver."""

    topic: str
    body: str
    tags: str | None
    keys: str | None
    id: str
    queue_id: int
    queue_offset: int
    reconsume_times: int
    props: dict[str, str | None]
    failed: bool = False


class CppClient:
    def __init__(self, namesrv_addr: str, work_dir: Path) -> None:
        self.namesrv_addr = namesrv_addr
        self.work_dir = work_dir
        self.log_dir = work_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)

    def env(self) -> dict[str, str]:
        return dict(os.environ, HOME=str(self.work_dir))

    def _args(self, command: str, group: str, *extra: str) -> list[str]:
        return [sys.executable, str(DRIVER), command, "--namesrv", self.namesrv_addr, "--group", group,
                "--log-dir", str(self.log_dir), *extra]

    def log_tail(self, lines: int = 40) -> str:
        text = []
        for path in sorted(self.work_dir.rglob("*.log*")):  # the client logs under $HOME/logs too
            if path.is_file():
                text.extend(path.read_text(errors="replace").splitlines()[-lines:])
        return "\n".join(text[-lines:])

    def check_exit(self, what: str, code: int | None, err: bytes) -> None:
        assert code == 0, f"C++ {what} exited {code}:\n{err.decode(errors='replace')[-3000:]}\n{self.log_tail()}"

    async def produce(self, group: str, messages: list[dict[str, Any]], mode: str = "sync",
                      timeout: float = 60.0) -> list[dict[str, Any]]:
        """Send ``messages`` (driver JSON specs); one result per message, or one per batch."""
        proc = await asyncio.create_subprocess_exec(
            *self._args("produce", group, "--mode", mode), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=self.env())
        stdin = "".join(json.dumps(m) + "\n" for m in messages).encode()
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise AssertionError(f"C++ producer timed out after {timeout}s\n{self.log_tail()}") from None
        self.check_exit("producer", proc.returncode, err)
        results = [json.loads(line) for line in out.decode().splitlines()]
        assert len(results) == (1 if mode == "batch" else len(messages)), out.decode()
        return results

    def consumer(self, group: str, topic: str, *, expect: int, expression: str = "*", orderly: bool = False,
                 idle: float = 2.0, timeout: float = 60.0, props: tuple[str, ...] = (),
                 fail_first: tuple[str, ...] = ()) -> CppConsumer:
        args = self._args("consume", group, "--topic", topic, "--expression", expression, "--expect", str(expect),
                          "--idle", str(idle), "--timeout", str(timeout), "--props", ",".join(props),
                          "--fail-first", ",".join(fail_first))
        return CppConsumer(self, args + (["--orderly"] if orderly else []), timeout)

    async def consume(self, group: str, topic: str, *, expect: int, **kwargs: Any) -> list[Delivery]:
        """Run a PushConsumer until ``expect`` messages came and it has been idle; return them."""
        consumer = self.consumer(group, topic, expect=expect, **kwargs)
        await consumer.start()
        return await consumer.wait()


class CppConsumer:
    """One C++ PushConsumer process; deliveries are read while it runs."""

    def __init__(self, client: CppClient, args: list[str], timeout: float) -> None:
        self._client = client
        self._args = args
        self._timeout = timeout
        self.deliveries: list[Delivery] = []
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._proc = await asyncio.create_subprocess_exec(
            *self._args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=self._client.env())
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        async for line in self._proc.stdout:
            record = json.loads(line)
            if "done" not in record:
                self.deliveries.append(Delivery(**record))

    async def wait_for(self, count: int, timeout: float = 30.0) -> None:
        """Until at least ``count`` deliveries were printed."""
        async def reached() -> None:
            while len(self.deliveries) < count:
                assert self._proc is not None and self._proc.returncode is None, "C++ consumer exited early"
                await asyncio.sleep(0.05)
        try:
            await asyncio.wait_for(reached(), timeout)
        except TimeoutError:
            raise AssertionError(f"{len(self.deliveries)} of {count} deliveries after {timeout}s\n"
                                 f"{self._client.log_tail()}") from None

    async def wait(self) -> list[Delivery]:
        """Until the driver stops by itself (expected count reached, then idle), checked exit."""
        assert self._proc is not None and self._reader is not None
        try:
            await asyncio.wait_for(self._proc.wait(), self._timeout + 30)
        except TimeoutError:
            await self.kill()
            raise AssertionError(f"C++ consumer hung past its timeout\n{self._client.log_tail()}") from None
        await self._reader
        assert self._proc.stderr is not None
        self._client.check_exit("consumer", self._proc.returncode, await self._proc.stderr.read())
        return self.deliveries

    async def kill(self) -> None:
        """SIGKILL: no shutdown, so no final offset persistence."""
        assert self._proc is not None and self._reader is not None
        if self._proc.returncode is None:
            self._proc.send_signal(signal.SIGKILL)
        await self._proc.wait()
        await self._reader
