"""The one-phase-or-two-phase decision (magnetar_broker.commitpath, issue 18)."""

from magnetar_broker.commitpath import plan_one_phase, union

A = "persistent://public/default/a"
B = "persistent://public/default/b"
C = "persistent://public/default/c"


def test_every_participant_served_here_ends_in_one_phase_in_topic_order():
    plan = plan_one_phase(True, [B, A, B], [(C, "s2"), (A, "s1")], {A, B, C})
    assert plan is not None
    assert plan.partitions == (A, B)  # the order every one-phase end holds the writers in
    assert plan.subscriptions == ((A, "s1"), (C, "s2"))


def test_a_partition_served_elsewhere_takes_the_two_phase_path():
    assert plan_one_phase(True, [A, B], [], {A}) is None


def test_a_subscription_on_a_partition_served_elsewhere_takes_the_two_phase_path():
    assert plan_one_phase(True, [A], [(B, "s")], {A}) is None


def test_the_setting_off_takes_the_two_phase_path():
    assert plan_one_phase(False, [A], [], {A}) is None


def test_no_participant_at_all_is_one_phase():
    plan = plan_one_phase(True, [], [], set())
    assert plan is not None and plan.partitions == () and plan.subscriptions == ()


def test_a_registration_that_raced_the_hold_makes_the_plan_stale():
    plan = plan_one_phase(True, [A], [(A, "s")], {A, B})
    assert plan.same_participants([A], [(A, "s")])
    assert plan.same_participants([A, A], [(A, "s")])
    assert not plan.same_participants([A, B], [(A, "s")])
    assert not plan.same_participants([A], [(A, "s"), (A, "t")])
    assert not plan.same_participants([], [(A, "s")])


def test_a_group_holds_the_union_of_its_participants_in_the_same_order():
    one = plan_one_phase(True, [B], [(A, "s")], {A, B, C})
    two = plan_one_phase(True, [A, B], [(A, "s"), (C, "t")], {A, B, C})
    group = union([one, two])
    assert group.partitions == (A, B)
    assert group.subscriptions == ((A, "s"), (C, "t"))
