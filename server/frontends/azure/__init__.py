"""The Azure Queue Storage dialect: `leaseq serve --azure-listen HOST:PORT` (README "Use it from
Azure code"), path-style URLs `/<account>/<queue>[/messages[/<messageid>]]` as Azurite serves them.

    app.py          the aiohttp server: request ids, headers, auth, errors, access log, metrics
    request_checks.py header values that are text, the body against its Content-MD5
    routing.py      method + path + comp/restype -> the operation, its queue and message id
    operations.py   each queue and message operation as calls of core.QueueCore
    service_operations.py  service properties and stats, queue ACLs
    sas.py          shared access signatures (account and queue SAS, stored access policies)
    acl.py          queue ACLs: the stored access policies, kept with the queue
    properties.py   service properties (kept server-wide) and CORS from their rules
    parameters.py   query parameters: integers in Azure's (and leaseq's) ranges, names
    pop_receipts.py Azure pop receipts <-> leaseq receipts (bound to the message id by a MAC)
    metadata.py     x-ms-meta-* headers and the queues' metadata
    xml_bodies.py   the XML request and response bodies of the REST reference
    shared_key.py   SharedKey and SharedKeyLite verification, the development account
    times.py        RFC 1123 times
    errors.py       Azure error codes, HTTP statuses and the <Error> body
"""
