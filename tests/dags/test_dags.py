"""The DAGs under dags/ load in Airflow (its own venv) with the expected tasks and order, and
the tiering DAG run once with dag.test() moves a real store's messages into a real lake.

.venv-airflow has neither lakemq nor pyspark, so a clean DagBag also shows that the DAG files
import nothing heavy at parse time."""

from __future__ import annotations

import itertools
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from airflow_run import (
    DAG_TEST_SCRIPT,
    DAGBAG_SCRIPT,
    airflow_env,
    airflow_python,
    migrate,
    run_script,
    run_script_output,
)

from lakemq.common.message import MessageConst, MessageExtBrokerInner
from lakemq.store.config import StoreConfig
from lakemq.store.message_store import MessageStore
from lakemq.store.put_request import MessagesPut

# scripts/test.sh installs .venv-airflow during its set-up; run any other way, the first test
# installs it (about a minute; bounded by airflow_run.INSTALL_TIMEOUT).
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1200)]

TIERING = ["seal", "compact", "verify", "retention", "maintain"]


@pytest.fixture(scope="module")
def airflow_py() -> str:
    return airflow_python()


@pytest.fixture(scope="module")
def migrated_db(airflow_py: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An Airflow database migrated once for the module (`airflow db migrate` takes 7 s
    here); each DAG run starts from a copy of it in its own AIRFLOW_HOME."""
    home = tmp_path_factory.mktemp("airflow-template")
    migrate(airflow_py, airflow_env(home))
    return home / "airflow.db"


def _airflow_home(home: Path, migrated_db: Path) -> None:
    home.mkdir()
    shutil.copyfile(migrated_db, home / "airflow.db")


def test_every_dag_loads_with_its_tasks_in_order(airflow_py: str, tmp_path: Path) -> None:
    found = run_script(airflow_py, DAGBAG_SCRIPT, airflow_env(tmp_path))
    assert found["errors"] == {}
    dags = found["dags"]
    assert set(dags) >= {"lakemq_tiering", "lakemq_sweeps", "lakemq_reindex"}
    tiering = dags["lakemq_tiering"]
    assert sorted(tiering) == sorted(TIERING)
    for before, after in itertools.pairwise(TIERING):
        assert tiering[before] == [after], f"{before} should lead to {after} only"
    assert tiering["maintain"] == []
    assert dags["lakemq_sweeps"] == {"delay_sweep": ["transaction_sweep"], "transaction_sweep": []}
    for dag_id in ("lakemq_tiering", "lakemq_sweeps"):
        assert {"lake_uri", "conf", "storage_options"} <= set(found["params"][dag_id])
    assert "flushed" in found["params"]["lakemq_tiering"]  # tier what the broker flushed, not only sealed files
    assert dags["lakemq_reindex"] == {"reindex": []}
    assert {"store_dir", "broker_conf", "conf", "topic", "consume_queue", "index", "skip_corrupt",
            "force"} <= set(found["params"]["lakemq_reindex"])


def _write_store(store_dir: Path, count: int) -> None:
    config = StoreConfig(
        store_path_root_dir=str(store_dir),
        mapped_file_size_commit_log=32 * 1024,
        mapped_file_size_consume_queue=6000 * 20,
        max_hash_slot_num=500,
        max_index_num=2000,
    )
    store = MessageStore(config)
    assert store.load()
    store.start()
    try:
        for i in range(count):
            props = {
                MessageConst.KEYS: f"k{i}",
                MessageConst.TAGS: "t",
                MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"AIRFLOW{i:08d}",
            }
            msg = MessageExtBrokerInner(
                topic="DagTopic",
                body=f"body-{i}".encode() * 20,
                queue_id=i % 2,
                properties=props,
                born_timestamp=1_700_000_000_000,
                born_host="127.0.0.1:1",
            )
            assert store.put(MessagesPut.of(msg)).is_ok
    finally:
        store.shutdown()


def test_tiering_dag_moves_a_store_into_the_lake(airflow_py: str, migrated_db: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    count = 400
    store_dir, lake = tmp_path / "store", tmp_path / "lake"
    _write_store(store_dir, count)
    files_before = sorted(p.name for p in (store_dir / "commitlog").iterdir())
    assert len(files_before) > 2, "the store should span several CommitLog files"
    env = airflow_env(tmp_path / "airflow", lakemq_lake_uri=str(lake))  # a Variable: the param left empty
    _airflow_home(tmp_path / "airflow", migrated_db)
    conf = {
        "store_dir": str(store_dir),
        "broker_name": "broker-a",
        # The broker reads this lake and keeps no file past its tiering: retention deletes.
        "conf": {"tierSealIdleMs": "1", "lakeUri": str(lake), "fileReservedTime": "0"},
        "spark_master": "local[1]",
    }
    env["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "INFO"  # the tasks' output reaches the console at INFO
    run, output = run_script_output(airflow_py, DAG_TEST_SCRIPT.format(dag_id="lakemq_tiering", run_conf=conf), env)
    assert run["state"] == "success", run
    assert run["tasks"] == {t: "success" for t in TIERING}
    # each step's progress reached the task log as it ran, as timestamped lines
    for line in ("compact: starting", "commit ", "verify "):
        assert re.search(rf"\d\d:\d\d:\d\d {line}", output), output[-4000:]

    table = DeltaTable(str(lake / "messages"))
    uniq = [
        u
        for f in table.file_uris()
        for u in pq.read_table(f, columns=["uniq_key"]).column("uniq_key").to_pylist()
    ]
    assert sorted(uniq) == [f"AIRFLOW{i:08d}" for i in range(count)]
    files_after = sorted(p.name for p in (store_dir / "commitlog").iterdir())
    assert files_after == files_before[-1:], "retention keeps only the newest (writer's) file once verified"
    assert (tmp_path / "lake" / "messages" / "_delta_log").is_dir()


def test_sweeps_dag_records_a_pending_transaction(spark: Any, airflow_py: str, migrated_db: Path,
                                                  tmp_path: Path) -> None:
    """A transaction left unknown, tiered while its half message is still in the broker's half
    queue: the DAG's transaction sweep writes it to the `transactions` table as PENDING, the
    broker having answered that its check service still has it (nothing is put back)."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from lakemq.client import LocalTransactionState, Message
    from lakemq.client.config import ClientConfig
    from lakemq.client.sync import SyncTransactionProducer
    from tests.cli_in_process import tier_run_in_process
    from tests.cluster import start_cluster

    class Unknown:
        def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
            return LocalTransactionState.UNKNOW

        def check_local_transaction(self, msg: object) -> LocalTransactionState:
            return LocalTransactionState.UNKNOW

    lake = tmp_path / "lake"
    conf = {"transactionCheckInterval": "3600000", "mappedFileSizeCommitLog": str(64 << 10)}
    with start_cluster(tmp_path / "cluster", broker_conf=conf) as cluster:
        ns = cluster.namesrv_addr
        client = ClientConfig(namesrv_addr=ns)
        with SyncTransactionProducer("DagTxProducer", Unknown(), client_config=client) as producer:
            producer.create_topic("DagTx", 1)
            sent = producer.send_message_in_transaction(Message("DagTx", b"undecided"))
        tiered = tier_run_in_process(spark, tmp_path, tmp_path / "cluster" / "broker-a" / "store", lake, "broker-a",
                                     "--no-retention")
        assert tiered.returncode == 0, tiered.stderr[-3000:]
        env = airflow_env(tmp_path / "airflow", lakemq_lake_uri=str(lake), lakemq_namesrv=ns)
        _airflow_home(tmp_path / "airflow", migrated_db)
        env["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "INFO"  # the tasks' output reaches the console at INFO
        run, output = run_script_output(airflow_py, DAG_TEST_SCRIPT.format(
            dag_id="lakemq_sweeps", run_conf={"spark_master": "local[1]"}), env)
        assert run["state"] == "success", run
        assert run["tasks"] == {"delay_sweep": "success", "transaction_sweep": "success"}
    # Each task's progress reached its log as timestamped lines while it ran, before the task ended.
    for task, said in (("delay_sweep", ["delay sweep: starting Spark", "delay sweep: delivered 0"]),
                       ("transaction_sweep", ["transaction sweep: starting Spark", "hand back 1/1",
                                              "transaction sweep: asked brokers about 1, wrote 1 row(s)"])):
        start = output.index(f"[DAG TEST] starting task_id={task} ")
        end = output.index(f"[DAG TEST] end task task_id={task} ")
        places = [re.search(rf"\d\d:\d\d:\d\d {re.escape(line)}", output[start:end]) for line in said]
        assert all(places), (task, said, output[start:end][-4000:])
        assert [p.start() for p in places] == sorted(p.start() for p in places), output[start:end][-4000:]
    table_uri = str(lake / "transactions")
    rows = [r for f in DeltaTable(table_uri).file_uris() for r in pq.read_table(f).to_pylist()]
    assert [(r["uniq_key"], r["topic"], r["state"], r["broker_verdict"]) for r in rows] == [
        (sent.msg_id, "DagTx", "PENDING", "in_half_queue")
    ]
