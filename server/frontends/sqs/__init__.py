"""The Amazon SQS dialect: `leaseq serve --sqs-listen HOST:PORT` (see docs/sqs.md).

app.py              the aiohttp server: routes a request to its protocol, auth, the action
protocol_json.py    AWS JSON 1.0 (X-Amz-Target: AmazonSQS.<Action>), what current SDKs send
protocol_query.py   the query protocol (form-encoded Action=..., XML answers), older SDKs
actions.py          the actions by name
params.py           an action's Context and the reading of its parameters
queues.py           the actions on queues: attributes, tags, permissions, purge, dead letters
messages.py         the actions on messages: send, receive, delete, visibility
move_tasks.py       asynchronous message move tasks (StartMessageMoveTask, ...)
identity.py         sts:GetCallerIdentity on the same endpoint
queue_attributes.py SQS queue attributes <-> QueueConfig and stored attributes, ARNs, URLs
policies.py         Policy (AddPermission / RemovePermission) and RedriveAllowPolicy
message_attributes.py  typed SQS message attributes <-> leaseq's string attributes
md5.py              MD5OfMessageBody / MD5OfMessageAttributes
sigv4.py            AWS Signature Version 4 verification
errors.py           SQS error codes and HTTP statuses
"""
