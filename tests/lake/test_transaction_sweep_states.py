"""The transaction sweep's reading of the lake, on records written through the real CommitLog
and tiered by the compaction job: which transactions are resolved (a commit pointing at any
copy, an Op message naming a copy by its queue offset only), which copy is handed back (the
newest), when a transaction is asked about again (a newer copy than the one handed back, or an
answer that settled nothing), and that only changed rows are written. The broker's side is a
recording function here; tests/lake/test_transaction_sweep.py runs the real one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deltalake import DeltaTable
from lake_helpers import WriteStore, make_message

from lakemq.common.message import MessageConst, MessageExtBrokerInner
from lakemq.common.record import iter_records
from lakemq.jobs.compact import compact
from lakemq.jobs.sql import run_sql
from lakemq.jobs.transaction_sweep import sweep_transactions

HALF, OP = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"
STORE_HOST = "10.1.2.3:10911"  # lake_helpers.store_writer's


def _half(name: str, *, checks: int | None = None, origin: int | None = None) -> MessageExtBrokerInner:
    props = {MessageConst.REAL_TOPIC: "Orders", MessageConst.REAL_QUEUE_ID: "1", MessageConst.PRODUCER_GROUP: "pg"}
    if checks is not None:
        props[MessageConst.TRANSACTION_CHECK_TIMES] = str(checks)
    if origin is not None:
        props[MessageConst.TRANSACTION_PREPARED_QUEUE_OFFSET] = str(origin)
    return make_message(HALF, name.encode(), keys=f"key-{name}", uniq=f"TX-{name}", **props)


class Broker:
    """Records what it is handed and answers from a script keyed by body."""

    def __init__(self) -> None:
        self.answers: dict[bytes, dict[str, Any]] = {}
        self.handed: list[tuple[str, list[Any]]] = []

    def __call__(self, addr: str, records: bytes) -> list[dict[str, Any]]:
        halves = list(iter_records(records, check_crc=True))
        self.handed.append((addr, halves))
        return [self.answers[h.body] for h in halves]


def test_states_hand_backs_and_rewrites(spark: Any, store_dir: Path, write_store: WriteStore,
                                        tmp_path: Path) -> None:
    lake = tmp_path / "lake"

    def tier() -> None:
        compact(spark, store_dir=store_dir, lake_uri=str(lake), broker_name="b", seal_idle_ms=0)

    # Half queue offsets: A 0, B 1, C 2, D 3, then A's first check copy at 4.
    offsets = write_store([_half("A"), _half("B"), _half("C"), _half("D"), _half("A", checks=1, origin=0)])
    commit = make_message("Orders", b"B", queue_id=1, uniq="TX-B", sys_flag=8)
    commit.prepared_transaction_offset = offsets[1]
    write_store([commit, make_message(OP, b"2", tags="d")])  # C rolled back, named by queue offset only
    tier()

    broker = Broker()
    broker.answers = {b"A": {"verdict": "checking", "checks": 2}, b"D": {"verdict": "resolved", "checks": 0}}

    def sweep() -> Any:
        return sweep_transactions(spark, lake_uri=str(lake), hand_back=broker, brokers={STORE_HOST})

    first = sweep()
    assert (first.asked, first.verdicts, first.written) == (2, {"checking": 1, "resolved": 1}, 4)
    [(addr, halves)] = broker.handed
    assert addr == STORE_HOST
    assert [(h.body, h.queue_offset, h.commit_log_offset) for h in halves] == [(b"A", 4, offsets[4]),
                                                                               (b"D", 3, offsets[3])]
    assert halves[0].properties[MessageConst.TRANSACTION_CHECK_TIMES] == "1", "the newest copy goes back"
    rows = {r["uniq_key"]: r.asDict() for r in run_sql(spark, str(lake), "SELECT * FROM transactions").collect()}
    assert {k: r["state"] for k, r in rows.items()} == {"TX-A": "PENDING", "TX-B": "COMMIT", "TX-C": "ROLLBACK",
                                                        "TX-D": "PENDING"}
    a = rows["TX-A"]
    assert (a["half_queue_offset"], a["half_offset"], a["copies"], a["checks"], a["handed_back_checks"]) == (
        0, offsets[0], 2, 2, 1)
    assert (a["topic"], a["producer_group"], a["keys"], a["broker_verdict"]) == ("Orders", "pg", "key-A", "checking")
    assert rows["TX-B"]["commit_offset"] is not None and rows["TX-C"]["resolved_at"] is not None
    assert rows["TX-D"]["broker_verdict"] == "resolved" and rows["TX-D"]["handed_back_checks"] is None
    version = DeltaTable(str(lake / "transactions")).version()

    # Nothing new: A was handed back with the copy the lake holds; D is asked again, as its
    # answer settled nothing, and answers the same: no row changes, no Delta version.
    again = sweep()
    assert (again.asked, again.written, again.table_version) == (1, 0, None)
    assert [h.body for h in broker.handed[-1][1]] == [b"D"]
    assert DeltaTable(str(lake / "transactions")).version() == version

    # The broker's copy of A was tiered (and, say, deleted) still unanswered: a newer copy in
    # the lake, so A goes back once more, and this time past the check limit.
    write_store([_half("A", checks=2, origin=0)])
    tier()
    broker.answers = {b"A": {"verdict": "rolled_back", "checks": 2, "outcome": "rollback"},
                      b"D": {"verdict": "refused", "checks": 0, "remark": "put failed"}}
    third = sweep()
    assert (third.asked, third.verdicts) == (2, {"rolled_back": 1, "refused": 1})
    assert broker.handed[-1][1][0].properties[MessageConst.TRANSACTION_CHECK_TIMES] == "2"
    assert third.counts == {"COMMIT": 1, "ROLLBACK": 2, "UNKNOWN": 1}
    assert [(p["uniq_key"], p["broker_verdict"]) for p in third.pending] == [("TX-D", "refused: put failed")]
    assert third.table_version == version + 1
    old = run_sql(spark, str(lake), f"SELECT state FROM transactions VERSION AS OF {version} "
                                    "WHERE uniq_key = 'TX-A'").collect()
    assert [r["state"] for r in old] == ["PENDING"]
