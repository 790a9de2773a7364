"""Apache RocketMQ 4.9.8's own Java client against real lakemq NameServer and broker processes:
DefaultMQProducer (sync, async, oneway, batch, selector, delayed, compressed, auto-created
topic, request/reply), TransactionMQProducer (commit, rollback, check-back),
DefaultMQPushConsumer (clustering and rebalance, broadcasting, orderly, tag and SQL92 filters,
retry to DLQ, where a new group starts, restarts) and DefaultLitePullConsumer.

One JVM runs every scenario at once (tests/compat/java, see java_client.py); each test below
checks one scenario's report: every message arrives exactly as sent, the expected number of
times. docs/COMPATIBILITY.md lists what is covered where.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import itertools
from collections.abc import Callable, Iterator

import pytest

from lakemq.client.admin import Admin
from tests.cluster import Cluster, start_cluster
from tests.compat.java_client import Event, JavaRun, run_driver

pytestmark = [pytest.mark.compat, pytest.mark.jvm, pytest.mark.timeout(400)]

PREFIX = "J"
SCENARIOS = ["basic", "request", "transaction", "cluster", "broadcast", "orderly", "filter", "retry", "from",
             "restart", "litepull"]
# Check-backs within a second (transactionTimeOut / transactionCheckInterval), and new groups
# whose first message is "on disk" (accessMessageInMemoryMaxRatio=0), so that a new group's
# CONSUME_FROM_LAST_OFFSET / TIMESTAMP decide where it starts (RocketMQ starts a group at 0
# while a queue's first message is still in memory).
BROKER_CONF = {"transactionTimeOut": "1000", "transactionCheckInterval": "1000",
               "accessMessageInMemoryMaxRatio": "0"}
CLUSTER_NAME = "DefaultCluster"
# Properties the producer sets for the broker, not for the consumer: WAIT=true is not stored
# (as RocketMQ), DELAY and TRAN_MSG are not delivered (RocketMQ 4.9 leaves them in the stored
# copy by accident; docs/COMPATIBILITY.md).
CONTROL = frozenset({"WAIT", "DELAY", "TRAN_MSG"})


@pytest.fixture(scope="module")
def java_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with start_cluster(tmp_path_factory.mktemp("java-cluster"), broker_conf=BROKER_CONF) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def run(java_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> JavaRun:
    return run_driver(java_cluster.namesrv_addr, PREFIX, SCENARIOS, tmp_path_factory.mktemp("java"))


def topic(scenario: str, suffix: str = "t") -> str:
    return f"{PREFIX}_{scenario}_{suffix}"


def group(scenario: str, suffix: str) -> str:
    return f"G_{PREFIX}_{scenario}_{suffix}"


def uniq(event: Event) -> str:
    return event.props["UNIQ_KEY"]


def assert_intact(sent: Event, got: Event) -> None:
    """What the consumer was handed is what the producer sent, with sane store metadata."""
    assert got.body == sent.body
    assert (got["topic"], got.get("tags"), got.get("keys")) == (sent["topic"], sent.get("tags"), sent.get("keys"))
    user = {k: v for k, v in sent.props.items() if k not in CONTROL}
    assert user.items() <= got.props.items(), sorted(set(user.items()) - set(got.props.items()))
    assert got["msgId"] == uniq(got) == uniq(sent)
    assert got.props["CLUSTER"] == CLUSTER_NAME
    assert got["bornTimestamp"] <= got["storeTimestamp"] <= got["receivedAt"]
    assert got["storeTimestamp"] - sent["sentAt"] < 60_000
    if sent.get("status") and got["reconsumeTimes"] == 0:  # the broker's answer, not a retry's queue
        assert uniq(sent) in sent["msgId"].split(",")
        assert got["queueId"] == sent["queueId"]


def once_each(sent: list[Event], got: list[Event]) -> dict[str, Event]:
    """Every sent message received exactly once, nothing else, all intact; by UNIQ_KEY."""
    counts = collections.Counter(uniq(g) for g in got)
    assert not [k for k, n in counts.items() if n > 1], "duplicates"
    assert set(counts) == {uniq(s) for s in sent}
    by_key = {uniq(g): g for g in got}
    for s in sent:
        assert_intact(s, by_key[uniq(s)])
    return by_key


def by_mode(events: list[Event], *modes: str) -> list[Event]:
    return [e for e in events if e.props.get("mode") in modes]


async def _progress(ns: str, group_name: str, topic_name: str) -> dict[int, int]:
    async with Admin(ns) as admin:
        return {p.mq.queue_id: p.consumer_offset for p in await admin.consumer_progress(group_name, topic_name)}


def committed(cluster: Cluster, group_name: str, topic_name: str) -> dict[int, int]:
    return asyncio.run(_progress(cluster.namesrv_addr, group_name, topic_name))


# -- producers -------------------------------------------------------------------------------


def test_sync_async_oneway_batch_big_delayed_and_auto_created(run: JavaRun, java_cluster: Cluster) -> None:
    s = run["basic"]
    sent, got = s.of("sent"), s.of("received")
    assert all(e.get("status") in (None, "SEND_OK") for e in sent)
    by_key = once_each(sent, got)
    assert len(sent) == 10 + 10 + 5 + 8 + 2 + 2 + 3
    # Sync sends: the queue offset the broker answered is where the consumer found it.
    for e in by_mode(sent, "sync", "async"):
        assert by_key[uniq(e)]["queueOffset"] == e["queueOffset"]
        assert by_key[uniq(e)]["offsetMsgId"] == e["offsetMsgId"]
    # One batch: one queue, consecutive offsets from the answered one, in send order.
    batch = by_mode(sent, "batch")
    offsets = [by_key[uniq(e)]["queueOffset"] for e in batch]
    assert offsets == list(range(batch[0]["queueOffset"], batch[0]["queueOffset"] + 8))
    assert len({by_key[uniq(e)]["queueId"] for e in batch}) == 1
    assert batch[0]["msgId"] == ",".join(uniq(e) for e in batch)
    # Bodies over 4 KiB were compressed by the client (zlib, sys flag 0x301) and arrive whole.
    for e in by_mode(sent, "big"):
        assert len(e.body) > 4096 and by_key[uniq(e)]["sysFlag"] & 0x1
    # Delay levels 1 (1 s) and 2 (5 s): stored for real only once due.
    for e in by_mode(sent, "delayed"):
        got_delayed = by_key[uniq(e)]
        due_ms = {"1": 1000, "2": 5000}[e.props["seq"]]
        assert got_delayed["storeTimestamp"] - got_delayed["bornTimestamp"] >= due_ms - 50
        assert got_delayed.props["REAL_TOPIC"] == e["topic"] and "DELAY" not in got_delayed.props
    # Non-ASCII property values survive.
    assert got[0].props["text"] == "h\u00e9llo w\u00f6rld \u20ac \U0001d11e"
    # The auto-created topic took min(producer's defaultTopicQueueNums 4, the broker's 8) queues.
    routes = asyncio.run(_queue_counts(java_cluster.namesrv_addr, topic("basic", "auto")))
    assert routes == 4


async def _queue_counts(ns: str, topic_name: str) -> int:
    async with Admin(ns) as admin:
        return len(await admin.topic_stats(topic_name))


def test_request_reply(run: JavaRun, java_cluster: Cluster) -> None:
    s = run["request"]
    replies = s.of("reply")
    assert len(replies) == 4
    for reply in replies:
        request = Event(reply["request"])
        assert base64.b64decode(reply["body"]) == b"reply-to-" + request.body
        assert reply["topic"] == f"{CLUSTER_NAME}_REPLY_TOPIC"
        assert reply["props"]["CORRELATION_ID"] == request.props["CORRELATION_ID"]
        assert reply["props"]["PUSH_REPLY_TIME"].isdigit()
    # The responder's sends were answered SEND_OK (pushed) and stored (storeReplyMessageEnable).
    replied = s.of("replied")
    assert len(replied) == 4 and all(e["status"] == "SEND_OK" and e["msgId"] != "0" for e in replied)
    assert asyncio.run(_stored(java_cluster.namesrv_addr, f"{CLUSTER_NAME}_REPLY_TOPIC")) >= 4


async def _stored(ns: str, topic_name: str) -> int:
    async with Admin(ns) as admin:
        return sum(q.max_offset for q in await admin.topic_stats(topic_name))


def test_transactions_commit_rollback_and_check_back(run: JavaRun) -> None:
    s = run["transaction"]
    sent = s.of("sent")
    states = {e.props["mode"]: e["localState"] for e in sent}
    assert states == {"commit": "COMMIT_MESSAGE", "commit2": "COMMIT_MESSAGE", "rollback": "ROLLBACK_MESSAGE",
                      "rollback2": "ROLLBACK_MESSAGE", "unknown": "UNKNOW", "unknown2": "UNKNOW"}
    visible = by_mode(sent, "commit", "commit2", "unknown", "unknown2")
    by_key = once_each(visible, s.of("received"))
    for e in visible:
        got = by_key[uniq(e)]
        assert got["sysFlag"] & 0xC == 0x8  # TRANSACTION_COMMIT_TYPE
        assert got.props["PGROUP"] == group("transaction", "tx")
    # CHECK_TRANSACTION_STATE reached the producer for the UNKNOW ones only, until they committed.
    checked = s.of("checked")
    assert {c.props["mode"] for c in checked} == {"unknown", "unknown2"}
    for c in checked:
        assert c["topic"] == topic("transaction", "tx") and c["transactionId"] == uniq(c)
    assert max(collections.Counter(uniq(c) for c in checked).values()) <= 2


# -- push consumers ---------------------------------------------------------------------------


def test_two_consumers_of_a_group_rebalance_when_told(run: JavaRun) -> None:
    s = run["cluster"]
    [rebalanced] = s.of("rebalanced")
    # The periodic rebalance is off (600 s): only NOTIFY_CONSUMER_IDS_CHANGED moved c1.
    assert rebalanced["ms"] < 10_000
    c1, c2 = set(rebalanced["c1"]), set(rebalanced["c2"])
    assert not c1 & c2 and len(c1 | c2) == 4
    got = s.of("received")
    once_each(s.of("sent"), got)
    for e in got:
        owned = c1 if e["consumer"] == "c1" else c2
        assert f"broker-a:{e['queueId']}" in owned
    assert {e["consumer"] for e in got} == {"c1", "c2"}


def test_broadcasting_gives_every_consumer_everything(run: JavaRun) -> None:
    s = run["broadcast"]
    for consumer in ("c1", "c2"):
        once_each(s.of("sent"), s.of("received", consumer=consumer))


def test_orderly_consumers_lock_queues_and_keep_order(run: JavaRun) -> None:
    s = run["orderly"]
    for round_ in (0, 1):
        sent = by_mode(s.of("sent"), f"orderly{round_}")
        got = s.of("received", consumer=f"c{round_}")
        by_key = once_each(sent, got)
        assert all(e["locked"] for e in got)  # consumed only while holding the broker's lock
        per_queue: dict[int, list[int]] = collections.defaultdict(list)
        per_key: dict[str, list[int]] = collections.defaultdict(list)
        for e in got:
            per_queue[e["queueId"]].append(e["queueOffset"])
            per_key[e.props["orderKey"]].append(int(e.props["seq"]))
        assert all(offsets == sorted(offsets) for offsets in per_queue.values())
        assert all(seqs == sorted(seqs) for seqs in per_key.values())
        # The selector put each order key on one queue.
        for key in per_key:
            assert len({by_key[uniq(e)]["queueId"] for e in sent if e.props["orderKey"] == key}) == 1
    # c0 released its locks (UNLOCK_BATCH_MQ) when it shut down: c1 locked them at once instead
    # of waiting for them to expire (rebalanceLockMaxLiveTime, 60 s).
    stopped = s.of("stopped", consumer="c0")[0]["at"]
    first_c1 = min(e["receivedAt"] for e in s.of("received", consumer="c1"))
    assert first_c1 - stopped < 15_000


def test_tag_and_sql92_filters(run: JavaRun) -> None:
    s = run["filter"]
    sent = s.of("sent")

    def expect(keep: Callable[[int, str, str, bool], bool]) -> list[Event]:
        return [e for e in sent if keep(int(e.props["a"]), e.props["color"], e["tags"], "flag" in e.props)]

    once_each(expect(lambda a, color, tags, flag: tags in ("TagA", "TagB")), s.of("received", consumer="tag"))
    once_each(expect(lambda a, color, tags, flag: a >= 10 and color == "red"), s.of("received", consumer="sql"))
    once_each(expect(lambda a, color, tags, flag: (3 <= a <= 20 or flag) and tags != "TagA"),
              s.of("received", consumer="sql2"))


def test_reconsume_later_goes_through_retry_to_the_dlq(run: JavaRun) -> None:
    s = run["retry"]
    sent = s.of("sent")
    failing = s.of("received", consumer="failing")
    assert len(failing) == 9
    for e in sent:
        attempts = sorted((f for f in failing if uniq(f) == uniq(e)), key=lambda f: f["reconsumeTimes"])
        assert [f["reconsumeTimes"] for f in attempts] == [0, 1, 2]
        for f in attempts:
            assert_intact(e, f)
            assert f["status"] == "RECONSUME_LATER"
        # Redelivered from %RETRY%group after delay level 1 (1 s), as the listener asked.
        assert attempts[1].props["RETRY_TOPIC"] == e["topic"]
        for before, after in itertools.pairwise(attempts):
            assert after["storeTimestamp"] - before["receivedAt"] >= 900
    dlq = s.of("received", consumer="dlq")
    assert len(dlq) == 3 and {uniq(d) for d in dlq} == {uniq(e) for e in sent}
    for d in dlq:
        original = next(e for e in sent if uniq(e) == uniq(d))
        assert d["topic"] == "%DLQ%" + group("retry", "c") and d.body == original.body
        assert d.props["ORIGIN_MESSAGE_ID"] == uniq(d) and d.props["RETRY_TOPIC"] == original["topic"]


def test_new_groups_start_first_last_or_at_a_timestamp(run: JavaRun) -> None:
    s = run["from"]
    sent = s.of("sent")
    expected = {"CONSUME_FROM_FIRST_OFFSET": ("before", "after", "live"),
                "CONSUME_FROM_LAST_OFFSET": ("live",),
                "CONSUME_FROM_TIMESTAMP": ("after", "live")}
    stamp_ms = s.of("timestamp")[0]["ms"]
    for consumer, modes in expected.items():
        once_each(by_mode(sent, *modes), s.of("received", consumer=consumer))
    assert all(e["sentAt"] < stamp_ms for e in by_mode(sent, "before"))


def test_committed_offsets_survive_a_consumer_restart(run: JavaRun, java_cluster: Cluster) -> None:
    s = run["restart"]
    for round_ in (0, 1):
        once_each(by_mode(s.of("sent"), f"round{round_}"), s.of("received", consumer=f"c{round_}"))
    progress = committed(java_cluster, group("restart", "c"), topic("restart"))
    assert sum(progress.values()) == 20


def test_lite_pull_subscribe_assign_seek_and_commit(run: JavaRun, java_cluster: Cluster) -> None:
    s = run["litepull"]
    sent = s.of("sent")
    once_each(sent, s.of("received", consumer="sub"))
    assert sum(committed(java_cluster, group("litepull", "sub"), topic("litepull")).values()) == 20
    # assign(): queue 0 sought to offset 3, queue 1 to its beginning.
    want = [e for e in sent if e["queueId"] == 1 or e["queueOffset"] >= 3]
    once_each(want, s.of("received", consumer="assign"))
    [reported] = s.of("committed")
    assert reported["offsets"] == {"0": 5, "1": 6}
    assert committed(java_cluster, group("litepull", "assign"), topic("litepull")) == {0: 5, 1: 6}
    [after_seek] = s.of("afterSeek")
    assert (after_seek["queueId"], after_seek["offset"]) == (1, 8)


def test_every_scenario_reported(run: JavaRun) -> None:
    # A scenario that failed in the JVM fails its own test; this one names a missing report.
    assert sorted(run.scenarios) == sorted(SCENARIOS), run.stderr[-2000:]
