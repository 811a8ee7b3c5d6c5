"""The registry's protobuf routes (docs/protocol.md)."""

from __future__ import annotations

from fastapi import FastAPI

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_registry.service import RegistryService
from magnetar_runtime.app import proto_routes


def add_routes(app: FastAPI, service: RegistryService) -> None:
    proto_routes(app, [
        ("/v1/keys/connect", pb.ConnectKeyRequest, service.connect),
        ("/v1/keys/delete", pb.DeleteKeyRequest, service.delete),
    ])
