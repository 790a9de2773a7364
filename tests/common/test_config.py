from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import pytest

from lakemq.common.config import bind, camel_to_snake, check_unknown_keys, read_properties
from lakemq.errors import ConfigError


class Mode(Enum):
    ASYNC_FLUSH = "a"
    SYNC_FLUSH = "s"


@dataclass(frozen=True)
class Sample:
    broker_name: str = "broker-a"
    listen_port: int = 10911
    flush_disk_type: Mode = Mode.ASYNC_FLUSH
    auto_create_topic_enable: bool = True
    ratio: float = 0.5
    namesrv_addr: tuple[str, ...] = ()
    store_path: str | None = None


def test_read_and_bind(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# comment\nbrokerName=broker-b\nlistenPort = 10922\nflushDiskType=SYNC_FLUSH\n"
        "autoCreateTopicEnable=false\nratio=0.25\nnamesrvAddr=127.0.0.1:9876;127.0.0.1:9877\n\n"
    )
    props = read_properties(conf)
    cfg = bind(Sample, props)
    assert cfg == Sample("broker-b", 10922, Mode.SYNC_FLUSH, False, 0.25, ("127.0.0.1:9876", "127.0.0.1:9877"))
    check_unknown_keys(props, [Sample])


def test_bad_values_and_unknown_keys_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="listenPort: bad value 'abc'"):
        bind(Sample, {"listenPort": "abc"})
    with pytest.raises(ConfigError, match="flushDiskType"):
        bind(Sample, {"flushDiskType": "SOMETIMES"})
    with pytest.raises(ConfigError, match="expected true or false"):
        bind(Sample, {"autoCreateTopicEnable": "yes"})
    with pytest.raises(ConfigError, match="unknown config keys: brokerNmae"):
        check_unknown_keys({"brokerNmae": "x"}, [Sample])
    bad = tmp_path / "bad.conf"
    bad.write_text("no equals sign here\n")
    with pytest.raises(ConfigError, match="bad.conf:1"):
        read_properties(bad)
    with pytest.raises(ConfigError, match="cannot read config"):
        read_properties(tmp_path / "missing.conf")


def test_camel_to_snake() -> None:
    assert camel_to_snake("mappedFileSizeCommitLog") == "mapped_file_size_commit_log"
