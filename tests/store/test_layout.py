"""The compiled code's named layout (lakemq/common/_record_layout.pxd and lakemq/store/_layout.pxd,
as the compiled code sees them) equals the Python side's: record positions from lakemq.common.record (and HEAD's own field
offsets), sys flag bits, the batch entry, ConsumeQueue and IndexFile entries."""

from __future__ import annotations

import struct

from lakemq.common import message_batch, record
from lakemq.common.message import (
    KEY_SEPARATOR,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    Message,
    MessageSysFlag,
)
from lakemq.store import consume_queue, index_file
from lakemq.store._layout import layout

# HEAD's fields in order and the name each position has on both sides.
_FIELDS = ("TOTAL_SIZE", "MAGIC_CODE", "BODY_CRC", "QUEUE_ID", "FLAG", "QUEUE_OFFSET", "PHYSICAL_OFFSET",
           "SYS_FLAG", "BORN_TIMESTAMP", "BORN_HOST", "BORN_PORT", "STORE_TIMESTAMP", "STORE_HOST", "STORE_PORT",
           "RECONSUME_TIMES", "PREPARED_TRANSACTION_OFFSET", "BODY_LEN")


def _offsets(fmt: str) -> list[int]:
    """Where each field of a big-endian struct format starts."""
    codes = fmt.lstrip(">")
    out, i = [], 0
    while i < len(codes):
        j = i
        while codes[j].isdigit():
            j += 1
        out.append(struct.calcsize(">" + codes[:i]))
        i = j + 1
    return out


def test_record_positions_are_the_same_on_both_sides() -> None:
    compiled = layout()
    head = _offsets(record.HEAD_BODY_LEN.format)
    assert len(head) == len(_FIELDS)
    for name, offset in zip(_FIELDS, head, strict=True):
        assert getattr(record, f"{name}_POS") == offset == compiled[f"{name}_POS"], name
    assert record.BODY_POS == record.HEAD_BODY_LEN.size == compiled["BODY_POS"]
    assert record.RECORD_FIXED_SIZE == compiled["RECORD_FIXED_SIZE"]
    assert compiled["BODY_POS"] + compiled["TOPIC_LEN_SIZE"] + compiled["PROPS_LEN_SIZE"] == record.RECORD_FIXED_SIZE
    assert record.PROPS_LEN.size == compiled["PROPS_LEN_SIZE"]
    assert compiled["MAX_PROPERTIES_LEN"] == 2 ** (8 * record.PROPS_LEN.size - 1) - 1  # a signed short
    assert (record.MESSAGE_MAGIC_CODE, record.BLANK_MAGIC_CODE) == (compiled["MESSAGE_MAGIC_CODE"],
                                                                  compiled["BLANK_MAGIC_CODE"])
    assert compiled["BLANK_HEAD_SIZE"] == 8  # TOTALSIZE and MAGICCODE of a blank record


def test_flags_and_separators_are_the_same() -> None:
    compiled = layout()
    assert compiled["COMPRESSED_FLAG"] == MessageSysFlag.COMPRESSED_FLAG
    assert compiled["TRANSACTION_MASK"] == MessageSysFlag.TRANSACTION_MASK
    assert compiled["TRANSACTION_PREPARED_TYPE"] == MessageSysFlag.TRANSACTION_PREPARED_TYPE
    assert compiled["TRANSACTION_ROLLBACK_TYPE"] == MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
    assert compiled["NAME_VALUE_SEPARATOR"] == ord(NAME_VALUE_SEPARATOR)
    assert compiled["PROPERTY_SEPARATOR"] == ord(PROPERTY_SEPARATOR)
    assert compiled["KEY_SEPARATOR"] == ord(KEY_SEPARATOR)


def test_batch_consume_queue_and_index_entries_are_the_same() -> None:
    compiled = layout()
    entry = message_batch.encode_messages([Message("T", b"xyz", 7, {"A": "b"})])
    total, _magic, _crc, flag, body_len = struct.unpack_from(">iiiii", entry)
    assert entry[compiled["BATCH_FLAG_POS"]:compiled["BATCH_FLAG_POS"] + 4] == struct.pack(">i", 7) and flag == 7
    assert struct.unpack_from(">i", entry, compiled["BATCH_BODY_LEN_POS"])[0] == body_len == 3
    assert entry[compiled["BATCH_BODY_POS"]:compiled["BATCH_BODY_POS"] + 3] == b"xyz"
    assert compiled["BATCH_ENTRY_FIXED_SIZE"] == message_batch.BATCH_ENTRY_FIXED_SIZE == total - 3 - len(b"A\x01b\x02")
    unit = consume_queue._UNIT  # offset (8), size (4), tags code (8)
    assert [compiled["CQ_OFFSET_POS"], compiled["CQ_SIZE_POS"], compiled["CQ_TAGS_CODE_POS"]] == _offsets(unit.format)
    assert compiled["CQ_STORE_UNIT_SIZE"] == consume_queue.CQ_STORE_UNIT_SIZE == unit.size
    assert compiled["CQ_BLANK_UNIT_SIZE"] == consume_queue.BLANK_UNIT_SIZE
    assert compiled["INDEX_HEADER_SIZE"] == index_file.HEADER_SIZE
    assert compiled["INDEX_SLOT_SIZE"] == index_file.SLOT_SIZE
    assert compiled["INDEX_ENTRY_SIZE"] == index_file.ENTRY_SIZE == index_file._ENTRY.size
    # an entry: key hash (4), CommitLog offset (8), time diff (4), previous entry (4)
    assert [0, compiled["INDEX_ENTRY_PHY_POS"], compiled["INDEX_ENTRY_TIME_DIFF_POS"],
            compiled["INDEX_ENTRY_PREV_POS"]] == _offsets(index_file._ENTRY.format)
