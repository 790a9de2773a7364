"""JSON bodies (lakemq.remoting.bodies, through fastjson's bare-key dialect): the first byte
picks the body class, the rest is the body."""

from __future__ import annotations

from typing import Final

from lakemq.errors import RemotingCommandError
from lakemq.remoting import bodies

ALLOWED: Final = (RemotingCommandError,)
CLASSES: Final = (bodies.RegisterBrokerBody, bodies.KVTable, bodies.TopicRouteData, bodies.ClusterInfo,
                  bodies.TopicList, bodies.HeartbeatData, bodies.LockBatchRequestBody,
                  bodies.LockBatchResponseBody, bodies.GetConsumerListByGroupResponseBody)


def one_input(data: bytes) -> None:
    if not data:
        return
    cls = CLASSES[data[0] % len(CLASSES)]
    cls.decode(data[1:])
