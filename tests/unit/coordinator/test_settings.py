"""The coordinator id (TCID): MAGNETAR_COORDINATOR_ID, else the StatefulSet ordinal."""

import socket

import pytest

from magnetar_coordinator.settings import CoordinatorSettings


def test_explicit_id_wins(monkeypatch):
    monkeypatch.setenv("MAGNETAR_COORDINATOR_ID", "7")
    monkeypatch.setattr(socket, "gethostname", lambda: "magnetar-coordinator-2")
    assert CoordinatorSettings().resolved_coordinator_id() == 7


def test_ordinal_from_the_hostname(monkeypatch):
    monkeypatch.delenv("MAGNETAR_COORDINATOR_ID", raising=False)
    monkeypatch.setattr(socket, "gethostname", lambda: "release-magnetar-coordinator-3")
    assert CoordinatorSettings().resolved_coordinator_id() == 3


def test_no_id_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("MAGNETAR_COORDINATOR_ID", raising=False)
    monkeypatch.setattr(socket, "gethostname", lambda: "laptop")
    with pytest.raises(SystemExit, match="MAGNETAR_COORDINATOR_ID"):
        CoordinatorSettings().resolved_coordinator_id()


def test_an_empty_id_falls_back_to_the_hostname(monkeypatch):
    """The chart sets the id from the pod-index label, empty where the label is missing."""
    monkeypatch.setenv("MAGNETAR_COORDINATOR_ID", "")
    monkeypatch.setattr(socket, "gethostname", lambda: "release-magnetar-coordinator-4")
    assert CoordinatorSettings().resolved_coordinator_id() == 4
