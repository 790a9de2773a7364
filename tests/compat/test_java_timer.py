"""Apache RocketMQ 4.9.8's Java client against a real lakemq broker: timer messages sent with
the TIMER_DELIVER_MS / TIMER_DELAY_SEC properties are delivered at their time (not early,
within a second), and bodies compressed with LZ4 and ZSTD (the client's compressType) arrive
intact at the Java consumer and at lakemq's own client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lakemq.common.compression import compression_name
from tests.cluster import Cluster, start_cluster
from tests.compat.java_client import JavaRun, run_driver
from tests.compat.test_java_client import once_each, uniq
from tests.lake.lake_helpers import read_all

pytestmark = [pytest.mark.compat, pytest.mark.jvm, pytest.mark.timeout(400)]

PREFIX = "JT"


@pytest.fixture(scope="module")
def java_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with start_cluster(tmp_path_factory.mktemp("java-timer-cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def run(java_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> JavaRun:
    return run_driver(java_cluster.namesrv_addr, PREFIX, ["timer", "compress"], tmp_path_factory.mktemp("java"))


def test_timer_properties_delivered_at_their_time(run: JavaRun) -> None:
    s = run["timer"]
    sent, got = s.of("sent"), s.of("received")
    assert len(sent) == 6
    by_key = once_each(sent, got)
    for message in sent:
        copy = by_key[uniq(message)]
        due = int(copy["props"]["TIMER_OUT_MS"])  # the due time the broker fixed
        if "TIMER_DELIVER_MS" in message.props:
            assert due == int(message.props["TIMER_DELIVER_MS"])
        else:  # 3 s from when the broker stored it: before the answer came, after the send began
            assert message["sentAt"] + 2000 <= due <= message["sentAt"] + 3000
        assert 0 <= copy["storeTimestamp"] - due < 1000, f"delivered {copy['storeTimestamp'] - due} ms after due"


def test_lz4_and_zstd_bodies_stored_as_sent_and_read_by_both_clients(run: JavaRun, java_cluster: Cluster) -> None:
    s = run["compress"]
    sent, got = s.of("sent"), s.of("received")
    assert len(sent) == 6
    by_key = once_each(sent, got)  # the Java consumer decompressed each as its sys flag says
    kinds = {by_key[uniq(m)]["props"]["mode"]: compression_name(by_key[uniq(m)]["sysFlag"]) for m in sent}
    assert kinds == {"LZ4": "LZ4", "ZSTD": "ZSTD", "ZLIB": "ZLIB"}
    bodies = {m.unique_key: m.body for m in read_all(java_cluster.namesrv_addr, f"{PREFIX}_compress_t")}
    assert bodies == {uniq(m): m.body for m in sent}  # lakemq's client decompresses them too
