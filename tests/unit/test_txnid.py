import pytest

from magnetar_protocol.errors import BadRequest
from magnetar_protocol.txnid import TxnID


def test_a_txn_id_is_its_pair_prints_as_the_admin_api_does_and_parses_back():
    txn = TxnID(3, 42)
    assert txn == (3, 42) and hash(txn) == hash((3, 42))
    assert str(txn) == "(3,42)"
    assert TxnID.parse(" ( 3 , 42 ) ") == txn
    assert TxnID.from_wire(txn.to_wire()) == txn


@pytest.mark.parametrize("text", ["3,42", "(3;42)", "(-1,2)", "(1,2,3)", f"(1,{1 << 63})", "(a,b)"])
def test_what_is_not_a_txn_id_is_a_bad_request(text):
    with pytest.raises(BadRequest):
        TxnID.parse(text)
