"""Transaction sweep end to end: a real NameServer and broker (cold reads on, so it deletes the
CommitLog files the lake holds), a producer process that commits, rolls back, leaves
transactions unknown (one of them past transactionCheckMax) and dies, the tiering job, and the
sweep. The halves then exist only in the lake; the sweep hands them back to the broker, a new
producer of the group commits on the check-backs, consumers get each message once, the
`transactions` table ends COMMIT / ROLLBACK as it should, and re-runs change nothing."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from lakemq.client import Message, MessageExt, SyncProducer
from lakemq.client.config import ClientConfig
from lakemq.client.sync import SyncTransactionProducer
from lakemq.client.transaction_producer import LocalTransactionState
from lakemq.jobs.sql import run_sql
from lakemq.jobs.tier_run import tier_run
from lakemq.jobs.transaction_sweep import run_transaction_sweep, sweep_transactions
from lakemq.tiering.config import TieringConfig
from lakemq.tiering.seal import commitlog_files
from tests.cli_in_process import lakemq_in_process
from tests.cluster import cold_read_broker_conf, start_cluster
from tests.transaction.helpers import Receiver, queue_max_offset, wait_until

TOPIC, GROUP, BROKER = "TxSwept", "SweptTxProducer", "broker-a"
HALF, OP = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"
ROOT = Path(__file__).resolve().parents[2]
CHECK_MAX = 3

# The first producer: "stale" is checked (and answered UNKNOW) until the broker has counted
# CHECK_MAX checks; after the test restarts the broker (no more check passes) and says "go", it
# sends c* (commit), r* (rollback) and u* (unknown), and once the test has seen the broker store
# the Op messages of its oneway END_TRANSACTIONs and says "exit", it dies without a goodbye.
_FIRST_PRODUCER = textwrap.dedent("""
    import os, sys, threading
    from lakemq.client import Message
    from lakemq.client.config import ClientConfig
    from lakemq.client.sync import SyncTransactionProducer
    from lakemq.client.transaction_producer import LocalTransactionState

    checked = threading.Event()
    count = [0]

    class Listener:
        def execute_local_transaction(self, msg, arg):
            return {b"c": LocalTransactionState.COMMIT_MESSAGE,
                    b"r": LocalTransactionState.ROLLBACK_MESSAGE}.get(msg.body[:1], LocalTransactionState.UNKNOW)
        def check_local_transaction(self, msg):
            count[0] += 1
            if count[0] >= %(max)d:
                checked.set()
            return LocalTransactionState.UNKNOW

    ns, topic, group = sys.argv[1], sys.argv[2], sys.argv[3]
    config = ClientConfig(namesrv_addr=ns, heartbeat_broker_interval=1000)
    producer = SyncTransactionProducer(group, Listener(), client_config=config)
    producer.start()
    producer.create_topic(topic, 2)
    producer.send_message_in_transaction(Message(topic, b"stale"))
    assert checked.wait(60), "the broker never checked"
    print("checked", flush=True)
    assert sys.stdin.readline().strip() == "go"
    for body in (b"c0", b"r0", b"u0", b"c1", b"r1", b"u1", b"u2"):
        producer.send_message_in_transaction(Message(topic, body))
    print("sent", flush=True)
    assert sys.stdin.readline().strip() == "exit"
    os._exit(0)
