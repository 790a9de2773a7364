"""Retries of lake IO: transient object-store errors are retried with backoff, others are not."""

from __future__ import annotations

from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from lakemq.tiering.lake_fs import LakeLocation, RetryPolicy, is_transient, with_retries

FAST = RetryPolicy(attempts=4, initial_backoff_s=0.001, max_backoff_s=0.002)


def _client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
                       "PutObject")


def test_transient_errors_are_retried_until_success() -> None:
    failures = [_client_error("SlowDown", 503), ConnectionResetError("reset"), TimeoutError("slow")]
    calls = []

    def flaky() -> str:
        calls.append(1)
        if failures:
            raise failures.pop(0)
        return "done"

    assert with_retries(flaky, "put", FAST) == "done"
    assert len(calls) == 4


def test_permanent_errors_pass_straight_out() -> None:
    calls = []

    def missing() -> None:
        calls.append(1)
        raise FileNotFoundError("no such key")

    with pytest.raises(FileNotFoundError):
        with_retries(missing, "get", FAST)
    assert len(calls) == 1
    assert not is_transient(_client_error("AccessDenied", 403))
    assert is_transient(_client_error("InternalError", 500))


def test_retries_give_up_after_the_policy() -> None:
    calls = []

    def down() -> None:
        calls.append(1)
        raise _client_error("ServiceUnavailable", 503)

    with pytest.raises(ClientError):
        with_retries(down, "list", FAST)
    assert len(calls) == FAST.attempts


def test_local_metadata_writes_are_atomic(tmp_path: Path) -> None:
    lake = LakeLocation.of(str(tmp_path))
    target = lake.join("_lakemq", "manifest.json")
    lake.write_bytes(target, b"first")
    lake.write_bytes(target, b"second")
    assert lake.read_bytes(target) == b"second"
    assert sorted(p.name for p in (tmp_path / "_lakemq").iterdir()) == ["manifest.json"]  # no temp files left
