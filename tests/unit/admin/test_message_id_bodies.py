"""magnetar_admin.bodies.message_id and the CLI's message id argument."""

import pytest

from magnetar.admin_cli._http import UsageError
from magnetar.admin_cli._names import message_id as cli_message_id
from magnetar_admin.bodies import EARLIEST, LATEST, MISSING, MessageIdBody, message_id
from magnetar_protocol.errors import BadRequest, NotFound

MAX = 2**63 - 1


def test_message_ids():
    assert message_id({"ledgerId": 0, "entryId": 12}) == MessageIdBody(12, -1, -1)
    assert message_id({"ledgerId": 0, "entryId": 3, "partitionIndex": 1, "batchIndex": 2}) == MessageIdBody(3, 2, 1)
    assert message_id({"ledgerId": -1, "entryId": -1}) == EARLIEST
    assert message_id({"ledgerId": MAX, "entryId": MAX}) == LATEST
    assert message_id(MISSING, default=LATEST) == LATEST


@pytest.mark.parametrize("body, error, reason", [
    (MISSING, BadRequest, "must be a message id"),
    ([1], BadRequest, "must be a message id"),
    ({"entryId": 1}, BadRequest, '"ledgerId"'),
    ({"ledgerId": 0}, BadRequest, '"entryId"'),
    ({"ledgerId": 0, "entryId": True}, BadRequest, "integer"),
    ({"ledgerId": 0, "entryId": 1.5}, BadRequest, "integer"),
    ({"ledgerId": 0, "entryId": -5}, BadRequest, "between"),
    ({"ledgerId": 0, "entryId": 1, "batchIndex": 2**40}, BadRequest, "between"),
    ({"ledgerId": 7, "entryId": 1}, NotFound, "ledger 7"),
    ({"ledgerId": 0, "entryId": -1}, BadRequest, "at least 0"),
])
def test_bad_message_ids(body, error, reason):
    with pytest.raises(error, match=reason):
        message_id(body)


def test_cli_message_ids():
    assert cli_message_id("earliest") == {"ledgerId": -1, "entryId": -1}
    assert cli_message_id("LATEST") == {"ledgerId": MAX, "entryId": MAX}
    assert cli_message_id("0:12") == {"ledgerId": 0, "entryId": 12, "partitionIndex": -1, "batchIndex": -1}
    assert cli_message_id("0:12:1:3") == {"ledgerId": 0, "entryId": 12, "partitionIndex": 1, "batchIndex": 3}
    for bad in ("", "12", "a:b", "0:1:2:3:4"):
        with pytest.raises(UsageError, match="LEDGER:ENTRY"):
            cli_message_id(bad)
