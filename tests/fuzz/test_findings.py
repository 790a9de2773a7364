"""What the coverage-guided fuzz runs found (docs/FUZZING.md), each pinned at its decoder with
the input that found it (tests/fuzz/regressions/TARGET/NAME) or its essence."""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any, cast

import pytest

from fuzz.targets import load, run_one
from lakemq.broker.grpc.consume import requested_times
from lakemq.broker.grpc.convert import (
    SendRefused,
    decode_transaction_id,
    encode_transaction_id,
    enum_name,
    millis,
    send_header,
)
from lakemq.common import compression, record
from lakemq.common.message import MessageSysFlag
from lakemq.errors import FilterExpressionError, FrameError, RecordError, RemotingCommandError
from lakemq.filter import parse_subscription
from lakemq.filter.sql92 import compile_sql92, parse_sql92
from lakemq.grpc._pb import definition_pb2 as v2
from lakemq.grpc._pb import service_pb2 as rpc
from lakemq.remoting import fastjson
from lakemq.remoting.bodies import TopicRouteData

REGRESSIONS = Path(__file__).parent / "regressions"


def _compressed_record(body: bytes) -> bytes:
    return bytes(record.encode_record(topic=b"T", queue_id=0, body=body, flag=0, properties=b"",
                                      sys_flag=MessageSysFlag.COMPRESSED_FLAG, born_timestamp=1,
                                      born_host=(bytes(4), 1), store_host=(bytes(4), 2)))


def test_a_compressed_body_that_does_not_inflate_is_a_record_error() -> None:
    # records/zlib_error: zlib.error escaped decode_record (and iter_records) untranslated.
    pulled = (REGRESSIONS / "records" / "zlib_error").read_bytes()[1:]
    with pytest.raises(RecordError, match="does not decompress"):
        list(record.iter_records(pulled, decompress=True))
    garbage = _compressed_record(b"not zlib")
    with pytest.raises(RecordError, match="does not decompress"):
        record.decode_record(garbage, decompress=True)
    with pytest.raises(RecordError, match="truncated"):
        record.decode_record(_compressed_record(zlib.compress(b"x" * 1000)[:-6]), decompress=True)
    # The compiled pull decoder leaves such a record to the Python one, which says why.
    assert record.decode_pulled(garbage, None, "0", "1", "MIN_OFFSET", "MAX_OFFSET") is None


def test_a_compressed_body_inflates_to_a_bounded_size(monkeypatch: pytest.MonkeyPatch) -> None:
    # A zlib bomb: 4 MiB of records could otherwise inflate to gigabytes in the reader.
    monkeypatch.setattr(compression, "MAX_DECOMPRESSED_SIZE", 4096)
    assert record.decode_record(_compressed_record(zlib.compress(b"z" * 4096)), decompress=True).body == b"z" * 4096
    bomb = _compressed_record(zlib.compress(b"z" * 4097))
    with pytest.raises(RecordError, match="inflates past 4096 bytes"):
        record.decode_record(bomb, decompress=True)
    assert record.decode_pulled(bomb, None, "0", "1", "MIN_OFFSET", "MAX_OFFSET") is None


def test_deeply_nested_sql92_is_a_filter_expression_error() -> None:
    # tags/sql92_nested_parentheses: 61 "(" made sqlglot's parser raise RecursionError.
    data = (REGRESSIONS / "tags" / "sql92_nested_parentheses").read_bytes()
    with pytest.raises(FilterExpressionError, match="nested too deeply"):
        parse_subscription("T", data[1:].decode(), "SQL92")
    with pytest.raises(FilterExpressionError, match="nested too deeply"):
        parse_sql92("(" * 500 + "a > 1" + ")" * 500)
    assert parse_sql92("(" * 20 + "a > 1" + ")" * 20) is not None


@pytest.mark.parametrize(("data", "reason"), [
    ((REGRESSIONS / "json" / "mixed_object_key").read_bytes(), None),
    (b"[" * 100_000, "recursion"),
    (b'{"a":"\xff"}', "utf-8"),
])
def test_fastjson_raises_only_frame_error(data: bytes, reason: str | None) -> None:
    # json/mixed_object_key: an object key whose own keys mix numbers and text raised TypeError
    # when frozen; deep nesting and bad UTF-8 escaped fastjson.loads as other errors.
    if reason is None:
        assert fastjson.loads(data) == {(("a", 3), (1, 2)): 0}  # ordered by the keys' repr
        return
    with pytest.raises(FrameError, match=reason):
        fastjson.loads(data)


def test_a_body_with_a_mixed_object_key_decodes() -> None:
    data = (REGRESSIONS / "bodies" / "mixed_object_key").read_bytes()[1:]
    assert TopicRouteData.decode(data).broker_datas == ()
    with pytest.raises(RemotingCommandError, match="not JSON"):
        TopicRouteData.decode(b'{"brokerDatas":' + b"[" * 5000)


