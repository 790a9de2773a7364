"""plain_acl.yml loading, address patterns and permission words."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakemq.broker.acl import load_plain_acl, parse_plain_acl
from lakemq.broker.acl.permission import DENY, PUB, SUB, check_permission
from lakemq.broker.acl.remote_address import parse_address_pattern
from lakemq.errors import ConfigError

# RocketMQ's distribution/conf/plain_acl.yml, as shipped.
ROCKETMQ_SAMPLE = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
"""


def test_rocketmq_sample_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ROCKETMQ_SAMPLE)
    config = load_plain_acl(path)
    assert [m.pattern for m in config.global_white_remote_addresses] == ["10.10.103.*", "192.168.0.*"]
    first, second = config.accounts["RocketMQ"], config.accounts["rocketmq2"]
    assert first.secret_key == "12345678" and not first.admin
    assert first.default_topic_perm == DENY and first.default_group_perm == SUB
    assert first.resource_perms == {"topicA": DENY, "topicB": PUB | SUB, "topicC": SUB,
                                    "%RETRY%groupA": DENY, "%RETRY%groupB": PUB | SUB, "%RETRY%groupC": SUB}
    assert not first.white_remote_address.matches("10.0.0.1")  # empty: nobody
    assert second.admin and second.white_remote_address.matches("192.168.1.77")
    assert second.default_topic_perm == DENY  # absent means DENY
    assert "12345678" not in repr(first)


def test_scalars_stay_strings() -> None:
    config = parse_plain_acl("accounts:\n  - accessKey: 0012345\n    secretKey: 0012345678\n")
    assert config.accounts["0012345"].secret_key == "0012345678"


ACCOUNT = "accounts:\n  - accessKey: RocketMQ\n    secretKey: 12345678\n"


@pytest.mark.parametrize("text, reason", [
    ("accounts: nope", "accounts must be a list"),
    ("accounts:\n  - accessKey: short\n    secretKey: 12345678", "longer than 6"),
    ("accounts:\n  - accessKey: RocketMQ\n    secretKey: 123456", "longer than 6"),
    (ACCOUNT + "    topicPerms: [topicA=ALL]", "'ALL' is not one of"),
    (ACCOUNT + "    topicPerms: [topicA]", "is not name=PERM"),
    (ACCOUNT + "    admin: yes please", "admin must be true or false"),
    (ACCOUNT + "    secret: x", "unknown keys secret"),
    (("accounts:\n  - {accessKey: RocketMQ, secretKey: 12345678}\n"
     "  - {accessKey: RocketMQ, secretKey: 87654321}"),
     "appears twice"),
    ("globalWhiteRemoteAddresses: [10.10.300.*]", "outside 0-255"),
    ("globalWhiteRemoteAddresses: [not-an-ip]", "not an address range"),
    ("accounts: [", "not valid YAML"),
    ("- a\n- b", "expected a mapping"),
])
def test_bad_files_are_refused_with_the_entry_named(text: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_plain_acl(text, "acl.yml")
    assert reason in str(info.value)
    assert "acl.yml" in str(info.value)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read ACL file"):
        load_plain_acl(tmp_path / "nope.yml")


@pytest.mark.parametrize("pattern, inside, outside", [
    ("*", ["1.2.3.4", "127.0.0.1"], []),
    ("", [], ["127.0.0.1"]),
    ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2"]),
    ("192.168.0.*", ["192.168.0.0", "192.168.0.255"], ["192.168.1.1", "10.0.0.1"]),
    ("192.168.*", ["192.168.7.9"], ["192.169.0.1"]),
    ("192.168.1.1-200", ["192.168.1.1", "192.168.1.200"], ["192.168.1.201", "192.168.1.0"]),
    ("192.168.0.{1,2,3}", ["192.168.0.2"], ["192.168.0.4"]),
    ("10.0.0.1,10.0.0.9", ["10.0.0.9"], ["10.0.0.2"]),
    ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["127.0.0.1"]),
])
def test_address_patterns(pattern: str, inside: list[str], outside: list[str]) -> None:
    matcher = parse_address_pattern(pattern, "test")
    assert all(matcher.matches(a) for a in inside)
    assert not any(matcher.matches(a) for a in outside)


def test_permission_check() -> None:
    assert check_permission(PUB, PUB | SUB) and check_permission(SUB, SUB)
    assert not check_permission(PUB, SUB)
    assert not check_permission(SUB, DENY | SUB)


def test_shipped_sample_loads() -> None:
    config = load_plain_acl(Path(__file__).resolve().parents[2] / "conf" / "plain_acl.yml")
    assert set(config.accounts) == {"appUserKey", "opsAdminKey"}
    assert config.accounts["appUserKey"].resource_perms["orders"] == PUB | SUB
    assert config.accounts["opsAdminKey"].admin and not config.global_white_remote_addresses
