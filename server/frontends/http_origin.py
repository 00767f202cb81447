"""Who may send a request to an HTTP port: the Host it names and the site a browser sent it from.

- Cross-site requests (CSRF): a browser says where a request comes from. `Sec-Fetch-Site`
  (every current browser) other than "same-origin" or "none" (typed or bookmarked), or without
  it an `Origin` whose host:port is not the request's Host, is a request another site's page
  made: refused, on every port and with or without an auth policy (the algorithm of Go's
  net/http CrossOriginProtection). A request with neither header is not from a browser (boto3,
  aws-cli, the Azure SDK, curl) and passes. The SQS and Azure ports have no safe methods (an
  SQS GET may carry any action; an Azure GET of messages dequeues them); the console's page and
  its GETs may be opened from a link on another site, its changes may not.
- DNS rebinding: without an auth policy anyone who reaches the port may do everything, and a
  page whose name an attacker points at 127.0.0.1 is same-origin with itself. So without a
  policy only these Host names are answered: localhost and *.localhost, IP literals (an address
  is never the rebound name of another site), and the names of --http-allowed-hosts ("*": any).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection

from aiohttp import web

from .http_refusal import CROSS_SITE, HOST_NOT_ALLOWED, HttpRefusal

_SAME_SITE_VALUES = frozenset({"same-origin", "none"})
NO_SAFE_METHODS: frozenset[str] = frozenset()
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def host_name(host: str) -> str:
    """The name of a Host header, without its port or brackets, lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    name, colon, port = host.rpartition(":")
    if colon and port.isdigit():
        host = name
    return host.rstrip(".")


def host_allowed(host: str, allowed: Collection[str]) -> bool:
    name = host_name(host)
    if name == "localhost" or name.endswith(".localhost") or "*" in allowed or name in allowed:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def is_cross_site(request: web.Request, safe_methods: Collection[str]) -> bool:
    if request.method in safe_methods:
        return False
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site.strip().lower() not in _SAME_SITE_VALUES
    origin = request.headers.get("Origin")
    if origin is None:
        return False
    host = request.headers.get("Host", "")
    return origin.partition("://")[2].lower() != host.lower() or not host


def check(
    request: web.Request,
    *,
    open_access: bool,
    allowed_hosts: Collection[str],
    safe_methods: Collection[str] = NO_SAFE_METHODS,
) -> None:
    """HttpRefusal for a cross-site request, or (open_access: no auth policy) for a Host name
    this server does not answer to."""
    if is_cross_site(request, safe_methods):
        raise HttpRefusal(
            CROSS_SITE,
            "Cross-site requests are refused: this request was sent by a page of another site.",
        )
    host = request.headers.get("Host")
    if open_access and host is not None and not host_allowed(host, allowed_hosts):
        raise HttpRefusal(
            HOST_NOT_ALLOWED,
            f"This server does not answer to the host name {host_name(host)[:100]!r} "
            "(without an auth policy: loopback names, IP addresses and --http-allowed-hosts).",
        )
