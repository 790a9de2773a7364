"""The per-file statistics a Delta ``add`` action carries, as Delta's own writer writes them.

Every reader of "standard Delta tables" skips files by them, so they must be complete for the
columns they name. String bounds longer than 32 characters are cut as Delta's writer cuts
them: the min to its prefix, the max to its prefix + U+10FFFF, so both are still bounds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["stats_json"]

_STRING_MAX = 32
_MAX_CHAR = "\U0010ffff"


def stats_json(num_records: int, mins: Mapping[str, Any], maxs: Mapping[str, Any], null_counts: Mapping[str, int],
               string_columns: Iterable[str]) -> str:
    mins, maxs = dict(mins), dict(maxs)
    for name in string_columns:
        if name in mins and len(mins[name]) > _STRING_MAX:
            mins[name] = mins[name][:_STRING_MAX]
        if name in maxs and len(maxs[name]) > _STRING_MAX:
            maxs[name] = maxs[name][:_STRING_MAX] + _MAX_CHAR
    return json.dumps({"numRecords": num_records, "minValues": mins, "maxValues": maxs, "nullCount": dict(null_counts)})
