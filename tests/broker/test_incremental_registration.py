"""A broker with thousands of topics registers a new group's retry topic alone (RocketMQ's
registerIncrementBrokerData), not its whole table: at 10,000 topics each whole registration is
1.7 MB, and 1,000 new groups made 1,000 of them, each timing out (bench/scale_bench.py)."""

from __future__ import annotations

from pathlib import Path

from bench.broker_load import Connection
from bench.scale_bench import RegistrationProxy, heartbeats, lakemq_broker, write_configs
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.remoting.codec import RemotingCommand, encode

TOPICS, GROUPS = 3000, 20


def _routed(namesrv: str, topic: str) -> bool:
    conn = Connection(namesrv)
    try:
        cmd = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        return conn.call(encode(cmd)).code == ResponseCode.SUCCESS
    finally:
        conn.close()


def test_new_groups_register_their_retry_topics_alone(tmp_path: Path) -> None:
    write_configs(tmp_path / "store" / "config", TOPICS, 8, GROUPS)
    proxy = RegistrationProxy()
    with lakemq_broker(tmp_path, proxy) as (namesrv, broker, _pid, _boot_s):
        assert proxy.bodies and proxy.bodies[0] > TOPICS * 100  # the boot registration: every topic
        booted = len(proxy.bodies)
        heartbeats(broker, GROUPS, TOPICS, GROUPS)  # each of a new client in a group of its own
        increments = proxy.bodies[booted:]
        # One registration per retry topic, answered before the heartbeat (a consumer's first
        # rebalance finds the route), each holding that topic only.
        assert len(increments) >= GROUPS, proxy.bodies
        assert max(increments[:GROUPS]) < 2000, increments
        for g in range(GROUPS):
            assert _routed(namesrv, f"%RETRY%scale_group_{g:04d}")
        assert _routed(namesrv, "scale_topic_02999")
