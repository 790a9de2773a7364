"""Which client addresses an ACL entry covers (RocketMQ's RemoteAddressStrategyFactory).

Forms of ``whiteRemoteAddress`` / ``globalWhiteRemoteAddresses`` entries:

- empty: nobody; ``*``, ``*.*.*.*`` or ``*:*:*:*:*:*:*:*``: everybody;
- ``192.168.0.{1,2,3}`` or ``192.168.0.1,192.168.0.2``: exactly those addresses;
- ``192.168.0.*``, ``192.168.*``, ``192.168.0.1-200``: an IPv4 range in one octet (the
  octets after it are not checked, as in RocketMQ);
- one IPv4 or IPv6 address.

IPv6 ranges are refused with a ConfigError (lakemq listens on IPv4).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from lakemq.errors import ConfigError

__all__ = ["AddressMatcher", "parse_address_pattern"]


def _normalize(address: str) -> str | None:
    try:
        return ipaddress.ip_address(address.strip()).compressed
    except ValueError:
        return None


def _octets(address: str) -> tuple[int, ...] | None:
    try:
        return tuple(ipaddress.IPv4Address(address).packed)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class AddressMatcher:
    pattern: str
    everybody: bool = False
    addresses: frozenset[str] = frozenset()
    prefix: tuple[int, ...] = ()  # octets before the ranged one
    low: int = 0
    high: int = -1  # an empty range unless a range was parsed

    def matches(self, host: str) -> bool:
        if self.everybody:
            return True
        if self.addresses:
            return _normalize(host) in self.addresses
        octets = _octets(host)
        if octets is None or self.high < 0:
            return False
        index = len(self.prefix)
        return octets[:index] == self.prefix and self.low <= octets[index] <= self.high


def parse_address_pattern(pattern: str | None, where: str) -> AddressMatcher:
    text = (pattern or "").strip()
    if not text:
        return AddressMatcher(text)
    if text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return AddressMatcher(text, everybody=True)
    if text.endswith("}"):
        head, brace, tail = text.rpartition("{")
        if not brace or not head.endswith("."):
            raise ConfigError(f"{where}: bad address list {text!r} (expected like 192.168.0.{{1,2}})")
        return _exact(text, [head + item.strip() for item in tail[:-1].split(",") if item.strip()], where)
    if "," in text:
        return _exact(text, [item for item in text.split(",") if item.strip()], where)
    if "*" in text or "-" in text:
        return _range(text, where)
    return _exact(text, [text], where)


def _exact(text: str, items: list[str], where: str) -> AddressMatcher:
    addresses = set()
    for item in items:
        normalized = _normalize(item)
        if normalized is None:
            raise ConfigError(f"{where}: {item.strip()!r} in {text!r} is not an IP address")
        addresses.add(normalized)
    if not addresses:
        raise ConfigError(f"{where}: {text!r} lists no address")
    return AddressMatcher(text, addresses=frozenset(addresses))


def _range(text: str, where: str) -> AddressMatcher:
    if ":" in text:
        raise ConfigError(f"{where}: IPv6 ranges ({text!r}) are not supported")
    parts = [p.strip() for p in text.split(".")]
    for index in range(1, min(len(parts), 4)):
        part = parts[index]
        if part == "*":
            low, high = 0, 255
        elif "-" in part and not part.startswith("-"):
            first, _, last = part.partition("-")
            try:
                low, high = int(first), int(last)
            except ValueError:
                raise ConfigError(f"{where}: bad range {part!r} in {text!r}") from None
            if not 0 <= low <= high <= 255:
                raise ConfigError(f"{where}: range {part!r} in {text!r} must be within 0-255, low first")
        else:
            continue
        try:
            prefix = tuple(int(p) for p in parts[:index])
        except ValueError:
            raise ConfigError(f"{where}: {text!r} is not an address range") from None
        if not all(0 <= p <= 255 for p in prefix):
            raise ConfigError(f"{where}: {text!r} has an octet outside 0-255")
        return AddressMatcher(text, prefix=prefix, low=low, high=high)
    raise ConfigError(f"{where}: {text!r} is not an address range (use a.b.c.* or a.b.c.1-200)")
