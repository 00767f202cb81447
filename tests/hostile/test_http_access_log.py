"""The HTTP ports never hand their request lines to aiohttp's own access log: a query string can
carry a credential (an Azure SAS signature, a presigned SQS URL), and leaseq's access log names
the operation and status without it."""

from __future__ import annotations

from tests.hostile.http_raw import request, serving
from tests.support.process import free_port

SECRET = "sig-0123456789abcdef"


def test_a_query_string_never_reaches_the_log(tmp_path):
    azure, oci = free_port(), free_port()
    with serving(
        tmp_path,
        "--sqs-listen",
        "--azure-listen",
        f"127.0.0.1:{azure}",
        "--oci-listen",
        f"127.0.0.1:{oci}",
    ) as server:
        answers = [
            request(server.port, "GET", f"/?Action=ListQueues&Signature={SECRET}")[0],
            request(azure, "GET", f"/devstoreaccount1?comp=list&sig={SECRET}")[0],
            request(oci, "GET", f"/20210201/queues?sig={SECRET}")[0],
        ]
        assert all(status < 500 for status in answers), answers
        server.process.terminate()
        log = server.process.log_path.read_text()
    assert "leaseq.access" in log  # the requests were logged, by leaseq's own access log
    assert SECRET not in log
    assert '"aiohttp.access"' not in log
