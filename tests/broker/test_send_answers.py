"""What a send is answered: the queue the producer chose, also for messages the broker stores in
a system topic first (Apache RocketMQ's Java client builds its SendResult's MessageQueue from
this answer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakemq.common.codes import ResponseCode
from lakemq.common.message import MessageConst
from tests.broker.wire import in_process_broker, send_request

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("v2", [True, False])
async def test_a_delayed_send_is_answered_with_its_own_queue(tmp_path: Path, v2: bool) -> None:
    async with in_process_broker(tmp_path) as (controller, client):
        addr = controller.broker_addr
        plain = await client.invoke(addr, send_request("Later", b"now", queue_id=2, v2=v2), 5.0)
        assert plain.code == ResponseCode.SUCCESS and plain.ext_fields["queueId"] == "2"
        for expected_offset in (0, 1):
            delayed = await client.invoke(addr, send_request(
                "Later", b"later", queue_id=3, v2=v2, properties={MessageConst.DELAY_TIME_LEVEL: "2"}), 5.0)
            assert delayed.code == ResponseCode.SUCCESS, delayed.remark
            # Stored in SCHEDULE_TOPIC_XXXX's queue of level 2 (queue 1), answered as queue 3,
            # at its offset in the schedule queue (RocketMQ answers the same).
            assert delayed.ext_fields["queueId"] == "3"
            assert delayed.ext_fields["queueOffset"] == str(expected_offset)
