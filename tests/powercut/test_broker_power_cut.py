"""A few power cuts under a real SYNC_FLUSH broker with 4 producers and 2 consumer groups,
under an ASYNC_FLUSH one, and under a SYNC_MASTER whose slave is on a second mount, cut with
it or running on while its master alone is cut, and under a SYNC_MASTER with two slaves cut
whole, master alone or one slave alone (tests/powercut/broker_cuts.py says what is
checked after each; ``scripts/powercut.sh`` runs
the 100 cuts docs/DURABILITY.md reports)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.powercut.broker_cuts import run_power_cuts
from tests.powercut.mount import fuse_available

_WHY = fuse_available()
# Kills and restarts a broker on a FUSE mount, cut after cut.
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_WHY is not None, reason=f"lazyfs needs FUSE: {_WHY}")]

CUTS = int(os.environ.get("LAKEMQ_POWERCUT_CUTS", "3"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_power_cuts_under_a_broker(tmp_path: Path, flush: str) -> None:
    report = run_power_cuts(tmp_path, CUTS, flush=flush, seed=int(os.environ.get("LAKEMQ_POWERCUT_SEED", "5")))
    assert report.failures == []
    assert report.cuts == CUTS
    assert report.acked > 100 * CUTS, report.summary()
    assert report.pending_files_dropped > 0, "no cut dropped anything: the model was not exercised"
    assert report.topics_created == CUTS + 1
    assert report.offsets_checked == 8 * CUTS


@pytest.mark.timeout(300)
def test_power_cuts_under_a_sync_master_and_its_slave(tmp_path: Path) -> None:
    cuts = 2
    report = run_power_cuts(tmp_path, cuts, flush="SYNC_FLUSH", slaves=1,
                            seed=int(os.environ.get("LAKEMQ_POWERCUT_SEED", "5")))
    assert report.failures == []
    assert report.slave_checks == cuts, "the slave did not catch up and match the master after every cut"
    assert report.acked > 0, report.summary()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_power_cuts_of_a_sync_master_alone(tmp_path: Path, flush: str) -> None:
    """The master's machine cut, its slave running on: every acknowledged message is on the
    recovered master (an ASYNC_FLUSH one copies what it lost from the slave first) and the two
    CommitLogs match."""
    cuts = 2
    report = run_power_cuts(tmp_path, cuts, flush=flush, cut="master",
                            seed=int(os.environ.get("LAKEMQ_POWERCUT_SEED", "5")))
    assert report.failures == []
    assert report.slave_checks == cuts, "the slave did not catch up and match the master after every cut"
    assert report.acked > 0 and report.lost_async == 0, report.summary()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("cut", ["all", "master", "slave"])
def test_power_cuts_under_a_sync_master_and_two_slaves(tmp_path: Path, cut: str) -> None:
    """Two slaves under ASYNC_FLUSH, each on a mount of its own; the cut takes the whole site
    (the machines come back in a random order), the master's machine or one slave's: every
    slave converges to the recovered master byte for byte, no queue offset is given out twice,
    and only a whole-site cut may lose acknowledged messages (what no replica had flushed)."""
    cuts = 2
    report = run_power_cuts(tmp_path, cuts, flush="ASYNC_FLUSH", slaves=2, cut=cut,
                            seed=int(os.environ.get("LAKEMQ_POWERCUT_SEED", "5")))
    assert report.failures == []
    assert report.slave_checks == 2 * cuts, "a slave did not catch up and match the master after every cut"
    assert report.records_checked > 0 and report.acked > 0, report.summary()
    if cut != "all":
        assert report.lost_async == 0, report.summary()
