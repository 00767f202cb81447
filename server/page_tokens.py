"""Page tokens of ListQueues and PeekMessages: sealed, so a caller learns nothing from one and
cannot make one.

A token carries the position where the next page starts and the request parameters that shaped
the listing (AIP-158: a page of another filter continued from this position would silently skip
or repeat items, so they must match). The position may name something the caller may not see:
ListQueues continues after the last queue of the store's page, which the authorization filter
may have dropped from the response (a principal allowed only `a-*` listing every queue). So the
token is encrypted, and authenticated so that a forged, altered or foreign token is refused
(INVALID_ARGUMENT) before anything in it is read.

Sealing (stdlib only, like the receipts): keyed BLAKE2b, a PRF, in counter mode as the stream
cipher, then keyed BLAKE2b over everything as the MAC (encrypt-then-MAC), with two keys derived
from the store's secret (`Store.token_key`): every replica of one store and a restarted server
accept the tokens it made.

Layout before base64url (unpadded): version (1) | nonce (16) | ciphertext | mac (16). The
plaintext is compact JSON. Tokens are short (the longest, a peek token with a 65-character
channel filter, is under 300 characters): anything over MAX_TOKEN_CHARS is refused unread.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
import secrets
from typing import Any, cast

from . import domain
from .errors import InvalidArgument

_VERSION = b"\x01"
_NONCE_BYTES = 16
_MAC_BYTES = 16
_BLOCK = 64  # BLAKE2b's largest digest: one keystream block
MAX_TOKEN_CHARS = 1024

_LIST_KIND = "lq"
_PEEK_KIND = "pk"
_MESSAGE_KIND = "mh"

_MALFORMED = "malformed page token: pass a next_page_token back unchanged"


def _derive(secret: bytes, purpose: bytes) -> bytes:
    return hashlib.blake2b(purpose, key=secret[:64], digest_size=32).digest()


class PageTokens:
    """Seals and opens the page tokens of one store (its secret: `Store.token_key()`)."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("page token secret too short")
        self._cipher_key = _derive(secret, b"leaseq page token cipher")
        self._mac_key = _derive(secret, b"leaseq page token mac")

    # --- sealing ----------------------------------------------------------------------------

    def _keystream(self, nonce: bytes, length: int) -> bytes:
        blocks = (
            hashlib.blake2b(
                nonce + counter.to_bytes(8, "big"), key=self._cipher_key, digest_size=_BLOCK
            ).digest()
            for counter in range((length + _BLOCK - 1) // _BLOCK)
        )
        return b"".join(blocks)[:length]

    def _mac(self, data: bytes) -> bytes:
        return hashlib.blake2b(data, key=self._mac_key, digest_size=_MAC_BYTES).digest()

    def _xor(self, nonce: bytes, data: bytes) -> bytes:
        stream = self._keystream(nonce, len(data))
        return (int.from_bytes(data, "big") ^ int.from_bytes(stream, "big")).to_bytes(
            len(data), "big"
        )

    def _seal(self, payload: dict[str, Any]) -> str:
        plain = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
        nonce = secrets.token_bytes(_NONCE_BYTES)
        sealed = _VERSION + nonce + self._xor(nonce, plain)
        raw = sealed + self._mac(sealed)
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    def _open(self, token: str, kind: str) -> dict[str, Any]:
        """The payload of a token this store sealed for kind; InvalidArgument for anything else
        (checked before any of it is parsed)."""
        malformed = InvalidArgument("page_token", _MALFORMED)
        if len(token) > MAX_TOKEN_CHARS or not token.isascii():
            raise malformed
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError):
            raise malformed from None
        # Only the exact string sealed is a token: base64 lets other strings decode to the
        # same bytes (spare bits, padding), which would still verify.
        if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != token:
            raise malformed
        if len(raw) < 1 + _NONCE_BYTES + _MAC_BYTES or raw[:1] != _VERSION:
            raise malformed
        sealed, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
        if not hmac.compare_digest(mac, self._mac(sealed)):
            raise malformed
        nonce, cipher = sealed[1 : 1 + _NONCE_BYTES], sealed[1 + _NONCE_BYTES :]
        try:
            payload = json.loads(self._xor(nonce, cipher))
        except ValueError:  # only a bug of ours could get here: the MAC held
            raise malformed from None
        if not isinstance(payload, dict) or payload.get("k") != kind:
            raise malformed  # a token of the other RPC
        return payload

    # --- ListQueues -------------------------------------------------------------------------

    def encode_list(self, prefix: str, after: str) -> str:
        return self._seal({"k": _LIST_KIND, "p": prefix, "a": after})

    def decode_list(self, token: str, prefix: str) -> str:
        """The name after which the page starts. InvalidArgument when the token is not one of
        ours or the prefix differs from the request that produced it."""
        payload = self._open(token, _LIST_KIND)
        after = payload.get("a")
        if not isinstance(after, str) or not isinstance(payload.get("p"), str):
            raise InvalidArgument("page_token", _MALFORMED)
        if payload["p"] != prefix:
            raise InvalidArgument("page_token", "page token was issued for another prefix")
        return after

    # --- PeekMessages -----------------------------------------------------------------------

    def encode_peek(
        self,
        queue: str,
        cursor: domain.PeekCursor,
        channel_filter: str,
        include_leased: bool,
        include_delayed: bool,
    ) -> str:
        visible_at, key = cursor
        # repr() of a float round-trips exactly through JSON, so the cursor is not rounded.
        return self._seal(
            {
                "k": _PEEK_KIND,
                "q": queue,
                "v": visible_at,
                "i": key,
                "f": [channel_filter, include_leased, include_delayed],
            }
        )

    def decode_peek(
        self,
        token: str,
        queue: str,
        channel_filter: str,
        include_leased: bool,
        include_delayed: bool,
    ) -> domain.PeekCursor:
        payload = self._open(token, _PEEK_KIND)
        visible_at, key = payload.get("v"), payload.get("i")
        if (
            isinstance(visible_at, bool)
            or not isinstance(visible_at, (int, float))
            or not math.isfinite(visible_at)
            or isinstance(key, bool)
            or not isinstance(key, int)
            or not 0 <= key < 2**63
        ):
            raise InvalidArgument("page_token", _MALFORMED)
        if payload.get("q") != queue:
            raise InvalidArgument("page_token", "page token was issued for another queue")
        if payload.get("f") != [channel_filter, include_leased, include_delayed]:
            raise InvalidArgument(
                "page_token",
                "page token was issued for another channel_filter / include_leased / include_delayed",
            )
        return float(visible_at), key

    # --- message handles (the web console) --------------------------------------------------

    def encode_message(self, queue: str, message: domain.PeekedMessage) -> str:
        """A peeked message's handle for the web console: its position (visible_at, key) and
        delivery (receipt_seq), sealed like a page token so that the store's internal key stays
        hidden and a handle cannot be made up (core.QueueCore.find_message, admin_release)."""
        return self._seal(
            {
                "k": _MESSAGE_KIND,
                "q": queue,
                "v": message.visible_at,
                "i": message.key,
                "s": message.receipt_seq,
            }
        )

    def decode_message(self, token: str, queue: str) -> tuple[float, int, int]:
        """(visible_at, key, receipt_seq) of a handle made for this queue; InvalidArgument
        ("message") for anything else."""
        try:
            payload = self._open(token, _MESSAGE_KIND)
        except InvalidArgument:
            raise InvalidArgument("message", "malformed message handle") from None
        visible_at, key, seq = payload.get("v"), payload.get("i"), payload.get("s")
        if (
            isinstance(visible_at, bool)
            or not isinstance(visible_at, (int, float))
            or not math.isfinite(visible_at)
            or any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in (key, seq))
            or payload.get("q") != queue
        ):
            raise InvalidArgument("message", "malformed message handle")
        return float(visible_at), cast(int, key), cast(int, seq)  # ints: checked above
