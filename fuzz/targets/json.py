"""fastjson.loads on its own: strict JSON and fastjson's bare-key dialect, as a slave reads its
master's config sync (topics, offsets, groups), a client reads name server and broker answers
(topic lists, cluster info, consume stats), and a broker reads its config files."""

from __future__ import annotations

from typing import Final

from lakemq.errors import FrameError
from lakemq.remoting import fastjson

ALLOWED: Final = (FrameError,)


def one_input(data: bytes) -> None:
    value = fastjson.loads(data)
    hash(fastjson._freeze(value))  # object keys are frozen so: any value must freeze hashable
