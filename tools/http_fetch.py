"""http.fetch: GET/POST to allowlisted hosts, with SSRF guards and caps.

Each hop (the first request and every redirect, followed manually up to
``http_max_redirects``) is checked by `EgressPolicy`: the host against the
allowlist, then every address DNS returns. The connection then goes to the
vetted address through a pinned resolver, so there is no second lookup and
no DNS-rebinding window. The response body is read until the size cap and
the rest is dropped (``truncated``). The whole call runs on a private event
loop inside `run`; a watcher polls the cancel event and the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, Literal

import aiohttp
import msgspec
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from tools.config import ToolsConfig
from tools.context import ExecutionContext
from tools.egress import EgressPolicy, IPAddress
from tools.handles import HandleValue, names_of, resolve_all
from tools.result import Output, ToolFault, decode_text
from tools.runtime import POLL_S, ToolRuntime, checkpoint
from tools.spec import ToolSpec
from tools.subjects import parse_url_prefix, url_subject

__all__ = ["HttpFetchArgs", "HttpRuntime"]

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_FORBIDDEN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
_HIDDEN_RESPONSE_HEADERS = frozenset({"set-cookie"})


class HttpFetchArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    url: Annotated[str, msgspec.Meta(description="http:// or https:// URL.")]
    method: Literal["GET", "POST"] = "GET"
    body: Annotated[str, msgspec.Meta(description="Request body (POST only).")] | None = None
    headers: Annotated[
        dict[str, HandleValue],
        msgspec.Meta(
            description='Request headers; a value may name a vault secret: {"vault": "NAME"} '
            'or text with ${vault:NAME} in it ("Bearer ${vault:NAME}").'
        ),
    ] = msgspec.field(default_factory=dict)

    def handles(self) -> list[str]:
        """The vault secrets the headers name (tools/handles.py)."""
        return names_of(self.headers.values())

    def subject(self) -> tuple[str, ...]:
        """The grant subject: method, scheme, host, port and path (tools/subjects.py)."""
        return url_subject(self.method, self.url)

    @classmethod
    def parse_subject(cls, text: str) -> tuple[str, ...]:
        return parse_url_prefix(text)

    @classmethod
    def subject_kind(cls) -> str:
        return "method and URL"


class _PinnedResolver(AbstractResolver):
    """Answers only with addresses `EgressPolicy` has already vetted."""

    def __init__(self) -> None:
        self.pins: dict[str, IPAddress] = {}

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        ip = self.pins.get(host)
        if ip is None:  # every hop pins before connecting; anything else is a bug
            raise OSError(f"host {host!r} was not vetted")
        fam = socket.AF_INET if ip.version == 4 else socket.AF_INET6
        return [
            ResolveResult(
                hostname=host,
                host=str(ip),
                port=port,
                family=fam,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
        ]

    async def close(self) -> None:
        return None


def _reads_only(args: HttpFetchArgs) -> bool:
    """A GET changes nothing on the server it asks (RFC 9110's safe method); a POST may."""
    return args.method == "GET"


class HttpRuntime(ToolRuntime):
    """The http.fetch tool."""

    def __init__(self, config: ToolsConfig) -> None:
        self._config = config
        self._policy = EgressPolicy(config.http_allowlist, config.http_allow_private)

    def specs(self) -> Sequence[ToolSpec]:
        cfg = self._config
        return (
            ToolSpec(
                name="http.fetch",
                description="Fetch an http(s) URL on an allowlisted host (GET or POST). "
                f"Bodies over {cfg.http_response_cap_bytes} bytes are truncated.",
                args_type=HttpFetchArgs,
                capabilities=frozenset({"net.egress"}),
                risk="high",
                default_posture="ask_each_time",
                timeout_s=cfg.http_timeout_s,
                output_cap_bytes=max(
                    cfg.default_output_cap_bytes, cfg.http_response_cap_bytes * 2 + 16 * 1024
                ),
                runtime="http",
                read_only=_reads_only,
            ),
        )

    def run(self, name: str, args: msgspec.Struct, ctx: ExecutionContext) -> Output:
        if not isinstance(args, HttpFetchArgs):
            raise ValueError(f"http runtime has no tool {name!r}")
        self._check(args)
        headers = resolve_all(args.headers, ctx.secrets, "headers")
        _check_headers(headers)  # a secret's value must be a valid header value too
        return asyncio.run(_watched(self._fetch(args, headers, ctx), ctx))

    def precheck(self, name: str, args: msgspec.Struct) -> str | None:
        """The checks of `_check` (no DNS: addresses are vetted when the call runs), so no
        human is asked about a URL the allowlist refuses."""
        if not isinstance(args, HttpFetchArgs):
            return None
        try:
            self._check(args)
        except ToolFault as fault:
            return str(fault)
        return None

    def _check(self, args: HttpFetchArgs) -> None:
        """What can be refused before any connection: the URL and its host on the allowlist,
        the body and the headers."""
        self._policy.check_host(_parse(args.url).host or "")
        if args.body is not None and args.method != "POST":
            raise ToolFault("invalid", "body: only allowed with method POST")
        body_cap = self._config.http_request_body_cap_bytes
        if args.body is not None and len(_utf8(args.body, "body")) > body_cap:
            raise ToolFault("limit", f"body: exceeds the request body cap of {body_cap} bytes")
        _check_headers({k: v if isinstance(v, str) else "" for k, v in args.headers.items()})

    async def _fetch(
        self, args: HttpFetchArgs, headers: dict[str, str], ctx: ExecutionContext
    ) -> Output:
        # DNS runs on a private thread that is abandoned, not awaited, on cancel:
        # asyncio.run would otherwise wait for a hung lookup before returning.
        dns = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reel-http-dns")
        try:
            return await self._fetch_with(args, headers, ctx, dns)
        finally:
            dns.shutdown(wait=False, cancel_futures=True)

    async def _fetch_with(
        self,
        args: HttpFetchArgs,
        headers: dict[str, str],
        ctx: ExecutionContext,
        dns: ThreadPoolExecutor,
    ) -> Output:
        resolver = _PinnedResolver()
        connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False, force_close=True)
        timeout = aiohttp.ClientTimeout(total=max(ctx.remaining(), 0.001))
        async with aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
        ) as session:
            url = _parse(args.url)
            method: str = args.method
            body = args.body
            for hop in range(self._config.http_max_redirects + 1):
                host = await self._vet(url, resolver, dns)
                try:
                    async with session.request(
                        method, url, data=body, headers=headers, allow_redirects=False
                    ) as resp:
                        location = resp.headers.get("Location")
                        if resp.status in _REDIRECTS and location:
                            nxt = _redirect(url, location)
                            if resp.status == 303 or (
                                resp.status in (301, 302) and method == "POST"
                            ):
                                method, body = "GET", None
                            if (nxt.host, nxt.port, nxt.scheme) != (url.host, url.port, url.scheme):
                                headers = {}  # never forward caller headers to another origin
                            url = _parse(str(nxt))
                            continue
                        return await self._read(resp, url, hop)
                except aiohttp.ClientError as exc:
                    raise ToolFault(
                        "failed", f"request to {host!r} failed: {_describe(exc)}"
                    ) from None
                except TimeoutError:
                    raise ToolFault("timeout", "deadline exceeded") from None
            raise ToolFault("limit", f"more than {self._config.http_max_redirects} redirects")

    async def _vet(self, url: URL, resolver: _PinnedResolver, dns: ThreadPoolExecutor) -> str:
        host = url.host or ""
        port = url.port or (443 if url.scheme == "https" else 80)
        loop = asyncio.get_running_loop()
        addresses = await loop.run_in_executor(dns, self._policy.vetted, host, port)
        resolver.pins[host] = addresses[0]
        return host

    async def _read(self, resp: aiohttp.ClientResponse, url: URL, redirects: int) -> Output:
        cap = self._config.http_response_cap_bytes
        buf = bytearray()
        while len(buf) <= cap:
            chunk = await resp.content.read(min(64 * 1024, cap + 1 - len(buf)))
            if not chunk:
                break
            buf += chunk
        truncated = len(buf) > cap
        text, lossy = decode_text(bytes(buf[:cap]), truncated=truncated)
        headers: dict[str, Any] = {
            k: v for k, v in resp.headers.items() if k.lower() not in _HIDDEN_RESPONSE_HEADERS
        }
        body = {
            "url": str(url.with_query(None).with_fragment(None)),
            "status": resp.status,
            "headers": headers,
            "body": text,
            "truncated": truncated,
            "lossy": lossy,
            "redirects": redirects,
        }
        out_text = msgspec.json.encode(body).decode()
        if resp.status >= 400:
            raise ToolFault(
                "failed", f"HTTP {resp.status}", output=out_text, truncated=truncated, lossy=lossy
            )
        return Output(text=out_text, truncated=truncated, lossy=lossy)