def test_integers_past_int_conversion_limit_in_sql92() -> None:
    # sql92/long_integer_*: Python's int() refuses text of over 4300 digits with ValueError,
    # which escaped compile_sql92 (a literal) and matches (a producer's property value). Found
    # by review: the fuzz runs' inputs are at most 4096 bytes.
    with pytest.raises(FilterExpressionError, match="out of the range of a long"):
        compile_sql92((REGRESSIONS / "sql92" / "long_integer_literal").read_bytes().decode())
    expression = compile_sql92("a > 5")
    assert expression.matches({"a": "0" * 5000 + "7"})  # Java's Integer.valueOf takes leading zeros
    assert not expression.matches({"a": "1" * 5000})  # NumberFormatException in Java: no match
    assert not expression.matches({"a": "-" + "9" * 5000})


def test_unknown_v2_enum_values_are_refused_by_number_not_raised() -> None:
    # grpc/unknown_message_type: a SendMessage whose message_type is 45 (proto3 keeps unknown
    # enum values) made MessageType.Name raise ValueError while the refusal was worded.
    data = (REGRESSIONS / "grpc" / "unknown_message_type").read_bytes()
    request = rpc.SendMessageRequest.FromString(data[1:])
    with pytest.raises(SendRefused, match="message type 45 does not match"):
        send_header(request.messages[1], max_body=1024, write_queues=4)
    # The same in Telemetry's Settings: an unknown client type and language are named by number.
    grpc_target = load("grpc")
    telemetry = bytes([[m.name for m in grpc_target.METHODS].index("Telemetry")])
    unknown_type, unknown_language = cast(Any, 99), cast(Any, 77)  # values the definition does not name
    command = rpc.TelemetryCommand(settings=v2.Settings(client_type=unknown_type,
                                                        user_agent=v2.UA(language=unknown_language)))
    run_one(grpc_target, telemetry + command.SerializeToString())
    producer = rpc.TelemetryCommand(settings=v2.Settings(client_type=v2.ClientType.PRODUCER,
                                                         user_agent=v2.UA(language=unknown_language)))
    run_one(grpc_target, telemetry + producer.SerializeToString())
    assert enum_name(v2.ClientType, 99) == "99" and enum_name(v2.ClientType, v2.ClientType.PRODUCER) == "PRODUCER"


def test_a_transaction_id_is_hex_digits_only() -> None:
    # int() takes a sign, spaces and underscores: "-000...01" decoded to a negative offset.
    good = encode_transaction_id(4096, 7)
    assert decode_transaction_id(good) == decode_transaction_id(good.lower()) == (4096, 7)
    for bad in ("-" + good[1:], "+" + good[1:], " " + good[1:], good[:5] + "_" + good[6:], good[:-1] + "g"):
        assert decode_transaction_id(bad) is None, bad


def test_invalid_timestamps_and_durations_are_refused_with_a_status() -> None:
    # grpc/invalid_born_timestamp: a born_timestamp with nanos 1,700,000,000 made protobuf's
    # ToMilliseconds raise ValueError out of the send; durations and delivery times the same.
    data = (REGRESSIONS / "grpc" / "invalid_born_timestamp").read_bytes()
    request = rpc.SendMessageRequest.FromString(data[1:])
    bad = next(m for m in request.messages if m.system_properties.HasField("born_timestamp"))
    with pytest.raises(SendRefused, match="born_timestamp is not a valid timestamp"):
        send_header(bad, max_body=1024, write_queues=4)
    timed = v2.Message(topic=v2.Resource(name="T"), body=b"x", system_properties=v2.SystemProperties(
        message_id="m", message_type=v2.MessageType.DELAY))
    timed.system_properties.delivery_timestamp.seconds = 10 ** 15  # past year 9999
    with pytest.raises(SendRefused, match="delivery_timestamp is not a valid") as refused:
        send_header(timed, max_body=1024, write_queues=4)
    assert refused.value.code == v2.Code.ILLEGAL_DELIVERY_TIME
    receive = rpc.ReceiveMessageRequest(batch_size=32)
    receive.invisible_duration.seconds = 5
    receive.invisible_duration.nanos = 10 ** 9  # past its range
    answer = requested_times(receive, None, 15_000)
    assert isinstance(answer, v2.Status) and answer.code == v2.Code.ILLEGAL_INVISIBLE_TIME
    receive.invisible_duration.nanos = 0
    receive.long_polling_timeout.seconds = 10 ** 12  # over 10,000 years
    answer = requested_times(receive, None, 15_000)
    assert isinstance(answer, v2.Status) and answer.code == v2.Code.ILLEGAL_POLLING_TIME
    receive.long_polling_timeout.seconds = 20
    assert requested_times(receive, None, 15_000) == (5000, 20_000)
    assert millis(receive.long_polling_timeout) == 20_000
