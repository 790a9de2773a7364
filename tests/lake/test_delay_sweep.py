"""Delay sweep against a real NameServer and broker, with a lake built by the tiering job:
due delayed and timer messages that never reached their topic are delivered once (a recalled
timer message never), messages the broker
delivered itself or that are not due are left alone, and re-runs deliver nothing twice (also
when the outcome table lost a run's records: that re-run is `lakemq sweep delay`)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from lake_helpers import read_all

from lakemq.client import Message, SyncProducer
from lakemq.common.message import MessageConst
from lakemq.jobs.broker_lookup import broker_lookup
from lakemq.jobs.delay_sweep import OUTCOME_TABLE, find_due, sweep
from lakemq.jobs.tier_run import tier_run
from lakemq.store.delay_levels import DelayLevels
from lakemq.tiering.config import TieringConfig
from tests.cli_in_process import lakemq_in_process
from tests.cluster import start_cluster

LEVELS = "1s 2h"
DELAYED, TIMER, WHEEL = "SweepDelayed", "SweepTimer", "SweepWheel"
HOUR = 3_600_000


def _wait_for(namesrv: str, topic: str, count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while len(read_all(namesrv, topic)) < count:
        assert time.monotonic() < deadline, f"{topic} did not reach {count} messages"
        time.sleep(0.3)


@pytest.mark.slow
def test_delay_sweep_delivers_due_messages_once(spark: Any, tmp_path: Path) -> None:
    conf = {"mappedFileSizeCommitLog": str(64 << 10), "messageDelayLevel": LEVELS}
    with start_cluster(tmp_path / "cluster", broker_conf=conf) as cluster:
        ns = cluster.namesrv_addr
        with SyncProducer("SweepProducer", namesrv_addr=ns) as producer:
            producer.create_topic(DELAYED, 2)
            producer.create_topic(TIMER, 2)
            producer.create_topic(WHEEL, 2)
            plain = [producer.send(Message(DELAYED, f"plain-{i}".encode())).msg_id for i in range(2)]
            long_delay: dict[str, bytes] = {}
            for i in range(5):  # level 2 = 2 h: still waiting in SCHEDULE_TOPIC_XXXX
                msg = Message(
                    DELAYED, f"late-{i}".encode() * 800, properties={"n": str(i)}
                )  # > 4 KiB: compressed
                msg.delay_time_level, msg.tags, msg.keys = 2, "late", [f"late{i}"]
                long_delay[producer.send(msg).msg_id] = msg.body
            for i in range(3):  # level 1 = 1 s: the broker delivers these itself
                msg = Message(DELAYED, f"soon-{i}".encode())
                msg.delay_time_level = 1
                producer.send(msg)
            now = int(time.time() * 1000)
            timers: dict[str, bytes] = {}
            for i in range(6):
                body = f"timer-{i}".encode()
                start = now + (HOUR if i < 4 else 10 * HOUR)
                sent = producer.send(
                    Message(TIMER, body, properties={MessageConst.START_DELIVER_TIME: str(start)})
                )
                if i < 4:
                    timers[sent.msg_id] = body
            wheel: dict[str, bytes] = {}
            for i in range(4):  # timer messages due in 2 h; the last one is recalled
                body = f"wheel-{i}".encode()
                sent = producer.send(Message(WHEEL, body, properties={MessageConst.TIMER_DELAY_SEC: "7200"}))
                wheel[sent.msg_id] = body
            assert producer.recall_message(WHEEL, sent.recall_handle or "") == sent.msg_id
            del wheel[sent.msg_id]
            producer.send(Message(WHEEL, b"wheel-soon", properties={MessageConst.TIMER_DELAY_MS: "300"}))
        _wait_for(ns, DELAYED, 2 + 3)
        _wait_for(ns, WHEEL, 1)
        lake = tmp_path / "lake"
        assert list(find_due(spark, str(lake), now_ms=now)) == [], "nothing tiered yet: nothing due"
        tier_run(
            spark,
            store_dir=tmp_path / "cluster" / "broker-a" / "store",
            broker_name="broker-a",
            config=TieringConfig(lake_uri=str(lake), tier_seal_idle_ms=1),
            upkeep=False,
        )

        def run() -> Any:
            with SyncProducer("SweepSender", namesrv_addr=ns) as sender, broker_lookup(ns) as found:
                return sweep(
                    spark,
                    lake_uri=str(lake),
                    send_batch=sender.send_batch,
                    found_at_broker=found,
                    now_ms=now + 3 * HOUR,
                    levels=DelayLevels(LEVELS),
                )

        first = run()
        assert (first.due, first.sent, first.found) == (12, 12, 0)
        delayed = read_all(ns, DELAYED)
        timer_topic = read_all(ns, TIMER)
        wheel_topic = read_all(ns, WHEEL)

        again = run()
        assert (again.due, again.sent) == (0, 0), "a re-run must find everything recorded"
        shutil.rmtree(lake / OUTCOME_TABLE)  # as if a run died after sending, before recording
        conf_file = tmp_path / "broker.conf"
        conf_file.write_text(f"messageDelayLevel={LEVELS}\n")
        cli = lakemq_in_process(spark, "sweep", "delay", "-n", ns, "--lake", str(lake), "-c", str(conf_file),
                                "--now", str(now + 3 * HOUR), "--master", "local[1]",
                                env={"LAKEMQ_LOG_DIR": str(tmp_path / "logs")})
        assert cli.returncode == 0, cli.stderr[-2000:]
        assert (
            "delivered 0 due delayed message(s)" in cli.stdout
            and "12 were already at the broker" in cli.stdout
        )
        assert len(read_all(ns, DELAYED)) == len(delayed) and len(read_all(ns, TIMER)) == len(timer_topic)
        assert len(read_all(ns, WHEEL)) == len(wheel_topic)

    assert len(delayed) == 2 + 3 + 5
    copies = [m for m in delayed if m.body.startswith(b"late-")]
    assert sorted(m.unique_key for m in copies) == sorted(
        long_delay
    )  # the broker's re-put keeps UNIQ_KEY too
    for m in copies:
        assert m.body == long_delay[m.unique_key]
        assert (m.tags, m.keys[0][:4]) == ("late", "late")
        assert (
            MessageConst.DELAY_TIME_LEVEL not in m.properties and MessageConst.REAL_TOPIC not in m.properties
        )
    assert {m.unique_key for m in delayed} >= set(plain)

    assert len(timer_topic) == 6 + 4
    timer_copies = [m for m in timer_topic if MessageConst.ORIGIN_MESSAGE_ID in m.properties]
    assert sorted(m.properties[MessageConst.ORIGIN_MESSAGE_ID] for m in timer_copies) == sorted(timers)
    for m in timer_copies:
        assert m.body == timers[m.properties[MessageConst.ORIGIN_MESSAGE_ID]]
        assert MessageConst.START_DELIVER_TIME not in m.properties

    # The timer messages: the broker delivered the short one, the sweep the three long ones (their
    # UNIQ_KEY and due time kept), never the recalled one.
    assert sorted(m.body for m in wheel_topic) == sorted([b"wheel-soon", *wheel.values()])
    for m in wheel_topic:
        if m.body != b"wheel-soon":
            assert wheel[m.unique_key or ""] == m.body and MessageConst.REAL_TOPIC not in m.properties
            assert int(m.properties[MessageConst.TIMER_OUT_MS]) > now
