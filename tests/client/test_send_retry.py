"""The producer's retry loop against brokers that misbehave on purpose.

Two scripted brokers and a name server run as real RemotingServers on loopback; each broker
answers SEND_MESSAGE_V2 from a script of response codes, so flow control (SYSTEM_BUSY,
TOO_MANY_REQUESTS) and message errors can be produced on demand — a real broker refuses only
under load.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from lakemq.client import Message, Producer, ProducerConfig, SendStatus
from lakemq.common.codes import RequestCode, ResponseCode
from lakemq.errors import BrokerError, SystemBusyError
from lakemq.remoting import RemotingCommand, RemotingServer, RequestContext, fastjson
from lakemq.remoting.headers import decode_send_header


@dataclass
class ScriptedBroker:
    name: str
    codes: list[int]  # answers in order, the last one repeating; brokers may share one script
    attempts: list[float] = field(default_factory=list)
    server: RemotingServer = field(default_factory=RemotingServer)

    def reject_request(self) -> bool:
        return False

    async def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand | None:
        if request.code in (RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT):
            return request.reply(ResponseCode.SUCCESS)
        header = decode_send_header(request)
        self.attempts.append(time.monotonic())
        code = self.codes.pop(0) if len(self.codes) > 1 else self.codes[0]
        if code != ResponseCode.SUCCESS:
            return request.reply(code, f"scripted {ResponseCode(code).name}")
        return request.reply(code, ext_fields={"msgId": "7F000001000000000000000000000000",
                                               "queueId": str(header.queue_id), "queueOffset": "0"})


class RouteServer:
    def __init__(self, brokers: list[ScriptedBroker]) -> None:
        self.brokers = brokers
        self.server = RemotingServer()

    def reject_request(self) -> bool:
        return False

    async def process_request(self, ctx: RequestContext, request: RemotingCommand) -> RemotingCommand:
        route = {
            "queueDatas": [{"brokerName": b.name, "readQueueNums": 1, "writeQueueNums": 1, "perm": 6,
                            "topicSysFlag": 0} for b in self.brokers],
            "brokerDatas": [{"cluster": "c", "brokerName": b.name, "brokerAddrs": {"0": b.server.address}}
                            for b in self.brokers],
        }
        return request.reply(ResponseCode.SUCCESS, body=fastjson.dumps(route))


@asynccontextmanager
async def scripted(*scripts: list[int]) -> AsyncIterator[tuple[str, list[ScriptedBroker]]]:
    brokers = [ScriptedBroker(f"b{i}", codes) for i, codes in enumerate(scripts)]
    names = RouteServer(brokers)
    for broker in brokers:
        broker.server.register_default_processor(broker)
        await broker.server.start()
    names.server.register_processor(RequestCode.GET_ROUTEINFO_BY_TOPIC, names)
    await names.server.start()
    try:
        yield names.server.address, brokers
    finally:
        for server in [names.server, *(b.server for b in brokers)]:
            await server.shutdown()


# Each test sends twice over: as a producer's first send (the route is looked up on the way)
# and once the route is known, when the first attempt goes straight to the broker's connection
# (Producer._send_direct) and only what follows a failure goes through the retry loop.
ROUTES = pytest.mark.parametrize("route_known", [False, True], ids=["first-send", "route-known"])


async def _warm(producer: Producer, route_known: bool) -> None:
    if route_known:
        assert (await producer.send(Message("T", b"warm"))).send_status is SendStatus.SEND_OK


def _script(route_known: bool, *codes: int) -> list[int]:
    """One script both brokers share: the warm-up's answer first when there is one."""
    return [ResponseCode.SUCCESS] * route_known + list(codes)


@ROUTES
async def test_flow_control_backs_off_then_another_broker_takes_it(route_known: bool) -> None:
    busy_once = _script(route_known, ResponseCode.SYSTEM_BUSY, ResponseCode.SUCCESS)  # whichever is asked refuses
    async with scripted(busy_once, busy_once) as (ns, brokers), Producer("retry_pg", namesrv_addr=ns) as producer:
        await _warm(producer, route_known)
        result = await producer.send(Message("T", b"x"))
    assert result.send_status is SendStatus.SEND_OK
    attempts = sorted((t, b.name) for b in brokers for t in b.attempts)
    assert len(attempts) == 2 + route_known
    first, second = attempts[-2:]
    assert first[1] != second[1]  # the retry avoided the broker that refused
    assert 0.75 <= second[0] - first[0] <= 1.5  # the first backoff: 1 s +- 20 %


@ROUTES
async def test_flow_control_everywhere_gives_up_after_three_attempts(route_known: bool) -> None:
    busy = _script(route_known, ResponseCode.TOO_MANY_REQUESTS)
    async with scripted(busy, busy) as (ns, brokers), Producer("retry_pg", namesrv_addr=ns) as producer:
        await _warm(producer, route_known)
        started = time.monotonic()
        with pytest.raises(SystemBusyError):
            await producer.send(Message("T", b"x"))
        elapsed = time.monotonic() - started
    times = sorted(t for b in brokers for t in b.attempts)[route_known:]
    assert len(times) == 3  # retryTimesWhenSendFailed = 2
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert 0.75 <= gaps[0] <= 1.5 and 1.2 <= gaps[1] <= 2.2  # 1 s, then 1.6 s, +- 20 %
    assert elapsed < 5


@ROUTES
async def test_message_errors_are_not_retried_and_failures_are(route_known: bool) -> None:
    illegal = _script(route_known, ResponseCode.MESSAGE_ILLEGAL)
    async with scripted(illegal, illegal) as (ns, brokers), Producer("retry_pg", namesrv_addr=ns) as producer:
        await _warm(producer, route_known)
        with pytest.raises(BrokerError) as refused:
            await producer.send(Message("T", b"x"))
    assert refused.value.code == ResponseCode.MESSAGE_ILLEGAL
    assert sum(len(b.attempts) for b in brokers) == 1 + route_known
    fail_once = _script(route_known, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SUCCESS)
    async with scripted(fail_once, fail_once) as (ns, brokers), Producer("retry_pg", namesrv_addr=ns) as producer:
        await _warm(producer, route_known)
        started = time.monotonic()
        assert (await producer.send(Message("T", b"x"))).send_status is SendStatus.SEND_OK
        assert time.monotonic() - started < 0.5  # retried at once, no backoff
    attempts = sorted((t, b.name) for b in brokers for t in b.attempts)
    assert len(attempts) == 2 + route_known
    assert attempts[-1][1] != attempts[-2][1]  # the retry went to the other broker


@ROUTES
@pytest.mark.parametrize("fault_enable", [False, True], ids=["fault-off", "fault-on"])
async def test_latency_faults_are_kept_only_when_enabled(route_known: bool, fault_enable: bool) -> None:
    """As RocketMQ's updateFaultItem: a failed broker is isolated only with
    sendLatencyFaultEnable, the setting under which queue selection reads the faults."""
    fail_once = _script(route_known, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SUCCESS)
    config = ProducerConfig(send_latency_fault_enable=fault_enable)
    async with scripted(fail_once, fail_once) as (ns, brokers), \
            Producer("retry_pg", namesrv_addr=ns, config=config) as producer:
        await _warm(producer, route_known)
        assert (await producer.send(Message("T", b"x"))).send_status is SendStatus.SEND_OK
        attempts = sorted((t, b.name) for b in brokers for t in b.attempts)
        failed, answered = attempts[-2][1], attempts[-1][1]
        assert failed != answered
        assert producer.sender.fault.is_available(failed) is not fault_enable
        assert producer.sender.fault.is_available(answered)
