"""The authorization rules (magnetar_runtime.permissions), table-driven: given the
policies, a role and an action, allowed or not.  Pure: no I/O."""

from __future__ import annotations

import pytest

from magnetar_protocol.errors import BadRequest
from magnetar_runtime import permissions as p
from magnetar_runtime.permissions import CONSUME, LOOKUP, PRODUCE, Policies

POLICIES = Policies(
    tenant_admins=frozenset({"ops"}),
    namespace_grants={"writer": frozenset({PRODUCE}), "reader": frozenset({CONSUME}),
                      "both": frozenset({PRODUCE, CONSUME})},
    topic_grants={"topic-reader": frozenset({CONSUME})},
    subscription_roles={"billing": frozenset({"both", "topic-reader"})},
)

CASES = [
    # role, superuser, action, subscription, allowed
    ("root", True, PRODUCE, None, True),
    ("root", True, CONSUME, "billing", True),       # a superuser ignores subscription auth
    ("ops", False, PRODUCE, None, True),             # tenant admin: every topic operation
    ("ops", False, CONSUME, "billing", True),
    ("writer", False, PRODUCE, None, True),
    ("writer", False, LOOKUP, None, True),
    ("writer", False, CONSUME, "s", False),
    ("reader", False, CONSUME, "s", True),
    ("reader", False, LOOKUP, None, True),
    ("reader", False, PRODUCE, None, False),
    ("reader", False, CONSUME, "billing", False),    # consume, but not on billing's list
    ("both", False, CONSUME, "billing", True),
    ("topic-reader", False, CONSUME, "billing", True),  # a topic grant counts like a namespace one
    ("topic-reader", False, PRODUCE, None, False),
    ("nobody", False, LOOKUP, None, False),
    ("nobody", False, PRODUCE, None, False),
    ("nobody", False, CONSUME, "s", False),
    ("nobody", False, CONSUME, None, False),
]


@pytest.mark.parametrize("role,superuser,action,subscription,expected", CASES)
def test_decisions(role, superuser, action, subscription, expected):
    assert p.allowed(POLICIES, role, superuser, action, subscription) is expected


def test_another_tenants_admin_is_nobody_here():
    other = Policies(tenant_admins=frozenset({"other-ops"}))
    assert not p.allowed(POLICIES, "other-ops", False, LOOKUP)
    assert p.allowed(other, "other-ops", False, PRODUCE)


def test_an_empty_subscription_list_restricts_nothing():
    policies = Policies(namespace_grants={"r": frozenset({CONSUME})},
                        subscription_roles={"s": frozenset()})
    assert p.allowed(policies, "r", False, CONSUME, "s")


def test_unknown_action_is_a_programming_error():
    with pytest.raises(ValueError):
        p.allowed(POLICIES, "writer", False, "delete")


@pytest.mark.parametrize("body", [[], None, "produce", ["produce", "functions"], ["PRODUCE"], [1]])
def test_bad_actions_are_400(body):
    with pytest.raises(BadRequest):
        p.validate_actions(body)


def test_actions_are_sorted_and_unique():
    assert p.validate_actions(["produce", "consume", "produce"]) == ["consume", "produce"]


@pytest.mark.parametrize("role", ["", "a\x00b", "line\nbreak", "x" * 256, 7, None])
def test_bad_roles_are_400(role):
    with pytest.raises(BadRequest):
        p.validate_role(role)


def test_roles_body():
    assert p.validate_roles(["b", "a", "b"]) == ["a", "b"]
    for bad in ([], ["ok", ""], "a", [None]):
        with pytest.raises(BadRequest):
            p.validate_roles(bad)


def test_refusal_names_the_command_that_grants():
    assert "grant-permission" in p.refusal("bob", PRODUCE, "persistent://t/n/x")
    assert "'billing'" in p.refusal("bob", CONSUME, "persistent://t/n/x", "billing")
