"""Every exception lakemq raises, in one tree::

    LakeMQError
    ├── InvalidNameError            topic or group name (or queue id) breaks RocketMQ's rules
    ├── ConfigError                 unknown key or bad value in a .conf file
    ├── RecordError                 a CommitLog record or message id that does not decode
                                    (lakemq.common.record)
    ├── EvaluationError             a property a SQL92 filter cannot convert: the message
                                    does not match (lakemq.filter.expression)
    ├── DemoError                   a step of ``lakemq demo`` missed its expected outcome
    ├── StoreError                  hot-tier failures that are not a message's fault
    │   └── CorruptFileError        a store file that cannot be read back
    │       └── CorruptSegmentError a CommitLog range the lake tier cannot decode (``offset``)
    ├── LakeError                   the lake tier: IO, Delta commit or manifest failures
    │   └── VerificationError       lake rows that do not match the segment they came from
    ├── MessageIllegalError         oversized body or properties, unknown sys flag (MESSAGE_ILLEGAL)
    ├── FilterExpressionError       a SQL92 subscription expression that does not compile
    │                               (SUBSCRIPTION_PARSE_FAILED)
    ├── RemotingError               transport level (client side)
    │   ├── RemotingConnectError
    │   ├── RemotingTimeoutError
    │   ├── FrameError              malformed, truncated or oversized frame
    │   └── RemotingCommandError    a header field missing or of the wrong type
    └── BrokerError                 a response code other than SUCCESS, see for_code()
        ├── FlushDiskTimeoutError   (FLUSH_DISK_TIMEOUT, retriable)
        ├── ServiceNotAvailableError (SERVICE_NOT_AVAILABLE, retriable)
        ├── SystemBusyError          (SYSTEM_BUSY / TOO_MANY_REQUESTS, retriable with backoff)
        ├── TopicNotExistError       (TOPIC_NOT_EXIST, retriable after a route refresh)
        └── NoPermissionError        (NO_PERMISSION)

``retriable`` says whether a producer may send the same message again.
"""

from __future__ import annotations

from typing import ClassVar

from lakemq.common.codes import ResponseCode

__all__ = [
    "BrokerError",
    "ConfigError",
    "CorruptFileError",
    "CorruptSegmentError",
    "DemoError",
    "EvaluationError",
    "FilterExpressionError",
    "FlushDiskTimeoutError",
    "FrameError",
    "InvalidNameError",
    "LakeError",
    "LakeMQError",
    "MessageIllegalError",
    "NoPermissionError",
    "ReceiptHandleError",
    "RecordError",
    "RemotingCommandError",
    "RemotingConnectError",
    "RemotingError",
    "RemotingTimeoutError",
    "ServiceNotAvailableError",
    "StoreError",
    "SystemBusyError",
    "TopicNotExistError",
    "VerificationError",
    "for_code",
]


class LakeMQError(Exception):
    retriable: ClassVar[bool] = False


class InvalidNameError(LakeMQError, ValueError):
    pass


class ConfigError(LakeMQError, ValueError):
    pass


class RecordError(LakeMQError, ValueError):
    """A record that cannot be decoded: bad magic, bad size, bad CRC or truncated."""


class EvaluationError(LakeMQError):
    """A property value that cannot be converted for a SQL92 comparison (a Java exception in
    RocketMQ): the message does not match."""


class DemoError(LakeMQError):
    """A step of the demo did not reach its expected outcome."""


class StoreError(LakeMQError):
    pass


class CorruptFileError(StoreError):
    pass


class CorruptSegmentError(CorruptFileError):
    """``offset`` is the CommitLog offset where the bad bytes start."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset

    def __reduce__(self) -> tuple[type, tuple[str, int]]:
        return type(self), (str(self), self.offset)


class LakeError(LakeMQError):
    pass


class VerificationError(LakeError):
    pass


class MessageIllegalError(LakeMQError, ValueError):
    code: ClassVar[int] = ResponseCode.MESSAGE_ILLEGAL


class FilterExpressionError(LakeMQError, ValueError):
    code: ClassVar[int] = ResponseCode.SUBSCRIPTION_PARSE_FAILED


class RemotingError(LakeMQError):
    retriable = True


class RemotingConnectError(RemotingError):
    pass


class RemotingTimeoutError(RemotingError):
    pass


class FrameError(RemotingError):
    retriable = False


class RemotingCommandError(RemotingError):
    retriable = False


class BrokerError(LakeMQError):
    """A response whose code is not SUCCESS; ``code`` and ``remark`` are the broker's."""

    codes: ClassVar[tuple[int, ...]] = ()

    def __init__(self, code: int, remark: str | None = None) -> None:
        self.code = code
        self.remark = remark or ""
        try:
            name = ResponseCode(code).name
        except ValueError:
            name = "UNKNOWN"
        super().__init__(f"{name}({code}): {self.remark}" if self.remark else f"{name}({code})")


class FlushDiskTimeoutError(BrokerError):
    codes = (ResponseCode.FLUSH_DISK_TIMEOUT,)
    retriable = True


class ServiceNotAvailableError(BrokerError):
    codes = (ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.SLAVE_NOT_AVAILABLE)
    retriable = True


class SystemBusyError(BrokerError):
    codes = (ResponseCode.SYSTEM_BUSY, ResponseCode.TOO_MANY_REQUESTS)
    retriable = True


class TopicNotExistError(BrokerError):
    codes = (ResponseCode.TOPIC_NOT_EXIST,)
    retriable = True


class NoPermissionError(BrokerError):
    codes = (ResponseCode.NO_PERMISSION,)


class ReceiptHandleError(BrokerError):
    """A POP receipt handle that does not parse, or whose delivery is over (acked, hidden again
    under a newer handle, delivered again or dead-lettered)."""

    def __init__(self, remark: str, code: int = ResponseCode.NO_MESSAGE) -> None:
        super().__init__(code, remark)


_BY_CODE: dict[int, type[BrokerError]] = {
    code: cls
    for cls in (FlushDiskTimeoutError, ServiceNotAvailableError, SystemBusyError,
                TopicNotExistError, NoPermissionError)
    for code in cls.codes
}


def for_code(code: int, remark: str | None = None) -> BrokerError:
    """The exception for a broker response code."""
    return _BY_CODE.get(code, BrokerError)(code, remark)
