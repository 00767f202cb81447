"""The Amazon SQS dialect: `leaseq serve --sqs-listen HOST:PORT` (see README "Use it from SQS code").

app.py              the aiohttp server: routes a request to its protocol, auth, the action
protocol_json.py    AWS JSON 1.0 (X-Amz-Target: AmazonSQS.<Action>), what current SDKs send
protocol_query.py   the query protocol (form-encoded Action=..., XML answers), older SDKs
actions.py          each SQS action as calls of core.QueueCore
queue_attributes.py SQS queue attributes <-> QueueConfig (RedrivePolicy, ranges, ARNs, URLs)
message_attributes.py  typed SQS message attributes <-> leaseq's string attributes
md5.py              MD5OfMessageBody / MD5OfMessageAttributes
sigv4.py            AWS Signature Version 4 verification
errors.py           SQS error codes and HTTP statuses
"""
