"""Header floods: the request headers of one connection are bounded in size, count and time
(server/frontends/http_limits.py), so 100 connections that send unfinished 8 KB header lines
cannot make the server hold hundreds of MiB."""

from __future__ import annotations

from tests.hostile.http_raw import connect, head, read_answer, read_until_closed, request, serving


def test_header_bytes_count_and_lines_are_bounded(tmp_path):
    with serving(tmp_path, "--sqs-listen") as server:
        # 80 unfinished lines of 1,000 bytes (under aiohttp's 8 KiB per line and 128 lines):
        # over the 64 KiB of headers, answered 431 and closed without waiting for the rest.
        with connect(server.port) as sock:
            sock.sendall(b"GET /?Action=ListQueues HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            for i in range(80):
                try:
                    sock.sendall(f"X-Flood-{i}: {'a' * 985}\r\n".encode())
                except (BrokenPipeError, ConnectionResetError):
                    break
            received, _ = read_until_closed(sock)
        assert received.startswith(b"HTTP/1.1 431"), received[:200]
        # 110 short headers: over the count.
        flood = {f"X-Many-{i}": "1" for i in range(110)}
        status, _, _ = request(server.port, "GET", "/?Action=ListQueues", flood)
        assert status == 400
        # What SDKs send passes.
        status, _, _ = request(
            server.port, "GET", "/?Action=ListQueues", {f"X-Few-{i}": "b" * 200 for i in range(40)}
        )
        assert status == 200
        # A header line over 8 KiB.
        with connect(server.port) as sock:
            sock.sendall(head("GET", "/?Action=ListQueues", server.port, {"X-Long": "a" * 9000}))
            status, _, _ = read_answer(sock)
        assert status in (400, 431)
