"""What a put stores: the request value :meth:`MessageStore.put` takes, in one of three forms.

- :class:`PlainPut`: one message as a send request carries it (body, properties text and
  header fields), stored without a message object by the compiled ``RecordEncoder.gather_one``.
- :class:`BatchPut`: a SEND_BATCH_MESSAGE body as the producer encoded it, with what its
  members share (RocketMQ's MessageExtBatch), stored by ``RecordEncoder.gather_batch``.
- :class:`MessagesPut`: message objects (one, or a batch stored contiguously).

The first two are the broker's hot path. The store takes them the compiled way when it can
and otherwise builds the message objects itself (:meth:`PlainPut.messages`,
:meth:`BatchPut.messages`) and stores those, which handles everything exactly: a new topic,
DELAY, WAIT=false, an existing property of the suffix's name, a malformed batch entry.

Each form is a NamedTuple: frozen, and built in a fraction of a frozen dataclass's time (the
broker builds one per send).
"""

from __future__ import annotations

from typing import NamedTuple

from lakemq.common.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    MessageConst,
    MessageExtBrokerInner,
    string_to_properties,
    tags_hash_code,
)
from lakemq.common.message_batch import decode_batch

__all__ = ["BatchPut", "MessagesPut", "PlainPut", "PutRequest", "message_from_parts"]


class PlainPut(NamedTuple):
    """One message from a send request's parts. ``properties_suffix`` is one
    ``name\\x01value\\x02`` pair the broker adds to every message it stores (its CLUSTER)."""

    topic: str
    queue_id: int
    body: bytes
    properties: str
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    reconsume_times: int
    properties_suffix: bytes = b""

    def messages(self, store_host: str) -> tuple[MessageExtBrokerInner, ...]:
        return (message_from_parts(self.topic, self.queue_id, self.body, self.flag, self.properties, self.sys_flag,
                                   self.born_timestamp, self.born_host, self.reconsume_times,
                                   self.properties_suffix.decode(), store_host),)


class BatchPut(NamedTuple):
    """A SEND_BATCH_MESSAGE: ``body`` is the producer's encoding of the members
    (lakemq.common.message_batch); the other fields are what the members share, and
    ``properties_suffix`` is appended to every member's properties (as PlainPut's)."""

    topic: str
    queue_id: int
    body: bytes
    properties_suffix: bytes = b""
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: str = "127.0.0.1:0"
    reconsume_times: int = 0

    def messages(self, store_host: str) -> tuple[MessageExtBrokerInner, ...]:
        """The members as message objects; MessageIllegalError for a malformed body."""
        suffix = self.properties_suffix.decode()
        return tuple(message_from_parts(self.topic, self.queue_id, e.body, e.flag, e.properties, self.sys_flag,
                                        self.born_timestamp, self.born_host, self.reconsume_times, suffix,
                                        store_host)
                     for e in decode_batch(self.body))


class MessagesPut(NamedTuple):
    """Message objects: one message, or a batch (stored contiguously, with consecutive queue
    offsets per queue; batches may not be delayed or transactional, as RocketMQ's)."""

    messages: tuple[MessageExtBrokerInner, ...]

    @classmethod
    def of(cls, *messages: MessageExtBrokerInner) -> MessagesPut:
        return cls(messages)


PutRequest = PlainPut | BatchPut | MessagesPut


def message_from_parts(topic: str, queue_id: int, body: bytes, flag: int, properties: str, sys_flag: int,
                       born_timestamp: int, born_host: str, reconsume_times: int, properties_suffix: str,
                       store_host: str) -> MessageExtBrokerInner:
    """The message a send's parts describe, with the ``name\\x01value\\x02`` pair of
    ``properties_suffix`` set (replacing a property of that name the client sent)."""
    props = string_to_properties(properties)
    msg = MessageExtBrokerInner(topic=topic, body=body, flag=flag, properties=props, queue_id=queue_id,
                                sys_flag=sys_flag, born_timestamp=born_timestamp, born_host=born_host,
                                store_host=store_host, reconsume_times=reconsume_times)
    count = len(props)
    # The client's text is what properties_to_string would write: stored as it came.
    canonical = not properties or (properties[-1] == PROPERTY_SEPARATOR
                                   and properties.count(PROPERTY_SEPARATOR) == count
                                   and properties.count(NAME_VALUE_SEPARATOR) == count)
    if properties_suffix:
        name, _, value = properties_suffix.rstrip(PROPERTY_SEPARATOR).partition(NAME_VALUE_SEPARATOR)
        if canonical and name not in props:
            props[name] = value
            msg.properties_string = properties + properties_suffix
        else:
            msg.set_property(name, value)
    elif canonical:
        msg.properties_string = properties
    tags = props.get(MessageConst.TAGS)
    msg.tags_code = tags_hash_code(tags) if tags else 0
    return msg
