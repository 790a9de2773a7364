"""RocketMQ 5 statuses (``apache.rocketmq.v2.Status``) for what the broker core answers.

The core refuses with RocketMQ 4.x response codes (BrokerError); each maps to the v2 code
RocketMQ's proxy answers for it, with the core's remark as the message.
"""

from __future__ import annotations

from typing import Final

from lakemq.common.codes import ResponseCode
from lakemq.grpc._pb.definition_pb2 import Code, Status

__all__ = ["NOT_IMPLEMENTED_YET", "OK", "status", "status_of_response"]

OK: Final = Status(code=Code.OK, message="OK")
# What an RPC lakemq does not serve yet says, with the RPC's name (docs/COMPATIBILITY.md).
NOT_IMPLEMENTED_YET: Final = "{rpc} is not implemented by lakemq yet (docs/COMPATIBILITY.md)"

_BY_RESPONSE: Final[dict[int, Code]] = {
    ResponseCode.SUCCESS: Code.OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    ResponseCode.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    ResponseCode.INVALID_PARAMETER: Code.BAD_REQUEST,
    ResponseCode.NO_PERMISSION: Code.FORBIDDEN,
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
    ResponseCode.FLOW_CONTROL: Code.TOO_MANY_REQUESTS,
    ResponseCode.SERVICE_NOT_AVAILABLE: Code.INTERNAL_SERVER_ERROR,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: Code.NOT_IMPLEMENTED,
    ResponseCode.VERSION_NOT_SUPPORTED: Code.VERSION_UNSUPPORTED,
}


def status(code: Code, message: str) -> Status:
    return Status(code=code, message=message)


def status_of_response(response_code: int, remark: str) -> Status:
    """The v2 status of a 4.x response code (unknown codes: INTERNAL_SERVER_ERROR)."""
    code = _BY_RESPONSE.get(response_code, Code.INTERNAL_SERVER_ERROR)
    return Status(code=code, message=remark or ("OK" if code == Code.OK else f"response code {response_code}"))
