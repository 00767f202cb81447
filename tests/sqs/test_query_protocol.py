"""The query protocol (form-encoded Action=..., XML answers) of older SDKs, spoken over plain
HTTP as AWS's query API reference writes the requests."""

from __future__ import annotations

import base64
import hashlib
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

import pytest

from .conftest import unique
from .test_messages import expected_attributes_md5

NS = {"sqs": "http://queue.amazonaws.com/doc/2012-11-05/"}


def call(
    endpoint: str, params: dict[str, str], path: str = "/", method: str = "POST"
) -> tuple[int, ET.Element]:
    data = urllib.parse.urlencode(params)
    if method == "GET":
        request = urllib.request.Request(f"{endpoint}{path}?{data}", method="GET")
    else:
        request = urllib.request.Request(
            f"{endpoint}{path}",
            data=data.encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            method="POST",
        )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, ET.fromstring(response.read())
    except urllib.error.HTTPError as error:
        return error.code, ET.fromstring(error.read())


def text(root: ET.Element, path: str) -> str:
    found = root.find(path, NS)
    assert found is not None, (path, ET.tostring(root))
    return found.text or ""


def test_queue_and_message_actions_over_the_query_protocol(sqs_server):
    endpoint = sqs_server.endpoint
    name = unique("query")
    status, root = call(
        endpoint,
        {
            "Action": "CreateQueue",
            "QueueName": name,
            "Attribute.1.Name": "VisibilityTimeout",
            "Attribute.1.Value": "40",
            "Version": "2012-11-05",
        },
    )
    assert status == 200
    assert root.tag == f"{{{NS['sqs']}}}CreateQueueResponse"
    url = text(root, "sqs:CreateQueueResult/sqs:QueueUrl")
    assert url == f"{endpoint}/000000000000/{name}"
    assert text(root, "sqs:ResponseMetadata/sqs:RequestId")

    status, root = call(
        endpoint, {"Action": "GetQueueAttributes", "QueueUrl": url, "AttributeName.1": "All"}
    )
    attributes = {
        text(a, "sqs:Name"): text(a, "sqs:Value")
        for a in root.findall("sqs:GetQueueAttributesResult/sqs:Attribute", NS)
    }
    assert attributes["VisibilityTimeout"] == "40"
    assert attributes["QueueArn"].endswith(f":{name}")

    # SendMessage addressed by the request path instead of a QueueUrl parameter.
    blob = b"\x00\xff binary"
    status, root = call(
        endpoint,
        {
            "Action": "SendMessage",
            "MessageBody": "via query <&>",
            "MessageAttribute.1.Name": "n",
            "MessageAttribute.1.Value.DataType": "Number",
            "MessageAttribute.1.Value.StringValue": "42",
            "MessageAttribute.2.Name": "b",
            "MessageAttribute.2.Value.DataType": "Binary",
            "MessageAttribute.2.Value.BinaryValue": base64.b64encode(blob).decode(),
        },
        path=f"/000000000000/{name}",
    )
    assert status == 200
    sent = {
        "n": {"DataType": "Number", "StringValue": "42"},
        "b": {"DataType": "Binary", "BinaryValue": blob},
    }
    assert (
        text(root, "sqs:SendMessageResult/sqs:MD5OfMessageBody")
        == hashlib.md5(b"via query <&>").hexdigest()
    )
    assert text(
        root, "sqs:SendMessageResult/sqs:MD5OfMessageAttributes"
    ) == expected_attributes_md5(sent)

    receive = {
        "Action": "ReceiveMessage",
        "QueueUrl": url,
        "AttributeName.1": "ApproximateReceiveCount",
        "MessageAttributeName.1": "All",
        "MaxNumberOfMessages": "10",
    }
    # Without an auth policy a GET carries only actions that change nothing (a receive leases).
    status, root = call(endpoint, receive, method="GET")
    assert status == 405 and text(root, "sqs:Error/sqs:Code") == "InvalidAction"
    status, root = call(endpoint, receive)
    messages = root.findall("sqs:ReceiveMessageResult/sqs:Message", NS)
    assert len(messages) == 1
    message = messages[0]
    assert text(message, "sqs:Body") == "via query <&>"
    assert text(message, "sqs:Attribute/sqs:Name") == "ApproximateReceiveCount"
    assert text(message, "sqs:Attribute/sqs:Value") == "1"
    values = {
        text(a, "sqs:Name"): a.find("sqs:Value", NS)
        for a in message.findall("sqs:MessageAttribute", NS)
    }
    assert text(values["n"], "sqs:StringValue") == "42"
    assert base64.b64decode(text(values["b"], "sqs:BinaryValue")) == blob
    assert text(message, "sqs:MD5OfMessageAttributes") == expected_attributes_md5(sent)
    receipt = text(message, "sqs:ReceiptHandle")

    status, root = call(
        endpoint,
        {
            "Action": "DeleteMessageBatch",
            "QueueUrl": url,
            "DeleteMessageBatchRequestEntry.1.Id": "one",
            "DeleteMessageBatchRequestEntry.1.ReceiptHandle": receipt,
            "DeleteMessageBatchRequestEntry.2.Id": "two",
            "DeleteMessageBatchRequestEntry.2.ReceiptHandle": "junk",
        },
    )
    assert status == 200
    assert (
        text(root, "sqs:DeleteMessageBatchResult/sqs:DeleteMessageBatchResultEntry/sqs:Id") == "one"
    )
    failed = root.find("sqs:DeleteMessageBatchResult/sqs:BatchResultErrorEntry", NS)
    assert text(failed, "sqs:Id") == "two"
    assert text(failed, "sqs:Code") == "ReceiptHandleIsInvalid"
    assert text(failed, "sqs:SenderFault") == "true"

    status, root = call(
        endpoint,
        {
            "Action": "SendMessageBatch",
            "QueueUrl": url,
            "SendMessageBatchRequestEntry.1.Id": "a",
            "SendMessageBatchRequestEntry.1.MessageBody": "A",
            "SendMessageBatchRequestEntry.2.Id": "b",
            "SendMessageBatchRequestEntry.2.MessageBody": "B",
            "SendMessageBatchRequestEntry.2.DelaySeconds": "3",
        },
    )
    ids = [
        text(e, "sqs:Id")
        for e in root.findall("sqs:SendMessageBatchResult/sqs:SendMessageBatchResultEntry", NS)
    ]
    assert ids == ["a", "b"]

    status, root = call(endpoint, {"Action": "ListQueues", "QueueNamePrefix": name})
    assert [q.text for q in root.findall("sqs:ListQueuesResult/sqs:QueueUrl", NS)] == [url]

    status, root = call(endpoint, {"Action": "PurgeQueue", "QueueUrl": url})
    assert status == 200 and root.find("sqs:ResponseMetadata/sqs:RequestId", NS) is not None
    status, root = call(endpoint, {"Action": "DeleteQueue", "QueueUrl": url})
    assert status == 200


