"""Advertised listeners (Apache Pulsar's ``advertisedListeners``): a process is reached at
one URL per network it serves — ``internal`` inside a Kubernetes cluster, ``external``
through a NodePort or a load balancer — and a client names the one it can reach
(``listener_name``); topic, coordinator and registry lookups then answer that
listener's URLs.  Pure: parsing and choosing, no I/O.

    MAGNETAR_ADVERTISED_LISTENERS="internal:http://broker-0.svc:8080,external:http://1.2.3.4:30080"

In a StatefulSet every pod gets the same environment, so a URL may say where this pod
is by its ordinal (``MAGNETAR_POD_INDEX``): ``{pod_index}`` is the ordinal, and
``{30080+pod_index}`` the ordinal plus 30080 (a NodePort per pod); e.g.
``external:http://203.0.113.10:{30080+pod_index}`` or
``external:http://broker-{pod_index}.mq.example.com:8080``.

The internal listener is the process's advertised URL (``MAGNETAR_ADVERTISED_URL``):
the one other services and in-cluster clients use, and the answer when a client names
no listener.
"""

from __future__ import annotations

import re

from magnetar_protocol.errors import BadRequest

INTERNAL = "internal"

# As a DNS label or a Kubernetes port name: safe in an environment variable and a URL.
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,62})$")
_URL = re.compile(r"^https?://[^/\s:,]+(:\d{1,5})?/?$")
_PULSAR_URL = re.compile(r"^pulsar(\+ssl)?://[^/\s:,]+(:\d{1,5})?/?$")


def listener_name_problem(name: object) -> str | None:
    """Why ``name`` is not a usable listener name, or None."""
    if not isinstance(name, str):
        return f"a listener name is a string, not {type(name).__name__}"
    if not _NAME.match(name):
        return (f"listener name {name!r} must be 1-63 characters of letters, digits, '_', "
                "'.' or '-', starting with a letter or digit (e.g. external)")
    return None


_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_POD_INDEX = re.compile(r"^(?:(\d{1,5})\+)?pod_index$")


def expand_pod_index(text: str, pod_index: int | None) -> str:
    """``text`` with ``{pod_index}`` and ``{N+pod_index}`` replaced; ValueError for any
    other placeholder, or for one when the pod index is unknown."""
    def one(match: re.Match) -> str:
        found = _POD_INDEX.match(match.group(1).replace(" ", ""))
        if found is None:
            raise ValueError(f"advertised listeners: unknown placeholder {match.group(0)!r}; "
                             "use {pod_index} or {30080+pod_index}")
        if pod_index is None:
            raise ValueError(f"advertised listeners use {match.group(0)} but the pod index is "
                             "unknown: set MAGNETAR_POD_INDEX (the chart sets it from the "
                             "apps.kubernetes.io/pod-index label) or run it with a hostname "
                             "ending in -N")
        return str(int(found.group(1) or 0) + pod_index)
    return _PLACEHOLDER.sub(one, text or "")


def parse_listeners(text: str, pulsar: bool = False) -> dict[str, str]:
    """``"internal:http://a:8080, external:http://1.2.3.4:30080"`` -> {name: url}
    (``pulsar``: a broker's Pulsar listeners, ``external:pulsar://1.2.3.4:30650``).
    ValueError naming the bad entry and the expected form."""
    url_form, example = ((_PULSAR_URL, "pulsar://1.2.3.4:30650") if pulsar
                         else (_URL, "http://1.2.3.4:30080"))
    listeners: dict[str, str] = {}
    for entry in (e.strip() for e in (text or "").split(",")):
        if not entry:
            continue
        name, sep, url = entry.partition(":")
        name, url = name.strip(), url.strip()
        if not sep or not url:
            raise ValueError(f"advertised listener {entry!r} must be NAME:URL, "
                             f"e.g. external:{example}")
        if problem := listener_name_problem(name):
            raise ValueError(f"advertised listener {entry!r}: {problem}")
        if not url_form.match(url):
            scheme = "pulsar(+ssl)" if pulsar else "http(s)"
            raise ValueError(f"advertised listener {name!r}: URL {url!r} must be "
                             f"{scheme}://HOST[:PORT] with no path, e.g. {example}")
        if name in listeners:
            raise ValueError(f"advertised listener {name!r} is named twice")
        listeners[name] = url.rstrip("/")
    return listeners


