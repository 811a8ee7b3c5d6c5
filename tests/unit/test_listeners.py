"""Advertised listeners: parsing MAGNETAR_ADVERTISED_LISTENERS, the internal URL, and
which URL a lookup answers for a client's listener_name (magnetar_protocol.listeners)."""

import pytest

import magnetar
from magnetar._core import discovery_order
from magnetar_protocol.errors import BadRequest
from magnetar_protocol.listeners import (
    choose_pulsar_url,
    choose_url,
    expand_pod_index,
    listener_name_problem,
    parse_listeners,
    pulsar_key,
    resolve_internal,
)
from magnetar_runtime.settings import ServiceSettings

EXTERNAL = {"external": "http://1.2.3.4:30080"}


def test_parse_names_and_urls():
    assert parse_listeners(" internal:http://broker-0.svc:8080 , external:https://1.2.3.4:30080/,") == {
        "internal": "http://broker-0.svc:8080", "external": "https://1.2.3.4:30080"}
    assert parse_listeners("") == {}


@pytest.mark.parametrize("bad,why", [
    ("external", "NAME:URL"),
    ("external:", "NAME:URL"),
    (":http://a:1", "listener name"),
    ("ex ternal:http://a:1", "listener name"),
    ("external:1.2.3.4:30080", "http"),
    ("external:http://a:1/path", "no path"),
    ("external:ftp://a:1", "http"),
    ("a:http://x:1,a:http://y:1", "twice"),
])
def test_bad_entries_are_refused_naming_them(bad, why):
    with pytest.raises(ValueError, match=why):
        parse_listeners(bad)


def test_the_internal_url_is_the_advertised_one_or_the_listener_named_internal():
    assert resolve_internal("http://a:1/", {}) == "http://a:1"
    assert resolve_internal("", {"internal": "http://b:2"}) == "http://b:2"
    assert resolve_internal("http://b:2", {"internal": "http://b:2"}) == "http://b:2"
    with pytest.raises(ValueError, match="set one of them"):
        resolve_internal("http://a:1", {"internal": "http://b:2"})


@pytest.mark.parametrize("name", [None, "", "internal"])
def test_no_listener_name_or_internal_answers_the_internal_url(name):
    assert choose_url("http://in:8080", EXTERNAL, name, "broker broker-0") == "http://in:8080"


def test_a_named_listener_answers_its_url():
    assert choose_url("http://in:8080", EXTERNAL, "external", "broker broker-0") == "http://1.2.3.4:30080"


def test_a_listener_the_process_lacks_is_a_bad_request_naming_what_it_has():
    with pytest.raises(BadRequest,
                       match=r"broker broker-1 advertises no listener 'public' \(it has: external, internal\)"):
        choose_url("http://in:8080", EXTERNAL, "public", "broker broker-1")
    assert BadRequest.http_status == 400


def test_each_protocol_answers_only_its_own_listeners():
    """A broker with the Pulsar listener on advertises a pulsar:// URL beside its HTTP
    ones: a Magnetar (HTTP) lookup never answers it, nor lists it, and the reverse."""
    listeners = EXTERNAL | {"pulsar": "pulsar://10.0.0.5:6650"}
    with pytest.raises(BadRequest, match=r"no listener 'pulsar' \(it has: external, internal\)"):
        choose_url("http://in:8080", listeners, "pulsar", "broker broker-1")
    assert choose_url("http://in:8080", listeners, "pulsar", "broker b", "pulsar") == "pulsar://10.0.0.5:6650"
    with pytest.raises(BadRequest, match=r"no listener 'external' \(it has: pulsar\)"):
        choose_url("http://in:8080", listeners, "external", "broker b", "pulsar")


@pytest.mark.parametrize("bad", ["", "-x", "a b", "x" * 64, "é", 3, "a:b"])
def test_listener_name_rules(bad):
    assert listener_name_problem(bad) is not None
    assert listener_name_problem("external-1.eu_west") is None


@pytest.mark.parametrize("bad", ["-x", "a b", "x" * 64, "é"])
def test_a_malformed_name_in_a_lookup_is_a_bad_request(bad):
    with pytest.raises(BadRequest, match="listener name"):
        choose_url("http://in:8080", EXTERNAL, bad, "broker b")


def test_settings_read_listeners_from_the_environment(monkeypatch):
    monkeypatch.setenv("MAGNETAR_ADVERTISED_URL", "http://broker-0.svc:8080")
    monkeypatch.setenv("MAGNETAR_ADVERTISED_LISTENERS",
                       "internal:http://broker-0.svc:8080,external:http://1.2.3.4:30080")
    settings = ServiceSettings()
    assert settings.url == "http://broker-0.svc:8080"
    assert settings.listeners == EXTERNAL


def test_settings_refuse_a_bad_listener_at_start(monkeypatch):
    monkeypatch.setenv("MAGNETAR_ADVERTISED_LISTENERS", "external=http://1.2.3.4:30080")
    with pytest.raises(ValueError, match="advertised listener 'external=http"):
        ServiceSettings()