""") % {"max": CHECK_MAX}


class _CommitOnCheck:
    """The new producer of the group: commits whatever it is asked about."""

    def __init__(self) -> None:
        self.checked: Counter[bytes] = Counter()
        self.lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        raise AssertionError("this producer sends nothing")

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        with self.lock:
            self.checked[msg.body] += 1
        return LocalTransactionState.COMMIT_MESSAGE


def _tier(spark: Any, store: Path, lake: Path) -> None:
    tier_run(spark, store_dir=store, broker_name=BROKER, config=TieringConfig(lake_uri=str(lake), tier_seal_idle_ms=1),
             upkeep=False)


def _states(spark: Any, lake: Path, query: str = "SELECT * FROM transactions") -> dict[str, dict[str, Any]]:
    return {r["uniq_key"]: r.asDict() for r in run_sql(spark, str(lake), query).collect()}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sweep_settles_lake_only_transactions(spark: Any, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    store = tmp_path / BROKER / "store"
    with start_cluster(tmp_path, brokers=(BROKER,), broker_conf=cold_read_broker_conf(
            lake, mappedFileSizeConsumeQueue=str(20 * 40), transactionTimeOut="1000",
            transactionCheckInterval="400", transactionCheckMax="40")) as cluster:
        ns, broker = cluster.namesrv_addr, cluster.broker_addr()
        first = subprocess.Popen([sys.executable, "-c", _FIRST_PRODUCER, ns, TOPIC, GROUP], cwd=ROOT, text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert first.stdout is not None and first.stdin is not None
            assert first.stdout.readline().strip() == "checked", first.stderr.read() if first.stderr else ""
            # From now on the broker makes no check passes of its own: whatever is pending stays so.
            cluster.restart_broker(BROKER, {"transactionCheckInterval": "3600000",
                                            "transactionCheckMax": str(CHECK_MAX)})
            ops = queue_max_offset(broker, OP)
            first.stdin.write("go\n")
            first.stdin.flush()
            assert first.stdout.readline().strip() == "sent", first.stderr.read() if first.stderr else ""
            # The END_TRANSACTIONs are oneway: the broker stores an Op per commit or rollback (4).
            wait_until(lambda: queue_max_offset(broker, OP) >= ops + 4, 30, "the broker storing the four Ops")
            first.stdin.write("exit\n")
            first.stdin.flush()
            assert first.wait(30) == 0
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
        # Fill two more CommitLog files so the ones holding the half messages are full.
        with SyncProducer("SweptFiller", client_config=ClientConfig(namesrv_addr=ns)) as filler:
            filler.create_topic("TxFiller", 1)
            for i in range(150):
                filler.send(Message("TxFiller", f"filler-{i}:".encode() + b"x" * 1000))
        half_end = queue_max_offset(broker, HALF)
        _tier(spark, store, lake)
        last_half = int(run_sql(spark, str(lake), "SELECT max(commitlog_offset) FROM transactions_half")
                        .collect()[0][0])
        # The broker deletes what the lake holds: afterwards the halves exist only in the lake.
        wait_until(lambda: commitlog_files(store)[0].start > last_half, 60, "the broker expiring tiered files")
        assert queue_max_offset(broker, HALF) == half_end

        derived = _states(spark, lake)  # no table yet: the view derived from the messages table
        assert {derived[k]["state"] for k in derived} == {"COMMIT", "ROLLBACK", "PENDING"}

        # A sweep that cannot reach the half messages' broker (not a master of the cluster it
        # sees) marks them UNKNOWN, puts nothing anywhere, and the next run asks again.
        def unreachable(addr: str, records: bytes) -> list[dict[str, Any]]:
            raise AssertionError(f"no broker may be asked, got {addr}")

        blind = sweep_transactions(spark, lake_uri=str(lake), hand_back=unreachable, brokers=set())
        assert (blind.asked, blind.verdicts) == (4, {"unreachable": 4})
        assert blind.counts == {"COMMIT": 2, "ROLLBACK": 2, "UNKNOWN": 4}
        assert {r["broker_verdict"] for r in blind.pending} == {
            f"unreachable: broker {broker} is not a master of the cluster"}
        assert queue_max_offset(broker, HALF) == half_end

        listener = _CommitOnCheck()
        client = ClientConfig(namesrv_addr=ns, instance_name="sweep-takeover")
        receiver = Receiver(ns, TOPIC, "SweptConsumer")
        with SyncTransactionProducer(GROUP, listener, client_config=client):
            settings = {"lake_uri": str(lake), "namesrv": ns}
            sweep1 = run_transaction_sweep(settings)
            assert sweep1["asked"] == 4
            assert sweep1["verdicts"] == {"checking": 3, "rolled_back": 1}
            assert sweep1["counts"] == {"COMMIT": 2, "ROLLBACK": 3, "PENDING": 3}
            assert sorted(r["state"] for r in sweep1["pending"]) == ["PENDING"] * 3
            after_first = sweep1["table_version"]
            half_after_first = queue_max_offset(broker, HALF)
            assert half_after_first == half_end + 3, "one copy put back per unknown transaction"

            sweep2 = run_transaction_sweep(settings)
            assert (sweep2["asked"], sweep2["written"], sweep2["table_version"]) == (0, 0, None)
            assert queue_max_offset(broker, HALF) == half_after_first, "a second run re-injects nothing"

            receiver.consumer.start()
            try:
                receiver.wait_for({b"c0", b"c1", b"u0", b"u1", b"u2"}, timeout=60)
            finally:
                receiver.consumer.shutdown()
        # Each stored once (no commit twice), and each consumed once.
        assert sum(queue_max_offset(broker, TOPIC, q) for q in (0, 1)) == 5
        assert receiver.seen() == {b"c0": 1, b"c1": 1, b"u0": 1, b"u1": 1, b"u2": 1}
        assert listener.checked == {b"u0": 1, b"u1": 1, b"u2": 1}

        # The commits, the Op messages and the broker's own rollback reach the lake.
        _tier(spark, store, lake)
        sweep3 = run_transaction_sweep(settings)
        assert sweep3["asked"] == 0 and sweep3["counts"] == {"COMMIT": 5, "ROLLBACK": 3}
        by_body = _by_body(spark, lake)
        assert {b: r["state"] for b, r in by_body.items()} == {
            "c0": "COMMIT", "c1": "COMMIT", "u0": "COMMIT", "u1": "COMMIT", "u2": "COMMIT",
            "r0": "ROLLBACK", "r1": "ROLLBACK", "stale": "ROLLBACK",
        }
        assert by_body["stale"]["checks"] >= CHECK_MAX and by_body["stale"]["handed_back_checks"] is None
        for body in ("u0", "u1", "u2"):
            row = by_body[body]
            assert (row["checks"], row["handed_back_checks"], row["producer_group"]) == (1, 0, GROUP)
            assert row["commit_offset"] is not None and row["resolved_at"] is not None
        # Pinned to a version of `messages`, `transactions` is the view derived from it (a row per copy).
        from deltalake import DeltaTable

        pinned = DeltaTable(str(lake / "messages")).version()
        copies = run_sql(spark, str(lake), "SELECT count(*) FROM transactions_half").collect()[0][0]
        assert run_sql(spark, str(lake), "SELECT count(*) FROM transactions", version=pinned).collect()[0][0] == copies
        assert copies > 8
        old = _states(spark, lake, f"SELECT * FROM transactions VERSION AS OF {after_first}")
        assert sorted(r["state"] for r in old.values()) == sorted(["COMMIT"] * 2 + ["ROLLBACK"] * 3 + ["PENDING"] * 3)

        # A fourth run, as a user runs it (the command, on this process's session): nothing to learn, nothing written, nothing sent.
        half_before = queue_max_offset(broker, HALF)
        cli = lakemq_in_process(spark, "sweep", "transactions", "-n", ns, "--lake", str(lake), "--master", "local[1]",
                                env={"LAKEMQ_LOG_DIR": str(tmp_path / "logs"), "COLUMNS": "200"})
        assert cli.returncode == 0, cli.stderr[-2000:]
        assert "asked brokers about 0 transaction(s)" in cli.stdout and "table unchanged" in cli.stdout
        assert re.search(r"COMMIT\W+5\b", cli.stdout) and re.search(r"ROLLBACK\W+3\b", cli.stdout), cli.stdout
        assert queue_max_offset(broker, HALF) == half_before


def _by_body(spark: Any, lake: Path) -> dict[str, dict[str, Any]]:
    """The ``transactions`` rows by the half message's body (bodies here are short text)."""
    query = ("SELECT h.b, t.* FROM transactions t JOIN "
             "(SELECT DISTINCT uniq_key, CAST(body AS STRING) AS b FROM transactions_half) h USING (uniq_key)")
    return {r["b"]: r.asDict() for r in run_sql(spark, str(lake), query).collect()}
