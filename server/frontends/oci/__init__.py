"""The OCI Queue dialect: `leaseq serve --oci-listen HOST:PORT` (README "Use it from OCI code"),
the REST API 20210201 as the `oci` SDK's QueueClient and QueueAdminClient and the OCI CLI call it.

    app.py            the aiohttp server: request ids, signature, body, errors, access log, metrics
    routing.py        method + path -> the operation and its ids
    messages.py       PutMessages, GetMessages, UpdateMessage(s), DeleteMessage(s)
    queues.py         the admin API, GetStats, ListChannels, the work requests' answers
    work_requests.py  the work requests an admin write answers with
    signature.py      OCI request signatures (draft-cavage, rsa-sha256) against the policy's oci_keys
    ids.py            OCIDs, int64 message ids, receipts, RFC 3339 times
    inputs.py         query parameters and JSON fields in OCI's ranges
    context.py        an operation's Request and Answer
    errors.py         OCI error codes, HTTP statuses and the {"code", "message"} body
"""
