"""An asyncio SDK (aiobotocore) running a consumer loop against a real `leaseq serve --sqs-listen`."""

from __future__ import annotations

import asyncio

from aiobotocore.session import get_session

from .conftest import REGION, unique

MESSAGES = 60


async def test_aiobotocore_consumer_loop_processes_every_message_once(sqs_server):
    session = get_session()
    async with session.create_client(
        "sqs",
        endpoint_url=sqs_server.endpoint,
        region_name=REGION,
        aws_access_key_id="test",
        aws_secret_access_key="test",
    ) as client:
        url = (await client.create_queue(QueueName=unique("aio")))["QueueUrl"]
        processed: list[str] = []
        done = asyncio.Event()

        async def consumer() -> None:
            while not done.is_set():
                reply = await client.receive_message(
                    QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=2, VisibilityTimeout=60
                )
                messages = reply.get("Messages", [])
                if not messages:
                    continue
                processed.extend(m["Body"] for m in messages)
                deleted = await client.delete_message_batch(
                    QueueUrl=url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                        for i, m in enumerate(messages)
                    ],
                )
                assert not deleted.get("Failed")
                if len(processed) >= MESSAGES:
                    done.set()

        consumers = [asyncio.create_task(consumer()) for _ in range(3)]
        # Consumers wait in long polls first; the producer's sends wake them.
        for start in range(0, MESSAGES, 10):
            result = await client.send_message_batch(
                QueueUrl=url,
                Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(start, start + 10)],
            )
            assert len(result["Successful"]) == 10
        await asyncio.wait_for(done.wait(), timeout=90)
        await asyncio.gather(*consumers)
        assert sorted(processed) == sorted(f"m{i}" for i in range(MESSAGES))
        attrs = (await client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"]))[
            "Attributes"
        ]
        assert (
            attrs["ApproximateNumberOfMessages"]
            == attrs["ApproximateNumberOfMessagesNotVisible"]
            == "0"
        )
