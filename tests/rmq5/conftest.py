"""Fixtures every RocketMQ 5 test module shares: the official 5.x client's interpreter and
the gRPC port of the module's broker (a module starts its own broker with its own settings)."""

from __future__ import annotations

import pytest

from lakemq.launcher import reserved_port
from tests.rmq5.rmq5 import rmq5_python


@pytest.fixture(scope="module")
def python() -> str:
    return rmq5_python()


@pytest.fixture(scope="module")
def grpc_port() -> int:
    return reserved_port()
