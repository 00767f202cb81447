"""Server reflection as grpc.reflection.v1 (what current grpcurl asks for first) besides v1alpha."""

from __future__ import annotations

import grpc
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2

from leaseq.server.service import SERVICE_NAME
from tests.support.server import running_server

V1_METHOD = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
SAFETY = 10.0


def v1_stub(channel: grpc.Channel) -> grpc.StreamStreamMultiCallable:
    # grpcio-reflection has no v1 classes; v1's messages are v1alpha's under another package name
    # (same fields, same numbers), so the same bytes go over the wire to the v1 method.
    return channel.stream_stream(
        V1_METHOD,
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )


def test_a_v1_reflection_client_lists_and_describes_the_services() -> None:
    with running_server() as server, grpc.insecure_channel(server.target) as channel:
        requests = [
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE_NAME),
            reflection_pb2.ServerReflectionRequest(
                file_containing_symbol="grpc.reflection.v1.ServerReflection"
            ),
        ]
        listed, queue_file, v1_file = list(v1_stub(channel)(iter(requests), timeout=SAFETY))
    names = {s.name for s in listed.list_services_response.service}
    assert names == {
        SERVICE_NAME,
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    }
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in queue_file.file_descriptor_response.file_descriptor_proto
    ]
    assert any(f.package == "leaseq.v1" and f.service[0].name == "QueueService" for f in files)
    [v1] = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in v1_file.file_descriptor_response.file_descriptor_proto
    ]
    assert v1.name == "grpc/reflection/v1/reflection.proto" and v1.package == "grpc.reflection.v1"
    assert v1.service[0].method[0].input_type == ".grpc.reflection.v1.ServerReflectionRequest"
