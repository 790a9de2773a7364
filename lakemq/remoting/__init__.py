"""RocketMQ's remoting protocol: the codec (pure framing), one asyncio connection with opaque
matching, and the server and client built on it. No broker logic lives here."""

from lakemq.remoting.client import RemotingClient, RemotingClientConfig, parse_addr
from lakemq.remoting.codec import (
    FrameDecoder,
    LanguageCode,
    RemotingCommand,
    SerializeType,
    decode_frame,
    encode,
)
from lakemq.remoting.dispatch import RequestContext, RequestProcessor
from lakemq.remoting.protocol import RemotingConnection
from lakemq.remoting.server import RemotingServer, ServerConfig
from lakemq.remoting.sync import SyncRemotingClient

__all__ = [
    "FrameDecoder",
    "LanguageCode",
    "RemotingClient",
    "RemotingClientConfig",
    "RemotingCommand",
    "RemotingConnection",
    "RemotingServer",
    "RequestContext",
    "RequestProcessor",
    "SerializeType",
    "ServerConfig",
    "SyncRemotingClient",
    "decode_frame",
    "encode",
    "parse_addr",
]
