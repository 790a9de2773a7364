"""Cross-protocol through the lake: what the official 5.x Python client (gRPC) sent is tiered
by ``lakemq tier run`` (real Spark, real Delta) and found by ``lakemq sql`` as it was sent: the
count, the client's message id as ``uniq_key`` (``msg_id`` is the broker's offset id), keys and
tags. The reverse direction (4.x remoting in, 5.x consumers out) is test_rmq5_consumer.py's and
test_java5_client.py's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lakemq.common.record import decode_message_id
from tests.cli_in_process import lakemq_in_process, tier_run_in_process
from tests.rmq5.rmq5 import grpc_cluster, send_all, wait_for_bodies

pytestmark = [pytest.mark.spark, pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(600)]

BROKER, TOPIC = "broker-a", "Rmq5Lake"
COUNT = 24


def _spec(i: int) -> dict[str, Any]:
    return {"body": f"lake-{i}", "tag": ("paid", "new")[i % 2], "keys": [f"order-{i}", f"cust-{i % 5}"]}


def _rows(output: str) -> list[list[str]]:
    """The cells of ``lakemq sql``'s table rows (rich's box lines, one row a line at COLUMNS=250)."""
    return [[cell.strip() for cell in line.strip().strip("│").split("│")]
            for line in output.splitlines() if line.count("│") >= 2 and "lake-" in line]


def test_sent_by_the_5x_client_tiered_and_found_by_lakemq_sql(spark: Any, python: str, grpc_port: int,
                                                              tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    messages = [_spec(i) for i in range(COUNT)]
    with grpc_cluster(tmp_path, grpc_port, TOPIC) as cluster:
        sent = send_all(python, f"127.0.0.1:{grpc_port}", TOPIC, messages, tmp_path / "driver.log")
        client_ids = {f"lake-{i}": line["message_id"] for i, line in enumerate(sent)}
        stored = wait_for_bodies(cluster.namesrv_addr, TOPIC, "rmq5-lake-reader", {m["body"].encode() for m in messages},
                                 30)
        stored_at = {m.body.decode(): (m.store_host, m.commit_log_offset) for m in stored}
        assert set(stored_at) == set(client_ids)
        done = tier_run_in_process(spark, tmp_path, tmp_path / BROKER / "store", lake, BROKER, "--no-retention")
        assert done.returncode == 0, done.stderr[-3000:]

    env = {"COLUMNS": "250", "LAKEMQ_LOG_DIR": str(tmp_path / "sql-logs")}
    counted = lakemq_in_process(spark, "sql", "--lake", str(lake), "--master", "local[1]",
                                f"SELECT concat('lake-', count(*)) AS n FROM messages WHERE topic = '{TOPIC}'", env=env)
    assert counted.returncode == 0, counted.stderr[-3000:]
    assert _rows(counted.stdout) == [[f"lake-{COUNT}"]], counted.stdout
    found = lakemq_in_process(spark, "sql", "--lake", str(lake), "--master", "local[1]",
                              "SELECT CAST(body AS STRING) AS body, uniq_key, msg_id, keys, tags FROM messages "
                              f"WHERE topic = '{TOPIC}' ORDER BY body", env=env)
    assert found.returncode == 0, found.stderr[-3000:]
    rows = {cells[0]: cells[1:] for cells in _rows(found.stdout)}
    assert len(rows) == COUNT, found.stdout
    for i, spec in enumerate(messages):
        uniq_key, msg_id, keys, tags = rows[spec["body"]]
        assert uniq_key == client_ids[spec["body"]]  # the 5.x client's message id, kept as the 4.x UNIQ_KEY
        assert decode_message_id(msg_id) == stored_at[spec["body"]]  # the offset id of where a 4.x pull found it
        # the Python client holds keys as a set: their order is its own
        assert sorted(keys.split(" ")) == sorted(spec["keys"]) and tags == spec["tag"], (i, rows[spec["body"]])
