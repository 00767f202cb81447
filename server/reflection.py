"""Server reflection, as grpc.reflection.v1 (today's name, what current grpcurl and Postman ask
for first) and as grpc.reflection.v1alpha (older tools).

grpcio-reflection ships only v1alpha. v1 is the same protocol under another package: the same
messages with the same field numbers, so the bytes on the wire are the same. One v1alpha servicer
therefore answers both names. The v1 proto file is registered in the descriptor pool (a copy of
the v1alpha one, renamed), so a client can also describe the v1 service it talks to.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc
import grpc.aio
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection_pb2 as v1alpha_pb2
from grpc_reflection.v1alpha import reflection_pb2_grpc as v1alpha_pb2_grpc
from grpc_reflection.v1alpha._async import ReflectionServicer

V1ALPHA_SERVICE = "grpc.reflection.v1alpha.ServerReflection"
V1_PACKAGE = "grpc.reflection.v1"
V1_SERVICE = f"{V1_PACKAGE}.ServerReflection"
V1_FILE = "grpc/reflection/v1/reflection.proto"


def enable(server: Any, service_names: Iterable[str]) -> None:
    """Serve reflection on server (a grpc.aio.Server, or service.GenericOnly of one) for
    service_names (both reflection services are added)."""
    register_v1_descriptor()
    servicer = ReflectionServicer((*service_names, V1_SERVICE, V1ALPHA_SERVICE))
    # The stubs leave this generated function untyped.
    v1alpha_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    v1 = grpc.method_handlers_generic_handler(
        V1_SERVICE,
        {
            "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                servicer.ServerReflectionInfo,
                request_deserializer=v1alpha_pb2.ServerReflectionRequest.FromString,
                response_serializer=v1alpha_pb2.ServerReflectionResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((v1,))


def register_v1_descriptor(pool: descriptor_pool.DescriptorPool | None = None) -> None:
    """Add grpc/reflection/v1/reflection.proto to pool (the default one) unless it is there."""
    pool = pool or descriptor_pool.Default()
    try:
        pool.FindFileByName(V1_FILE)
        return  # registered already (by us, or by a grpcio-reflection that has v1)
    except KeyError:
        pass
    file = descriptor_pb2.FileDescriptorProto()
    v1alpha_pb2.DESCRIPTOR.CopyToProto(file)
    old = f".{file.package}."
    file.name, file.package = V1_FILE, V1_PACKAGE
    for message in file.message_type:
        for field in message.field:
            if field.type_name.startswith(old):
                field.type_name = f".{V1_PACKAGE}." + field.type_name.removeprefix(old)
    for service in file.service:
        for method in service.method:
            method.input_type = f".{V1_PACKAGE}." + method.input_type.removeprefix(old)
            method.output_type = f".{V1_PACKAGE}." + method.output_type.removeprefix(old)
    pool.AddSerializedFile(file.SerializeToString())
