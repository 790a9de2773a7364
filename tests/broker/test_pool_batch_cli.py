"""Business pool fast failure, batch body decoding, and broker config loading."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from lakemq.broker.business_pool import BusinessPool
from lakemq.cli.broker_cmds import load_broker_configs
from lakemq.common.codes import ResponseCode
from lakemq.common.message_batch import decode_batch
from lakemq.errors import ConfigError, MessageIllegalError, SystemBusyError
from lakemq.store.config import DEFAULT_STORE_ROOT
from tests.broker.wire import encode_batch


def test_requests_waiting_too_long_are_refused_at_once() -> None:
    """One slow store call: the requests queued behind it get SYSTEM_BUSY after max_wait,
    long before the slow call ends; later requests run again."""
    release = threading.Event()

    async def main() -> tuple[list[object], float]:
        pool = BusinessPool("send", threads=1, capacity=100, max_wait_ms=100)
        slow = asyncio.create_task(pool.run(lambda: release.wait(5) and "slow"))
        await asyncio.sleep(0.02)
        started = time.monotonic()
        queued = [asyncio.create_task(pool.run(lambda: "queued")) for _ in range(3)]
        results = await asyncio.gather(*queued, return_exceptions=True)
        refused_after = time.monotonic() - started
        release.set()
        results.append(await slow)
        results.append(await pool.run(lambda: "after"))
        assert pool.rejected == 3
        await pool.shutdown()
        return results, refused_after

    results, refused_after = asyncio.run(main())
    assert all(
        isinstance(r, SystemBusyError)
        and r.code == ResponseCode.SYSTEM_BUSY
        and "TIMEOUT_CLEAN_QUEUE" in r.remark
        for r in results[:3]
    )
    assert results[3:] == ["slow", "after"]
    assert 0.09 < refused_after < 1.0


def test_an_idle_pool_sets_no_timer() -> None:
    """The wait check runs only while requests wait: a pool whose threads keep up, and one
    whose queue drained, schedule nothing on the loop (an idle broker used to wake every
    10 ms per pool)."""
    release = threading.Event()

    async def main() -> tuple[int, int, int]:
        loop = asyncio.get_running_loop()
        timers = 0
        call_later = loop.call_later

        def counting(delay: float, callback: Callable[..., object], *args: object,
                     **kwargs: object) -> asyncio.TimerHandle:
            nonlocal timers
            timers += getattr(callback, "__self__", None) is pool  # asyncio.sleep's own timers aside
            return call_later(delay, callback, *args, **kwargs)  # type: ignore[arg-type]

        loop.call_later = counting  # type: ignore[method-assign]
        pool = BusinessPool("send", threads=2, capacity=100, max_wait_ms=1000)
        for _ in range(50):
            assert await pool.run(lambda: "done") == "done"
        kept_up = timers
        slow = [asyncio.create_task(pool.run(lambda: release.wait(5))) for _ in range(2)]
        queued = asyncio.create_task(pool.run(lambda: "queued"))
        await asyncio.sleep(0.1)  # the queued request waits: checked every 10 ms
        while_waiting = timers
        release.set()
        assert await queued == "queued" and all(await asyncio.gather(*slow))
        await asyncio.sleep(0.05)
        drained = timers
        await asyncio.sleep(0.1)
        await pool.shutdown()
        return kept_up, while_waiting, timers - drained

    kept_up, while_waiting, after_drain = asyncio.run(main())
    assert kept_up == 0
    assert 3 <= while_waiting <= 15
    assert after_drain == 0


def test_full_queue_refuses_new_work() -> None:
    release = threading.Event()

    async def main() -> None:
        pool = BusinessPool("pull", threads=1, capacity=1)
        running = asyncio.create_task(pool.run(lambda: release.wait(5)))
        await asyncio.sleep(0.02)
        waiting = asyncio.create_task(pool.run(lambda: "second"))
        await asyncio.sleep(0)
        with pytest.raises(SystemBusyError, match="OVERLOAD"):
            await pool.run(lambda: "third")
        release.set()
        assert await waiting == "second" and await running is True
        await pool.shutdown()

    asyncio.run(main())


def test_batch_decoding_round_trip_and_refusals() -> None:
    body = encode_batch([b"one", b"", b"three"], tags="T")
    entries = decode_batch(body)
    assert [e.body for e in entries] == [b"one", b"", b"three"]
    assert all(e.properties == "TAGS\x01T\x02" for e in entries)
    for broken in (body[:-1], body + b"\0", b"", body[:10]):
        with pytest.raises(MessageIllegalError):
            decode_batch(broken)


def test_broker_configs_from_conf_and_flags(tmp_path: Path) -> None:
    broker, store, _ = load_broker_configs(None)
    assert store.store_path_root_dir == str(Path(DEFAULT_STORE_ROOT).resolve())
    assert broker.listen_port == 10911 and broker.namesrv_addr == ("127.0.0.1:9876",)
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-x\nstorePathRootDir=/var/tmp/lakemq-store\nflushDiskType=SYNC_FLUSH\n")
    broker, store, _ = load_broker_configs(str(conf), port=0, namesrv="127.0.0.1:1;127.0.0.1:2")
    assert broker.broker_name == "broker-x" and broker.listen_port == 0
    assert broker.namesrv_addr == ("127.0.0.1:1", "127.0.0.1:2")
    assert store.store_path_root_dir == "/var/tmp/lakemq-store" and store.flush_disk_type.name == "SYNC_FLUSH"
    _, store, _ = load_broker_configs(str(conf), data_dir=str(tmp_path / "d"))
    assert store.store_path_root_dir == str((tmp_path / "d").resolve())
    conf.write_text("brokerNmae=typo\n")
    with pytest.raises(ConfigError, match="brokerNmae"):
        load_broker_configs(str(conf))


def test_shipped_broker_conf_binds() -> None:
    conf = Path(__file__).resolve().parents[2] / "conf" / "broker.conf"
    broker, store, _ = load_broker_configs(str(conf))
    assert broker.broker_name == "broker-a" and store.max_message_size == 4 * 1024 * 1024


def test_rocketmq_spelling_of_broker_ip1(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerIP1=127.0.0.2\n")
    broker, _, _ = load_broker_configs(str(conf))
    assert broker.broker_ip1 == "127.0.0.2" and broker.broker_addr == "127.0.0.2:10911"
