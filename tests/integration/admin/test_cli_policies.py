"""``magnetar-admin`` storage-policy commands (issue #16) against a real admin service:
set/get/remove of retention, messageTTL and backlog quotas per namespace and per topic,
Pulsar's size and time units, ``namespaces policies``, and refusals that change nothing.
In process (``magnetar.admin_cli.run``): test_cli.py proves the console script itself;
a subprocess per command here cost seconds each on the shared machine."""

from __future__ import annotations

import json


def ok(cli, *args: str) -> str:
    code, out, err = cli(*args)
    assert code == 0, (args, code, out, err)
    return out


def js(cli, *args: str):
    return json.loads(ok(cli, "--output", "json", *args))


def refused(admin, cli, *args: str) -> str:
    before = admin.snapshot()
    code, out, err = cli(*args)
    assert (code, out) == (1, ""), (args, code, out, err)
    assert admin.snapshot() == before
    return err


def usage(cli, *args: str) -> str:
    code, out, err = cli(*args)
    assert code == 2, (args, code, out, err)
    return err


def test_namespace_policies_round_trip(cli):
    ok(cli, "namespaces", "set-retention", "public/default", "--size", "2G", "--time", "3h")
    assert js(cli, "namespaces", "get-retention", "public/default") == {
        "retentionTimeInMinutes": 180, "retentionSizeInMB": 2048}
    ok(cli, "namespaces", "set-message-ttl", "public/default", "--ttl", "1h")
    assert js(cli, "namespaces", "get-message-ttl", "public/default") == 3600
    ok(cli, "namespaces", "set-backlog-quota", "public/default", "--limit", "10M", "--policy",
       "consumer_backlog_eviction")
    policies = js(cli, "namespaces", "policies", "public/default")
    assert policies["retention_policies"] == {"retentionTimeInMinutes": 180, "retentionSizeInMB": 2048}
    assert policies["message_ttl_in_seconds"] == 3600
    assert policies["backlog_quota_map"] == {"destination_storage": {
        "limitSize": 10 * 2**20, "limitTime": -1, "policy": "consumer_backlog_eviction"}}
    for what in ("retention", "message-ttl", "backlog-quota"):
        ok(cli, "namespaces", f"remove-{what}", "public/default")
    assert "not set here" in ok(cli, "namespaces", "get-retention", "public/default")
    assert js(cli, "namespaces", "get-backlog-quotas", "public/default") == {}


def test_topic_level_overrides(admin, cli):
    ok(cli, "topics", "create", "orders", "-p", "2")
    ok(cli, "topics", "set-retention", "orders", "--size", "-1", "--time", "-1")
    assert js(cli, "topics", "get-retention", "orders") == {"retentionTimeInMinutes": -1,
                                                              "retentionSizeInMB": -1}
    ok(cli, "topics", "set-backlog-quota", "orders", "--limitTime", "30m", "--policy", "producer_exception")
    assert js(cli, "topics", "get-backlog-quotas", "orders")["destination_storage"]["limitTime"] == 1800
    assert js(cli, "namespaces", "get-retention", "public/default") is None  # the namespace's untouched
    ok(cli, "topics", "delete", "orders")
    assert admin.snapshot()["storage_policies"] == []  # a topic's policies go with it


def test_refusals_change_nothing(admin, cli):
    assert "must be both 0" in refused(admin, cli, "namespaces", "set-retention", "public/default", "--size", "0",
                                       "--time", "10")
    assert "does not exist" in refused(admin, cli, "topics", "set-message-ttl", "never-made", "--ttl", "5")
    assert "does not exist" in refused(admin, cli, "namespaces", "set-message-ttl", "public/nope", "--ttl", "5")
    assert "size '10Q'" in usage(cli, "namespaces", "set-retention", "public/default", "--size", "10Q", "--time", "1h")
    assert "invalid choice" in usage(cli, "namespaces", "set-backlog-quota", "public/default", "--limit", "1G",
                                     "--policy", "drop_everything")
    assert "--limit" in usage(cli, "namespaces", "set-backlog-quota", "public/default",
                              "--policy", "producer_exception")
    assert "--subscription SUB or --all-subscriptions" in usage(cli, "topics", "expire-messages", "orders", "-t", "1h")


def test_compaction_threshold_per_namespace_and_topic(admin, cli):
    ok(cli, "namespaces", "set-compaction-threshold", "public/default", "--threshold", "100M")
    assert js(cli, "namespaces", "get-compaction-threshold", "public/default") == 100 * 2**20
    assert js(cli, "namespaces", "policies", "public/default")["compaction_threshold"] == 100 * 2**20
    ok(cli, "topics", "create", "ticks")
    ok(cli, "topics", "set-compaction-threshold", "ticks", "--threshold", "0")   # off for this topic
    assert js(cli, "topics", "get-compaction-threshold", "ticks") == 0
    ok(cli, "namespaces", "remove-compaction-threshold", "public/default")
    assert "not set here" in ok(cli, "namespaces", "get-compaction-threshold", "public/default")
    assert "--threshold must be 0" in usage(cli, "topics", "set-compaction-threshold", "ticks", "--threshold", "-1")
    assert "does not exist" in refused(admin, cli, "topics", "set-compaction-threshold", "never-made",
                                       "--threshold", "1M")
    code, _, err = cli("topics", "compaction-status", "never-made")
    assert code == 1 and "does not exist" in err
