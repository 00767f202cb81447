"""OCI work requests: what an admin write (CreateQueue, UpdateQueue, DeleteQueue, PurgeQueue,
ChangeQueueCompartment) answers with its opc-work-request-id, so the SDK's
`*_and_wait_for_state` helpers and the CLI's --wait-for-state can poll it.

leaseq does these writes before it answers, so each work request is SUCCEEDED when made (a write
that fails answers its error instead, and makes no work request). They are kept in the server's
memory, the newest MAX_KEPT (a work request is looked at in the seconds after its write), and
each principal sees its own."""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from .ids import WORK_REQUEST_OCID_PREFIX, rfc3339

MAX_KEPT = 10_000


@dataclass(frozen=True)
class WorkRequest:
    id: str
    operation_type: str  # CREATE_QUEUE, UPDATE_QUEUE, DELETE_QUEUE, PURGE_QUEUE, ...
    action_type: str  # CREATED, UPDATED, DELETED
    queue_ocid: str
    compartment_id: str
    owner: str  # the principal's name ("" without a policy)
    at: float

    def summary(self) -> dict[str, Any]:
        when = rfc3339(self.at)
        return {
            "id": self.id,
            "operationType": self.operation_type,
            "status": "SUCCEEDED",
            "compartmentId": self.compartment_id,
            "resources": [
                {
                    "entityType": "queue",
                    "actionType": self.action_type,
                    "identifier": self.queue_ocid,
                    "entityUri": f"/20210201/queues/{self.queue_ocid}",
                }
            ],
            "percentComplete": 100.0,
            "timeAccepted": when,
            "timeStarted": when,
            "timeFinished": when,
        }


class WorkRequests:
    def __init__(self) -> None:
        self._kept: OrderedDict[str, WorkRequest] = OrderedDict()

    def add(
        self,
        operation_type: str,
        action_type: str,
        queue_ocid: str,
        compartment_id: str,
        owner: str,
        at: float,
    ) -> WorkRequest:
        request = WorkRequest(
            WORK_REQUEST_OCID_PREFIX + uuid.uuid4().hex,
            operation_type,
            action_type,
            queue_ocid,
            compartment_id,
            owner,
            at,
        )
        self._kept[request.id] = request
        while len(self._kept) > MAX_KEPT:
            self._kept.popitem(last=False)
        return request

    def get(self, work_request_id: str, owner: str | None) -> WorkRequest | None:
        found = self._kept.get(work_request_id)
        return found if found is not None and owner in (None, found.owner) else None

    def newest(self, owner: str | None) -> list[WorkRequest]:
        return [w for w in reversed(self._kept.values()) if owner in (None, w.owner)]