def _check_headers(headers: dict[str, str]) -> None:
    """Refuse, before any connection, a header the caller may not set or HTTP cannot carry: a
    name that is not an RFC 9110 token, a value with a control character (CR, LF, NUL...) or
    a character outside ASCII. The error names the header, never echoes its value."""
    for name, value in headers.items():
        bad = _BAD_NAME_CHAR.search(name)
        if bad is not None or not name:
            shown = name[: bad.start()] if bad is not None else ""
            problem = _describe_char(bad.group()) if bad is not None else "it is empty"
            raise ToolFault(
                "invalid",
                f"headers.{shown}{'…' if bad is not None else ''}: not a valid HTTP header name "
                f"({problem})",
            )
        if name.lower() in _FORBIDDEN_HEADERS:
            raise ToolFault("invalid", f"headers.{name}: may not be set by the caller")
        bad = _BAD_VALUE_CHAR.search(value)
        if bad is not None:
            raise ToolFault(
                "invalid",
                f"headers.{name}: the value has {_describe_char(bad.group())} at offset "
                f"{bad.start()}, which an HTTP header cannot carry",
            )


_BAD_NAME_CHAR = re.compile(r"[^!#$%&'*+\-.^_`|~0-9A-Za-z]")
"""Anything outside RFC 9110's ``token``."""
_BAD_VALUE_CHAR = re.compile(r"[^\t\x20-\x7e]")
"""Anything but visible ASCII, space and tab (CR, LF, NUL, DEL, other controls, non-ASCII)."""
_CHAR_NAMES = {"\r": "a carriage return (CR)", "\n": "a line feed (LF)", "\x00": "a NUL byte"}


