"""The SDK's asyncio client (azure.storage.queue.aio, on aiohttp) against the same server."""

from __future__ import annotations

import asyncio
from datetime import UTC

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.queue import TextBase64DecodePolicy, TextBase64EncodePolicy
from azure.storage.queue.aio import QueueClient, QueueServiceClient

from .conftest import connection_string, unique


def test_aio_client_does_every_operation(azure_server):
    async def scenario() -> None:
        name = unique()
        async with QueueServiceClient.from_connection_string(
            connection_string(azure_server), retry_total=0
        ) as service:
            await service.create_queue(name, metadata={"via": "aio"})
            listed = [
                q async for q in service.list_queues(name_starts_with=name, include_metadata=True)
            ]
            assert [(q.name, q.metadata) for q in listed] == [(name, {"via": "aio"})]
        async with QueueClient.from_connection_string(
            connection_string(azure_server),
            name,
            retry_total=0,
            message_encode_policy=TextBase64EncodePolicy(),
            message_decode_policy=TextBase64DecodePolicy(),
        ) as queue:
            await queue.set_queue_metadata({"via": "aio2"})
            assert (await queue.get_queue_properties()).metadata == {"via": "aio2"}
            await asyncio.gather(*(queue.send_message(f"m{i}") for i in range(5)))
            assert len(await queue.peek_messages(max_messages=5)) == 5
            got = [
                m async for m in queue.receive_messages(messages_per_page=5, visibility_timeout=60)
            ]
            assert sorted(m.content for m in got) == [f"m{i}" for i in range(5)]
            updated = await queue.update_message(got[0], content="changed", visibility_timeout=0)
            for message in got[1:]:
                await queue.delete_message(message)
            with pytest.raises(ResourceNotFoundError):
                await queue.delete_message(got[0])  # superseded by the update
            again = await queue.receive_message()
            assert (again.content, again.dequeue_count) == ("changed", 2)
            await queue.delete_message(again)
            assert updated.pop_receipt != again.pop_receipt
            await queue.clear_messages()
            await queue.delete_queue()
            with pytest.raises(ResourceNotFoundError):
                await queue.get_queue_properties()

    asyncio.run(scenario())


def test_aio_properties_acls_stats_errors_and_ttl(azure_server):
    """The operations of the account and ACLs, Azure's exact errors and messagettl=-1 through
    the asyncio client too."""
    from datetime import datetime, timedelta

    from azure.core.exceptions import HttpResponseError
    from azure.storage.queue import AccessPolicy, CorsRule, QueueSasPermissions

    async def scenario() -> None:
        name = unique()
        async with QueueServiceClient.from_connection_string(
            connection_string(azure_server), retry_total=0
        ) as service:
            await service.set_service_properties(
                cors=[CorsRule(["https://aio.example"], ["GET"], max_age_in_seconds=9)]
            )
            (rule,) = (await service.get_service_properties())["cors"]
            assert (rule.allowed_origins, rule.max_age_in_seconds) == ("https://aio.example", 9)
            await service.set_service_properties(cors=[])
            await service.create_queue(name)
        async with QueueClient.from_connection_string(
            connection_string(azure_server), name, retry_total=0
        ) as queue:
            expiry = datetime.now(UTC) + timedelta(hours=1)
            await queue.set_queue_access_policy(
                {"peekers": AccessPolicy(permission=QueueSasPermissions(read=True), expiry=expiry)}
            )
            assert set(await queue.get_queue_access_policy()) == {"peekers"}
            sent = await queue.send_message("forever", time_to_live=-1)
            assert sent.expires_on.year == 9999
            with pytest.raises(HttpResponseError) as caught:
                await queue.send_message("x" * (64 * 1024 + 1))
            assert caught.value.error_code == "RequestBodyTooLarge"
            with pytest.raises(HttpResponseError) as caught:
                await queue.send_message("x", visibility_timeout=60, time_to_live=60)
            assert caught.value.error_code == "InvalidQueryParameterValue"
            await queue.delete_queue()

    asyncio.run(scenario())