def test_the_client_refuses_a_malformed_listener_name_before_any_request():
    with pytest.raises(ValueError, match="listener name"):
        magnetar.Client("http://127.0.0.1:1", listener_name="ex ternal")
    with pytest.raises(ValueError, match="connection_timeout_ms"):
        magnetar.Client("http://127.0.0.1:1", connection_timeout_ms=0)


def test_discovery_asks_brokers_that_did_not_answer_lately_last():
    urls = ["http://a", "http://b", "http://c"]
    assert discovery_order(urls, 1, {}, now=100.0) == ["http://b", "http://c", "http://a"]
    # b failed 5 s ago: still asked, but after the others, in rotation order.
    assert discovery_order(urls, 1, {"http://b": 95.0}, now=100.0) == ["http://c", "http://a", "http://b"]
    # A failure older than the penalty counts no more.
    assert discovery_order(urls, 1, {"http://b": 10.0}, now=100.0) == ["http://b", "http://c", "http://a"]


def test_the_pod_index_places_each_pod_of_a_statefulset():
    text = "external:http://203.0.113.10:{30080+pod_index},lb:http://broker-{pod_index}.mq.example.com:8080"
    assert parse_listeners(expand_pod_index(text, 2)) == {
        "external": "http://203.0.113.10:30082", "lb": "http://broker-2.mq.example.com:8080"}
    assert expand_pod_index("external:http://h:8080", None) == "external:http://h:8080"


@pytest.mark.parametrize("text,index,why", [
    ("external:http://h:{pod_index}", None, "MAGNETAR_POD_INDEX"),
    ("external:http://h:{ordinal}", 1, "unknown placeholder"),
    ("external:http://h:{pod_index-1}", 1, "unknown placeholder"),
])
def test_a_placeholder_that_cannot_be_filled_is_refused(text, index, why):
    with pytest.raises(ValueError, match=why):
        expand_pod_index(text, index)


def test_settings_expand_the_pod_index(monkeypatch):
    monkeypatch.setenv("MAGNETAR_POD_INDEX", "1")
    monkeypatch.setenv("MAGNETAR_ADVERTISED_LISTENERS", "external:http://203.0.113.10:{30090+pod_index}")
    assert ServiceSettings().listeners == {"external": "http://203.0.113.10:30091"}


def test_an_empty_pod_index_falls_back_to_the_hostnames_ordinal(monkeypatch):
    """Kubernetes before 1.28 has no pod-index label: the variable is empty."""
    monkeypatch.setenv("MAGNETAR_POD_INDEX", "")
    monkeypatch.setenv("MAGNETAR_ADVERTISED_LISTENERS", "external:http://203.0.113.10:{30080+pod_index}")
    monkeypatch.setattr("socket.gethostname", lambda: "magnetar-broker-3")
    assert ServiceSettings().listeners == {"external": "http://203.0.113.10:30083"}
    monkeypatch.setattr("socket.gethostname", lambda: "laptop")
    with pytest.raises(ValueError, match="MAGNETAR_POD_INDEX"):
        ServiceSettings()


# ---------------------------------------------------------------- Pulsar listeners (issue 29)


def test_pulsar_listeners_parse_pulsar_urls_only():
    assert parse_listeners("external:pulsar://1.2.3.4:30650, tls:pulsar+ssl://h:6651", pulsar=True) == {
        "external": "pulsar://1.2.3.4:30650", "tls": "pulsar+ssl://h:6651"}
    with pytest.raises(ValueError, match="pulsar\\(\\+ssl\\)://HOST"):
        parse_listeners("external:http://1.2.3.4:30080", pulsar=True)
    with pytest.raises(ValueError, match="http\\(s\\)://HOST"):
        parse_listeners("external:pulsar://1.2.3.4:30650")


def test_a_lookup_names_the_pulsar_listener_it_can_reach():
    table = {"pulsar": "pulsar://broker-0:6650", "pulsar:external": "pulsar://1.2.3.4:30650",
             "external": "http://1.2.3.4:30080"}
    assert choose_pulsar_url(table, "", "broker b") == "pulsar://broker-0:6650"
    assert choose_pulsar_url(table, "internal", "broker b") == "pulsar://broker-0:6650"
    assert choose_pulsar_url(table, "external", "broker b") == "pulsar://1.2.3.4:30650"
    # An unknown name is refused, naming what the broker has (Pulsar refuses it too).
    with pytest.raises(BadRequest, match="'test'.*it has: external, internal"):
        choose_pulsar_url(table, "test", "broker b")
    with pytest.raises(BadRequest, match="no Pulsar listener"):
        choose_pulsar_url({"external": "http://1.2.3.4:30080"}, "", "broker b")
    assert pulsar_key("external") == "pulsar:external" and pulsar_key("") == "pulsar"