def resolve_internal(advertised_url: str, listeners: dict[str, str]) -> str:
    """The internal URL: the advertised URL, else the listener named ``internal``, else
    "" (the caller's default, http://HOST:PORT).  Both given must agree."""
    advertised = advertised_url.rstrip("/")
    named = listeners.get(INTERNAL, "")
    if advertised and named and advertised != named:
        raise ValueError(f"MAGNETAR_ADVERTISED_URL is {advertised!r} but "
                         f"MAGNETAR_ADVERTISED_LISTENERS names internal as {named!r}: "
                         "set one of them, or the same URL in both")
    return advertised or named


# The URL schemes of each protocol a listener may speak: a broker with the Pulsar listener
# on advertises its pulsar:// URL beside its HTTP ones, and neither protocol's lookup
# may answer the other's URL.
SCHEMES = {"http": ("http://", "https://"), "pulsar": ("pulsar://", "pulsar+ssl://")}


def choose_url(internal_url: str, listeners: dict[str, str], name: str, what: str,
               protocol: str = "http") -> str:
    """The URL of ``what`` (e.g. "broker broker-0") a client of ``protocol`` naming
    listener ``name`` uses: for HTTP, the internal URL for no name or ``internal``;
    BadRequest (400) when ``what`` advertises no ``protocol`` listener ``name``, saying
    which it has."""
    if protocol == "http" and (not name or name == INTERNAL):
        return internal_url
    if problem := listener_name_problem(name):
        raise BadRequest(problem)
    usable = {n: u for n, u in listeners.items() if u.startswith(SCHEMES[protocol])}
    url = usable.get(name)
    if url is None:
        known = ", ".join(sorted(({INTERNAL} if protocol == "http" else set()) | set(usable)))
        raise BadRequest(f"{what} advertises no listener {name!r} (it has: {known}); set "
                         f"MAGNETAR_ADVERTISED_LISTENERS on it, or use one of those names "
                         "as the client's listener_name")
    return url


# The advertised-listeners table holds a broker's Pulsar URLs beside its HTTP ones: its
# default pulsar:// URL as "pulsar", each named Pulsar listener as "pulsar:NAME" (a ':'
# is in no listener name, so the two kinds never collide).
PULSAR = "pulsar"


def pulsar_key(name: str) -> str:
    """The table's key of Pulsar listener ``name`` ("" or internal: the default URL)."""
    return PULSAR if not name or name == INTERNAL else f"{PULSAR}:{name}"


def choose_pulsar_url(listeners: dict[str, str], name: str, what: str) -> str:
    """The pulsar:// URL of ``what`` for a client naming listener ``name`` (a LOOKUP's
    advertised_listener_name).  BadRequest when it advertises none by that name: Pulsar
    refuses such a lookup too (ServiceNotReady there, which the wheel retries until its
    operation timeout; a name no broker advertises is a configuration error, so this one
    is answered NotAllowedError, which it does not retry)."""
    if name and (problem := listener_name_problem(name)):
        raise BadRequest(problem)
    url = listeners.get(pulsar_key(name))
    if url is None:
        if PULSAR not in listeners:
            raise BadRequest(f"{what} has no Pulsar listener (MAGNETAR_PULSAR_PORT unset there)")
        known = sorted({INTERNAL} | {key.split(":", 1)[1] for key in listeners if key.startswith(PULSAR + ":")})
        raise BadRequest(f"{what} does not have the Pulsar listener {name!r} (it has: {', '.join(known)}); "
                         "set MAGNETAR_ADVERTISED_PULSAR_LISTENERS on the brokers, or use one of "
                         "those names as the client's listener_name")
    return url