@pytest.mark.parametrize(
    "params, status, code",
    [
        (
            {"Action": "GetQueueUrl", "QueueName": "no-such-queue-here"},
            400,
            "AWS.SimpleQueueService.NonExistentQueue",
        ),
        ({"Action": "GetQueueUrl"}, 400, "MissingParameter"),
        ({"Action": "NoSuchAction"}, 400, "InvalidAction"),
        ({}, 400, "InvalidAction"),
        # Names that are all numbers would make the parameters a list, not named values.
        ({"1": "a", "2": "b"}, 400, "MalformedQueryString"),
        (
            {
                "Action": "CreateQueue",
                "QueueName": "q",
                "Attribute.1.Name": "ContentBasedDeduplication",
                "Attribute.1.Value": "true",
            },
            400,
            "InvalidAttributeName",  # a FIFO queue's attribute on a standard queue
        ),
        (
            {
                "Action": "ReceiveMessage",
                "QueueUrl": "http://h/000000000000/no-such-queue-here",
                "MaxNumberOfMessages": "x",
            },
            400,
            "InvalidParameterValue",
        ),
    ],
)
def test_query_errors_are_xml_error_responses(sqs_server, params, status, code):
    got_status, root = call(sqs_server.endpoint, params)
    assert got_status == status
    assert root.tag == f"{{{NS['sqs']}}}ErrorResponse"
    assert text(root, "sqs:Error/sqs:Code") == code
    assert text(root, "sqs:Error/sqs:Type") == "Sender"
    assert text(root, "sqs:Error/sqs:Message")
    assert text(root, "sqs:RequestId")


