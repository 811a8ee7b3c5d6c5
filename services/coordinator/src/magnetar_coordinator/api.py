"""The coordinator's protobuf routes (docs/protocol.md)."""

from __future__ import annotations

from fastapi import FastAPI

from magnetar_coordinator.service import CoordinatorService
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_runtime.app import proto_routes


def add_routes(app: FastAPI, service: CoordinatorService) -> None:
    async def coordinators(_: pb.LookupCoordinatorsRequest) -> pb.LookupCoordinatorsResponse:
        return await service.coordinators()

    proto_routes(app, [
        ("/v1/txn/coordinators", pb.LookupCoordinatorsRequest, coordinators),
        ("/v1/txn/new", pb.NewTxnRequest, service.new_txn),
        ("/v1/txn/add-partitions", pb.AddPartitionToTxnRequest, service.add_partitions),
        ("/v1/txn/add-subscriptions", pb.AddSubscriptionToTxnRequest, service.add_subscriptions),
        ("/v1/txn/add-participants", pb.AddParticipantsToTxnRequest, service.add_participants),
        ("/v1/txn/end", pb.EndTxnRequest, service.end),
        ("/v1/txn/status", pb.TxnStatusRequest, service.status),
    ])
    if service.one_request is not None:  # a hosting broker's (docs/transactions.md)
        proto_routes(app, [("/v1/txn/end-one-request", pb.EndTxnOneRequestRequest, service.end_one_request)])
