"""Egress rules for http.fetch: which hosts may be asked for, which addresses reached.

A host must be on the allowlist (exact name or IP literal, or a ``*.suffix``
entry matching strict subdomains). Every address the host resolves to must be
globally routable: loopback, private (RFC 1918, ULA), link-local (including
169.254.169.254, the cloud metadata service), multicast, unspecified,
shared (100.64/10), reserved and documentation ranges are refused, for IPv4,
IPv6, and IPv4 embedded in IPv6 (mapped, 6to4, Teredo). Such an address is
reachable only when it falls in a CIDR of ``http_allow_private``, or the host
name itself is listed there. If any resolved address is refused, the host is
refused: a mixed answer is a rebinding attempt or a misconfiguration.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

from tools.result import ToolFault

__all__ = ["EgressPolicy", "IPAddress", "address_problem"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def address_problem(ip: IPAddress) -> str | None:
    """Why ``ip`` must not be reached by default, or None if it is public."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None:
            inner = address_problem(embedded)
            if inner is not None:
                return f"{inner}, embedded in IPv6"
    checks = (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
    )
    for label, hit in checks:
        if hit:
            return label
    if not ip.is_global:
        return "not globally routable"
    return None


def _normalize(host: str) -> str:
    name = host.strip().rstrip(".").lower().removeprefix("[").removesuffix("]")
    try:
        return str(ipaddress.ip_address(name))  # one spelling per IP literal
    except ValueError:
        return name


class EgressPolicy:
    """The allowlists from `ToolsConfig`, parsed once."""

    def __init__(self, allowlist: Iterable[str], allow_private: Iterable[str]) -> None:
        self._hosts = frozenset(_normalize(h) for h in allowlist if h.strip())
        self._private_nets: list[IPNetwork] = []
        private_hosts: set[str] = set()
        for entry in allow_private:
            try:
                self._private_nets.append(ipaddress.ip_network(entry.strip(), strict=False))
            except ValueError:
                private_hosts.add(_normalize(entry))
        self._private_hosts = frozenset(private_hosts)

    def check_host(self, host: str) -> None:
        """Raise `ToolFault("denied")` unless ``host`` is on the allowlist."""
        name = _normalize(host)
        if name in self._hosts:
            return
        for entry in self._hosts:
            if entry.startswith("*.") and name.endswith(entry[1:]) and name != entry[2:]:
                return
        raise ToolFault("denied", f"host {name!r} is not in the http allowlist")

    def check_address(self, host: str, ip: IPAddress) -> None:
        """Raise `ToolFault("denied")` if ``host`` resolving to ``ip`` must not be reached."""
        problem = address_problem(ip)
        if problem is None:
            return
        if _normalize(host) in self._private_hosts:
            return
        if any(ip.version == net.version and ip in net for net in self._private_nets):
            return
        raise ToolFault(
            "denied",
            f"host {_normalize(host)!r} resolves to {ip} ({problem}), which is not allowed",
        )

    def vetted(self, host: str, port: int) -> list[IPAddress]:
        """The addresses to connect to for ``host``, every one of them allowed; ToolFault
        ``denied`` when the host or any address is refused, ``failed`` when it does not
        resolve. Blocking (DNS): run it off an event loop. Connect to these addresses, never
        to the name again, so what was checked is what is reached."""
        self.check_host(host)
        try:
            addresses: list[IPAddress] = [ipaddress.ip_address(host)]
        except ValueError:
            try:
                infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError:
                raise ToolFault("failed", f"host {host!r} could not be resolved") from None
            addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
        if not addresses:
            raise ToolFault("failed", f"host {host!r} has no addresses")
        for ip in addresses:
            self.check_address(host, ip)
        return addresses