def test_tags_permissions_and_trace_headers_over_the_query_protocol(sqs_server):
    endpoint = sqs_server.endpoint
    name = unique("query")
    status, root = call(
        endpoint,
        {"Action": "CreateQueue", "QueueName": name, "Tag.1.Key": "env", "Tag.1.Value": "prod"},
    )
    assert status == 200
    url = text(root, ".//sqs:QueueUrl")
    status, _ = call(
        endpoint,
        {"Action": "TagQueue", "QueueUrl": url, "Tag.1.Key": "team", "Tag.1.Value": "ops"},
    )
    assert status == 200
    status, _ = call(endpoint, {"Action": "UntagQueue", "QueueUrl": url, "TagKey.1": "env"})
    assert status == 200
    status, root = call(endpoint, {"Action": "ListQueueTags", "QueueUrl": url})
    assert status == 200
    tags = {
        tag.findtext("sqs:Key", namespaces=NS): tag.findtext("sqs:Value", namespaces=NS)
        for tag in root.iterfind(".//sqs:Tag", NS)
    }
    assert tags == {"team": "ops"}
    status, _ = call(
        endpoint,
        {
            "Action": "AddPermission",
            "QueueUrl": url,
            "Label": "p",
            "AWSAccountId.1": "111122223333",
            "ActionName.1": "SendMessage",
            "ActionName.2": "ReceiveMessage",
        },
    )
    assert status == 200
    status, root = call(
        endpoint, {"Action": "GetQueueAttributes", "QueueUrl": url, "AttributeName.1": "Policy"}
    )
    assert '"SQS:ReceiveMessage"' in text(root, ".//sqs:Attribute/sqs:Value")
    status, root = call(
        endpoint,
        {
            "Action": "SendMessage",
            "QueueUrl": url,
            "MessageBody": "traced",
            "MessageSystemAttribute.1.Name": "AWSTraceHeader",
            "MessageSystemAttribute.1.Value.DataType": "String",
            "MessageSystemAttribute.1.Value.StringValue": "Root=1-abc",
        },
    )
    assert status == 200 and text(root, ".//sqs:MD5OfMessageSystemAttributes")
    status, root = call(
        endpoint,
        {"Action": "ReceiveMessage", "QueueUrl": url, "MessageSystemAttributeName.1": "All"},
    )
    attributes = {
        a.findtext("sqs:Name", namespaces=NS): a.findtext("sqs:Value", namespaces=NS)
        for a in root.iterfind(".//sqs:Message/sqs:Attribute", NS)
    }
    assert attributes["AWSTraceHeader"] == "Root=1-abc"


def test_get_caller_identity_over_the_query_protocol(sqs_server):
    status, root = call(
        sqs_server.endpoint, {"Action": "GetCallerIdentity", "Version": "2011-06-15"}
    )
    assert status == 200
    assert root.tag == "{https://sts.amazonaws.com/doc/2011-06-15/}GetCallerIdentityResponse"
    account = root.find(".//{https://sts.amazonaws.com/doc/2011-06-15/}Account")
    assert account is not None and account.text == "000000000000"
