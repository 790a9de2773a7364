"""New consumer groups heartbeating at once share writes of subscriptionGroup.json and
topics.json (group commit) instead of each rewriting both files: at 10,000 topics and 1,000 new
groups the per-group rewrites cost 504 s of heartbeats (bench/scale_bench.py). Each heartbeat
is still answered only once its group and retry topic are durable."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

from lakemq.broker.config_file import file_lock
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.common.subscription import SubscriptionData
from lakemq.remoting import RemotingCommand
from lakemq.remoting.bodies import ConsumerData, HeartbeatData
from tests.broker.wire import in_process_broker

GROUPS = 24


def _heartbeat(i: int) -> RemotingCommand:
    data = HeartbeatData(f"127.0.0.1@commit-{i}", (), (ConsumerData(
        f"commit_group_{i:02d}", subscription_data_set=(SubscriptionData("commit_topic", "*"),)),))
    return RemotingCommand.request(RequestCode.HEART_BEAT, body=data.encode())


async def _until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 20
    while not done():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


async def test_new_groups_share_config_writes_and_are_durable_when_answered(tmp_path: Path) -> None:
    # A pool thread per heartbeat, so that all of them wait on the same write.
    async with in_process_broker(tmp_path, clientManageThreadPoolNums=str(GROUPS)) as (controller, client):
        groups, topics = controller.subscription_group_manager, controller.topic_config_manager
        group_writes, topic_writes = groups.file.writes, topics.file.writes
        names = [f"commit_group_{i:02d}" for i in range(GROUPS)]
        # The first write of each file is held (its writer takes the file's lock to rename):
        # every other new group joins while it is held.
        held = [file_lock(groups.path), file_lock(topics.path)]
        for lock in held:
            lock.acquire()
        try:
            answers = [asyncio.ensure_future(client.invoke(controller.broker_addr, _heartbeat(i), 30.0))
                       for i in range(GROUPS)]
            await _until(lambda: all(groups.get(n) for n in names), "the groups were never created")
            await asyncio.sleep(0.2)
            assert not any(a.done() for a in answers), "a heartbeat was answered before its group was durable"
            held.pop(0).release()
            await _until(lambda: all(topics.select_topic_config(f"%RETRY%{n}") for n in names),
                         "the retry topics were never created")
            await asyncio.sleep(0.2)
            assert not any(a.done() for a in answers), "a heartbeat was answered before its retry topic was durable"
        finally:
            for lock in held:
                lock.release()
        results = await asyncio.gather(*answers)
    assert [r.code for r in results] == [ResponseCode.SUCCESS] * GROUPS, [r.remark for r in results]
    # One write held, one for everything that joined meanwhile (and perhaps one for a
    # straggler); one write per group would be GROUPS.
    assert groups.file.writes - group_writes <= 3, groups.file.writes - group_writes
    assert topics.file.writes - topic_writes <= 3, topics.file.writes - topic_writes
    on_disk = json.loads(groups.path.read_text())["subscriptionGroupTable"]
    assert set(names) <= set(on_disk)
    on_disk = json.loads(topics.path.read_text())["topicConfigTable"]
    assert {f"%RETRY%{n}" for n in names} <= set(on_disk)


def test_topics_json_kept_per_topic_is_what_encoding_the_table_writes(tmp_path: Path) -> None:
    """topics.json is written from each topic's entry as the last write encoded it: the file
    must still be the whole table as it is now, byte for byte as json_text(encode()) makes it."""
    from lakemq.broker.config import BrokerConfig
    from lakemq.broker.config_file import json_text, load_json
    from lakemq.broker.topic_config_manager import TopicConfig, TopicConfigManager

    topics = TopicConfigManager(BrokerConfig(), tmp_path)
    for i in range(50):
        topics.update_topic_config(TopicConfig(f"t{i:02d}", 4, 4))
    topics.update_topic_config(TopicConfig("t07", 8, 8, order=True))  # a changed entry is encoded again
    topics.delete_topic_config("t13")
    topics.learn_queues([("t20", 11), ("learned", 2)])
    assert topics.path.read_text() == json_text(topics.encode())
    again = TopicConfigManager(BrokerConfig(), tmp_path)
    again.load()
    assert again.topic_configs() == topics.topic_configs() and again.data_version == topics.data_version
    assert load_json(topics.path) == topics.encode()
