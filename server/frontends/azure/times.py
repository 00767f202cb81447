"""Times as Azure's REST API writes them: RFC 1123 ("Fri, 09 Oct 2009 21:04:30 GMT"), in every
XML body and header (InsertionTime, TimeNextVisible, x-ms-time-next-visible, Date)."""

from __future__ import annotations

import email.utils


def rfc1123(seconds: float) -> str:
    return email.utils.formatdate(seconds, usegmt=True)


def parse_rfc1123(text: str) -> float | None:
    """Seconds since the epoch, or None when text is not an RFC 1123 date with a time zone."""
    try:
        parsed = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.timestamp()
