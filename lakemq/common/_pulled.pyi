"""Types of the compiled module lakemq/common/_pulled.pyx."""

from collections.abc import Callable
from collections.abc import Set as AbstractSet

from lakemq.common.message import MessageExt

def bind(ext_type: type[MessageExt], host_of: Callable[[bytes], str], decompress: Callable[[bytes, int], bytes],
         uniq_key: str, tags_key: str) -> None: ...
def decode_pulled(body: bytes, tags: AbstractSet[str] | None, min_offset: str, max_offset: str, min_key: str,
                  max_key: str) -> list[MessageExt] | None: ...
