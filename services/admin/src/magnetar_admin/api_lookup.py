"""Pulsar's HTTP lookup, for clients given an http:// service URL (the C++ client under
the ``pulsar-client`` wheel, Java's): ``GET /lookup/v2/topic/persistent/{tenant}/
{namespace}/{topic}`` answers LookupData, the owner's pulsar:// and http:// URLs on the
listener the client names (``listenerName`` query parameter or ``X-Pulsar-ListenerName``
header, as Pulsar reads them).  The lookup itself runs in a broker as the caller."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request

from magnetar_admin import bodies
from magnetar_admin.deps import Service
from magnetar_protocol.errors import InvalidTopicName
from magnetar_protocol.topics import DOMAIN, NON_PERSISTENT, TopicName

LOOKUP_DATA = "LookupData: {\"brokerUrl\", \"brokerUrlTls\", \"httpUrl\", \"httpUrlTls\"}"


def lookup_routes() -> APIRouter:
    r = APIRouter(prefix="/lookup/v2/topic", tags=["lookup"])

    @r.get("/{domain}/{tenant}/{namespace}/{topic}",
           summary=f"Pulsar's HTTP topic lookup: {LOOKUP_DATA} of the owner (assigned if none)")
    async def lookup(domain: str, tenant: str, namespace: str, topic: str, service: Service, request: Request,
                     listenerName: Annotated[str, Query(max_length=63)] = "",  # noqa: N803
                     x_pulsar_listenername: Annotated[str, Header(max_length=63)] = "",
                     authoritative: bool = False) -> dict:
        if domain not in (DOMAIN, NON_PERSISTENT):
            raise InvalidTopicName(f"topic domain {domain!r}: use persistent")
        name = TopicName.parse(f"{domain}://{tenant}/{namespace}/{topic}")  # non-persistent: refused here
        bodies.topic(name.tenant, name.namespace, name.local_name)
        return await service.pulsar_lookup(name, listenerName or x_pulsar_listenername,
                                           request.headers.get("authorization"))

    return r
