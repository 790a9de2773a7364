"""The lake service's parts that need no Spark: lakeServiceAddr's check, the address forms the
commands take, the task slot a local session keeps for the service's queries, a service that
is down costing no pyspark import, and a client of the service importing neither pyspark nor
pandas nor numpy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakemq.errors import ConfigError
from lakemq.jobs.lake_service import query_slot, service_url, split_addr
from lakemq.launcher import reserved_port
from lakemq.tiering.config import TieringConfig


@pytest.mark.parametrize("addr", ["15003", "host", "host:", ":15003", "host:port", "host:70000"])
def test_lake_service_addr_must_be_host_and_port(addr: str) -> None:
    with pytest.raises(ConfigError, match="lakeServiceAddr must be host:port"):
        TieringConfig(lake_service_addr=addr)
    assert TieringConfig(lake_service_addr="127.0.0.1:15003").lake_service_addr == "127.0.0.1:15003"
    assert TieringConfig().lake_service_addr == ""  # off


def test_both_address_forms_name_one_service() -> None:
    assert split_addr("127.0.0.1:15003") == split_addr("sc://127.0.0.1:15003/") == ("127.0.0.1", 15003)
    assert service_url("localhost:15003") == service_url("sc://localhost:15003") == "sc://localhost:15003"


def test_a_local_session_keeps_one_task_slot_the_passes_do_not_plan_for() -> None:
    cores = len(os.sched_getaffinity(0))
    assert query_slot("local[1]") == query_slot("local") == {"spark.master": "local[2]",
                                                             "spark.default.parallelism": "1"}
    assert query_slot("local[*]") == {"spark.master": f"local[{cores + 1}]", "spark.default.parallelism": str(cores)}
    assert query_slot(" local[4,3] ") == {"spark.master": "local[5,3]", "spark.default.parallelism": "4"}
    for cluster in ("spark://10.0.0.1:7077", "yarn", "k8s://https://10.0.0.1:6443"):
        assert query_slot(cluster) == {}  # a cluster's scheduler has its executors' slots


def test_a_service_that_is_down_is_a_reason_and_no_pyspark_import() -> None:
    port = reserved_port()
    probe = (f"import sys; from lakemq.jobs.lake_service import connect; spark, why = connect('127.0.0.1:{port}'); "
             "print(spark is None, why, 'pyspark' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["True", "Connection", "refused", "False"], out.stdout + out.stderr


# What a client of the lake service must not import: pyspark (its Connect client imports pandas
# and numpy first, 2 s of a 2 s budget), and pandas and numpy, which pyarrow and deltalake
# import when they are installed (kept out by lakemq.jobs.connect_client while a session is open).
HEAVY = ("pyspark", "pandas", "numpy")


def test_a_service_client_imports_no_pyspark_pandas_or_numpy() -> None:
    # Everything the remote path of sql, admin message query --lake and replay imports, and the
    # work it does on this side: a statement's messages, Arrow IPC read and shown, the Delta
    # log read (deltalake) and the key index read (pyarrow.dataset, pyarrow.compute).
    probe = """
import sys
import lakemq.cli.message_cmds, lakemq.cli.replay_cmds, lakemq.cli.sql_cmds
from lakemq.cli.lake_service import before_lake_imports
from lakemq.jobs import connect_client
import lakemq.jobs.lake_service, lakemq.jobs.lake_sql  # what sql imports before its session opens
before_lake_imports("127.0.0.1:1", None)  # as replay and admin message query do with --service
session = connect_client.ConnectSession("sc://127.0.0.1:1")
import lakemq.client, lakemq.jobs.broker_lookup
import lakemq.jobs.message_lookup, lakemq.jobs.ordered_scan, lakemq.jobs.replay, lakemq.jobs.sql
from lakemq.jobs._connect_pb import commands_pb2, relations_pb2
import pyarrow as pa, pyarrow.compute as pc, pyarrow.dataset, pyarrow.ipc
import deltalake
sink = pa.BufferOutputStream()
with pa.ipc.new_stream(sink, pa.schema([("n", pa.int64())])) as writer:
    writer.write_batch(pa.record_batch([pa.array([50])], names=["n"]))
table = pa.ipc.open_stream(sink.getvalue()).read_all()
lakemq.cli.sql_cmds._show((table.column_names, [[str(v) for v in table.column(0).to_pylist()]], 10))
print(pc.field("key") == "k", file=sys.stderr)
session.close()
print(" ".join(m for m in ("pyspark", "pandas", "numpy") if sys.modules.get(m)) or "none")
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines()[-1] == "none", out.stdout
    assert "50" in out.stdout


def test_the_live_source_is_registered_by_a_reference_to_its_class() -> None:
    import pickle

    from lakemq.jobs.connect_client import class_reference
    from lakemq.jobs.sources import LiveDataSource
    from lakemq.jobs.sql import LIVE_SOURCE

    name, module, qualname = LIVE_SOURCE
    assert LiveDataSource.name() == name
    # What Spark's Python workers unpickle is the class itself, as pyspark's client would send it.
    assert pickle.loads(class_reference(module, qualname)) is LiveDataSource


def test_sql_uses_the_conf_service_only_for_the_lake_it_serves(tmp_path: Path) -> None:
    from lakemq.cli.sql_cmds import _Service

    props = {"lakeServiceAddr": "127.0.0.1:15003", "lakeUri": str(tmp_path / "lake")}
    assert _Service.of(props, None, None) == _Service("127.0.0.1:15003", None)
    assert _Service.of(props, str(tmp_path / "lake"), None) == _Service("127.0.0.1:15003", None)
    other = _Service.of(props, str(tmp_path / "other"), None)
    assert other is not None and other.refuse and "not --lake" in other.refuse
    pinned = _Service.of(props, None, 3)
    assert pinned is not None and pinned.refuse and "--version" in pinned.refuse
    assert _Service.of({"lakeUri": str(tmp_path / "lake")}, None, None) is None  # off
