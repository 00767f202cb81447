"""The SQS actions by name: queues.py (queues, attributes, tags, permissions), messages.py
(sends, receives, deletes, visibility), move_tasks.py (message move tasks) and identity.py
(sts:GetCallerIdentity).

An action takes the request's parameters in the JSON protocol's shape (protocol_query converts
form parameters to it) and returns the result in that shape; errors are `SqsError`s, or domain
errors that app.py maps with `errors.from_domain`.
"""

from __future__ import annotations

from . import identity, messages, move_tasks, queues
from .params import Action, Context

__all__ = ["ACTIONS", "Action", "Context"]

ACTIONS: dict[str, Action] = {
    "CreateQueue": queues.create_queue,
    "GetQueueUrl": queues.get_queue_url,
    "ListQueues": queues.list_queues,
    "DeleteQueue": queues.delete_queue,
    "PurgeQueue": queues.purge_queue,
    "GetQueueAttributes": queues.get_queue_attributes,
    "SetQueueAttributes": queues.set_queue_attributes,
    "ListDeadLetterSourceQueues": queues.list_dead_letter_source_queues,
    "TagQueue": queues.tag_queue,
    "UntagQueue": queues.untag_queue,
    "ListQueueTags": queues.list_queue_tags,
    "AddPermission": queues.add_permission,
    "RemovePermission": queues.remove_permission,
    "StartMessageMoveTask": move_tasks.start_message_move_task,
    "ListMessageMoveTasks": move_tasks.list_message_move_tasks,
    "CancelMessageMoveTask": move_tasks.cancel_message_move_task,
    "SendMessage": messages.send_message,
    "SendMessageBatch": messages.send_message_batch,
    "ReceiveMessage": messages.receive_message,
    "DeleteMessage": messages.delete_message,
    "DeleteMessageBatch": messages.delete_message_batch,
    "ChangeMessageVisibility": messages.change_message_visibility,
    "ChangeMessageVisibilityBatch": messages.change_message_visibility_batch,
    identity.ACTION: identity.get_caller_identity,
}
