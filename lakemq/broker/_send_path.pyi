"""Types of the compiled module lakemq/broker/_send_path.pyx."""

from collections.abc import Callable, Collection
from typing import Any

from lakemq.remoting.codec import RemotingCommand
from lakemq.remoting.dispatch import RequestContext

class PlainSends:
    def __init__(self, topic_config: Callable[[str], Any], config: Any, writeable: Callable[[int], bool],
                 valid_name: Callable[[str], bool], not_allowed: Collection[str], retry_prefix: str,
                 transaction_pair: str, wait: str, without_wait: Callable[[str], str], plain_put: type,
                 put: Callable[..., Any], suffix: bytes, put_ok: Any, record: Callable[[str, int, int, float], None],
                 reply: Callable[..., RemotingCommand], later: Callable[..., object], command_type: type[RemotingCommand], language: Any,
                 version: int, region_key: str, region: str, trace_key: str, trace: str) -> None: ...
    def send(self, ctx: RequestContext, request: RemotingCommand, sink: object = None,
             token: object = None) -> object: ...
    def acknowledged(self, ctx: RequestContext, request: RemotingCommand, topic: str, queue_id: int, result: Any,
                     started: float, status: Any) -> RemotingCommand: ...
