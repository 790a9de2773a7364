"""What a producer checks and stamps before it sends a batch: the topic once for the batch,
each member's body and UNIQ_KEY, and the body the broker decodes back into the members."""

from __future__ import annotations

import pytest

from lakemq.client import Message, Producer
from lakemq.common.message import MessageConst
from lakemq.common.message_batch import decode_batch
from lakemq.errors import LakeMQError, MessageIllegalError


def test_members_are_stamped_and_encoded_in_order() -> None:
    producer = Producer("BatchGroup")
    msgs = [Message("Orders", f"body-{i}".encode(), properties={"TAGS": "t"}) for i in range(40)]
    prepared = producer._prepare_batch(msgs)
    ids = [m.properties[MessageConst.UNIQ_CLIENT_MESSAGE_ID_KEYIDX] for m in msgs]
    assert len(set(ids)) == 40 and all(len(i) == 32 for i in ids)
    assert prepared.batch and prepared.topic == "Orders" and prepared.uniq_id == ",".join(ids)
    entries = decode_batch(prepared.body)
    assert [e.body for e in entries] == [m.body for m in msgs]
    assert [e.properties for e in entries] == [f"TAGS\x01t\x02UNIQ_KEY\x01{i}\x02" for i in ids]


@pytest.mark.parametrize(("msgs", "error"), [
    ([], "batch is empty"),
    ([Message("A", b"1"), Message("B", b"2")], "same topic"),
    ([Message("%RETRY%G", b"1")], "retry-topic"),
    ([Message("TBW102", b"1")], "reserved"),
    ([Message("bad topic", b"1")], "topic"),
    ([Message("A", b"1"), Message("A", b"")], "body is empty"),
])
def test_a_batch_the_broker_would_refuse_is_refused_before_sending(msgs: list[Message], error: str) -> None:
    with pytest.raises((MessageIllegalError, LakeMQError), match=error):
        Producer("BatchGroup")._prepare_batch(msgs)


def test_a_delayed_member_is_refused() -> None:
    later = Message("A", b"2")
    later.delay_time_level = 3
    with pytest.raises(MessageIllegalError, match="cannot be delayed"):
        Producer("BatchGroup")._prepare_batch([Message("A", b"1"), later])
