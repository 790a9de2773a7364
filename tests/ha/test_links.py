"""The HA links against a peer that speaks the protocol by hand: where a master starts, its
heartbeats, the slave's reports and heartbeats, and which side closes a link when (a wrong
offset, a slave ahead of its master, a silent peer). And `lakemq tier run` refusing a
slave's store unless told."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

from lakemq.broker.broker_controller import BrokerController
from lakemq.broker.config import BrokerConfig
from lakemq.broker.ha.config import check_role
from lakemq.broker.ha.wire import REPORT, TRANSFER_HEADER
from lakemq.common.message import MessageExtBrokerInner
from lakemq.launcher import lakemq_command
from lakemq.store.config import BrokerRole, StoreConfig
from lakemq.store.put_request import MessagesPut
from tests.broker.wire import in_process_broker

HA_FAST = {"haSendHeartbeatInterval": "300", "haHousekeepingInterval": "1500"}


def _put(broker: BrokerController, n: int, size: int = 900) -> None:
    assert broker.store is not None
    for i in range(n):
        msg = MessageExtBrokerInner(topic="TopicHa", body=b"%d" % i + b"z" * size, queue_id=0,
                                    born_host="127.0.0.1:1", born_timestamp=1)
        assert broker.store.put(MessagesPut.of(msg)).is_ok


async def _transfer(reader: asyncio.StreamReader, timeout: float = 5.0) -> tuple[int, bytes]:
    offset, size = TRANSFER_HEADER.unpack(await asyncio.wait_for(reader.readexactly(TRANSFER_HEADER.size), timeout))
    return offset, await asyncio.wait_for(reader.readexactly(size), timeout)


async def _closed_by_peer(reader: asyncio.StreamReader, within: float) -> float:
    """Seconds until the peer closed (reading and dropping whatever it still sends)."""
    started = time.monotonic()
    while await asyncio.wait_for(reader.read(65536), within):
        pass
    return time.monotonic() - started


@contextlib.asynccontextmanager
async def _master(tmp_path: Path, **conf: str) -> AsyncIterator[tuple[BrokerController, str, int]]:
    (tmp_path / "m").mkdir()
    async with in_process_broker(tmp_path / "m", **HA_FAST, **conf) as (broker, _client):
        host, _, port = broker.ha_server_addr.rpartition(":")
        yield broker, host, int(port)


async def test_a_master_starts_an_empty_slave_at_its_last_file_and_heartbeats(tmp_path: Path) -> None:
    async with _master(tmp_path, mappedFileSizeCommitLog=str(64 << 10)) as (broker, host, port):
        _put(broker, 150)  # about 2.1 files of 64 KiB
        assert broker.store is not None
        end = broker.store.get_max_phy_offset()
        last_file = end - end % (64 << 10)
        assert last_file >= 128 << 10
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(REPORT.pack(0))
        got, offset = b"", None
        while len(got) < end - last_file:
            at, data = await _transfer(reader)
            if offset is None:
                offset = at
            assert at == offset + len(got) and len(data) <= 32 * 1024
            got += data
        assert offset == last_file
        written = broker.store.commit_log.get_message(last_file, len(got))
        assert written == got
        writer.write(REPORT.pack(end))
        assert await _transfer(reader) == (end, b"")  # nothing new: a heartbeat at where it stands
        writer.close()


async def test_a_master_closes_a_silent_slave_and_one_ahead_of_it(tmp_path: Path) -> None:
    async with _master(tmp_path) as (broker, host, port):
        _put(broker, 10)
        assert broker.store is not None
        end = broker.store.get_max_phy_offset()
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(REPORT.pack(end))  # caught up; then silent
        assert await _transfer(reader) == (end, b"")
        assert 1.0 < await _closed_by_peer(reader, 5.0) < 4.0  # haHousekeepingInterval is 1.5 s
        assert broker.replication.connected == 0

        reader, writer = await asyncio.open_connection(host, port)
        writer.write(REPORT.pack(end))
        await _transfer(reader)
        writer.write(REPORT.pack(end + 100))  # claims bytes this master never had
        assert await _closed_by_peer(reader, 2.0) < 1.0
        writer.close()

        # Ahead from its first report: closed at once, and the report acknowledges nothing
        # (a SYNC_MASTER's puts at those offsets would be answered as replicated).
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(REPORT.pack(end + 200))
        assert await _closed_by_peer(reader, 2.0) < 1.0
        writer.close()
        assert broker.replication.acked_offset <= end


class _FakeMaster:
    """A TCP server speaking the master's side by hand: records the offsets each connection
    reported and runs ``script`` on it."""

    def __init__(self) -> None:
        self.connections = 0
        self.reports: list[list[int]] = []
        self.script = self._silent

    async def _silent(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reports: list[int]) -> None:
        while data := await reader.read(8):
            reports.append(REPORT.unpack(data.rjust(8, b"\0")[-8:])[0])

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        reports: list[int] = []
        self.reports.append(reports)
        with contextlib.suppress(ConnectionError):
            reports.append(REPORT.unpack(await reader.readexactly(8))[0])
            await self.script(reader, writer, reports)
        writer.close()


async def test_a_slave_reports_heartbeats_and_drops_silent_or_wrong_masters(tmp_path: Path) -> None:
    fake = _FakeMaster()
    server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
    address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    (tmp_path / "s").mkdir()
    async with in_process_broker(tmp_path / "s", brokerRole="SLAVE", brokerId="1", haMasterAddress=address,
                                 **HA_FAST) as (slave, _client):
        assert slave.ha_client is not None
        # A silent master: the slave reports every 300 ms, gives up after 1.5 s, connects again.
        deadline = time.monotonic() + 10
        while fake.connections < 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        first = fake.reports[0]
        assert first[0] == 0 and 3 <= len(first) <= 8  # the empty slave's offset, then heartbeats

        dropped_after: list[float] = []

        async def wrong_offset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                               reports: list[int]) -> None:
            writer.write(TRANSFER_HEADER.pack(0, 0) + TRANSFER_HEADER.pack(4096, 0))  # not where it ended
            await writer.drain()
            sent = time.monotonic()
            await fake._silent(reader, writer, reports)
            dropped_after.append(time.monotonic() - sent)

        fake.script = wrong_offset
        while len(dropped_after) < 2:
            assert time.monotonic() < deadline + 10
            await asyncio.sleep(0.05)
        assert max(dropped_after) < 0.5  # at once, not after the 1.5 s housekeeping
    server.close()
    await server.wait_closed()


def test_tiering_refuses_a_slaves_store_unless_told(tmp_path: Path) -> None:
    conf = tmp_path / "slave.conf"
    conf.write_text(f"storePathRootDir={tmp_path / 'store'}\nbrokerRole=SLAVE\nbrokerId=1\n")
    done = subprocess.run(lakemq_command("tier", "run", "-c", str(conf), "--lake", str(tmp_path / "lake")),
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "LAKEMQ_LOG_DIR": str(tmp_path / "logs")})
    assert done.returncode != 0
    assert "SLAVE's store: tiering runs from the master" in done.stderr and "--from-slave" in done.stderr


def test_a_slave_needs_a_broker_id_and_a_master_gets_id_0(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerRole=SLAVE\nbrokerId=0\nlistenPort=0\n")
    done = subprocess.run(lakemq_command("broker", "-c", str(conf), "--data-dir", str(tmp_path / "store"),
                                         "--log-dir", str(tmp_path / "logs")),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert "brokerRole=SLAVE needs a brokerId > 0 (0 is the master's id), got brokerId=0" in done.stderr
    assert not (tmp_path / "store" / "commitlog").exists()  # refused before anything was opened

    master = BrokerConfig(broker_id=3)
    assert check_role(master, StoreConfig(broker_role=BrokerRole.SYNC_MASTER)).broker_id == 0
    slave = BrokerConfig(broker_id=2)
    assert check_role(slave, StoreConfig(broker_role=BrokerRole.SLAVE)) is slave