def _describe_char(char: str) -> str:
    if char in _CHAR_NAMES:
        return _CHAR_NAMES[char]
    code = ord(char)
    if code < 0x20 or code == 0x7F:
        return f"the control character U+{code:04X}"
    if code > 0x7F:
        return f"the non-ASCII character U+{code:04X}"
    return f"the character {char!r}"


def _utf8(text: str, field: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate: not text any server can receive
        raise ToolFault("invalid", f"{field}: not valid Unicode text") from None


def _redirect(url: URL, location: str) -> URL:
    try:
        return url.join(URL(location))
    except (ValueError, TypeError):
        raise ToolFault("failed", "the server redirected to a Location that is not a URL") from None


def _parse(raw: str) -> URL:
    try:
        url = URL(raw)
    except (ValueError, TypeError):
        raise ToolFault("invalid", "url: not a valid URL") from None
    if url.scheme not in ("http", "https"):
        raise ToolFault("invalid", f"url: scheme {url.scheme!r} is not http or https")
    if url.user is not None or url.password is not None:
        raise ToolFault("invalid", "url: credentials in the URL are not allowed")
    if not url.host:
        raise ToolFault("invalid", "url: has no host")
    return url


def _describe(exc: aiohttp.ClientError) -> str:
    # Only the class and the OS reason: aiohttp's own messages may embed the
    # full URL, whose query string can carry tokens.
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"{type(exc).__name__} ({exc.os_error.strerror or exc.os_error})"
    return type(exc).__name__


async def _watched(work: Any, ctx: ExecutionContext) -> Output:
    """Run ``work`` until done, cancelling it when ctx is cancelled or expires."""
    task: asyncio.Task[Output] = asyncio.ensure_future(work)
    while not task.done():
        await asyncio.wait({task}, timeout=POLL_S)
        if not task.done() and (ctx.cancelled() or ctx.expired()):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            checkpoint(ctx)
    return task.result()
