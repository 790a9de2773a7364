"""The lake service's parts that need no Spark: lakeServiceAddr's check, the address forms the
commands take, and a service that is down costing no pyspark import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lakemq.errors import ConfigError
from lakemq.jobs.lake_service import service_url, split_addr
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


def test_a_service_that_is_down_is_a_reason_and_no_pyspark_import() -> None:
    port = reserved_port()
    probe = (f"import sys; from lakemq.jobs.lake_service import connect; spark, why = connect('127.0.0.1:{port}'); "
             "print(spark is None, why, 'pyspark.sql.connect' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["True", "Connection", "refused", "False"], out.stdout + out.stderr


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
