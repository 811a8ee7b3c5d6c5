"""RpcClient.serve_locally: a service hosted in another's process (the coordinator in a
broker) calls that process's own routes in process, as its own role, with the errors a
remote call would raise; any other URL or path still goes over HTTP."""

import pytest

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import ConnectError, NotOwner, UnknownError
from magnetar_runtime.auth import current_role, reset_role, set_role
from magnetar_runtime.rpc import RpcClient

OWN = "http://127.0.0.1:1"  # nothing listens there: a call that goes over HTTP fails


def _client(handler) -> RpcClient:
    rpc = RpcClient(timeout_s=2)
    rpc.serve_locally(OWN + "/", {"/v1/topics/lookup": handler}, role="broker-itself")
    return rpc


async def test_a_call_to_its_own_url_runs_the_handler_in_process_as_its_own_role():
    seen = []

    async def lookup(req: pb.LookupRequest) -> pb.LookupResponse:
        seen.append((req.topic, current_role()))
        return pb.LookupResponse(broker_url=OWN)

    rpc = _client(lookup)
    token = set_role("alice")  # the request being handled when the call is made
    try:
        for call in (rpc.call, rpc.call_coalesced):
            reply = await call(OWN, "/v1/topics/lookup", pb.LookupRequest(topic="t"),
                               pb.LookupResponse)
            assert reply.broker_url == OWN
        assert current_role() == "alice"  # the caller's role is back afterwards
    finally:
        reset_role(token)
    assert seen == [("t", "broker-itself")] * 2
    await rpc.close()


async def test_other_urls_and_paths_still_go_over_http():
    async def lookup(req):
        raise AssertionError("not this process's call")

    rpc = _client(lookup)
    with pytest.raises(ConnectError):
        await rpc.call("http://127.0.0.1:2", "/v1/topics/lookup", pb.LookupRequest(), pb.LookupResponse)
    with pytest.raises(ConnectError):
        await rpc.call(OWN, "/v1/topics/metadata", pb.PartitionMetadataRequest(),
                       pb.PartitionMetadataResponse)
    await rpc.close()


async def test_errors_are_the_ones_a_remote_call_would_raise():
    async def not_owner(req):
        raise NotOwner("t moved")

    async def bug(req):
        raise KeyError("oops")

    with pytest.raises(NotOwner, match="t moved"):
        await _client(not_owner).call(OWN, "/v1/topics/lookup", pb.LookupRequest(), pb.LookupResponse)
    with pytest.raises(UnknownError, match="oops"):
        await _client(bug).call(OWN, "/v1/topics/lookup", pb.LookupRequest(), pb.LookupResponse)
