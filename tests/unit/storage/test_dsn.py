"""magnetar_storage.dsn: database URLs safe to print."""

from __future__ import annotations

import pytest

from magnetar_storage.dsn import MASK, passwords_in, redact, redact_text


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://magnetar:s3cret@db:5432/magnetar", "postgresql://magnetar:***@db:5432/magnetar"),
    ("postgres://u:p%40ss@db/x?sslmode=require", "postgres://u:***@db/x?sslmode=require"),
    ("postgresql://u:p@ss@db:5432/x", "postgresql://u:***@db:5432/x"),  # unescaped "@"
    ("postgresql://:onlypw@db/x", "postgresql://:***@db/x"),
    ("postgresql://u@db/x?password=s3cret&sslmode=disable",
     "postgresql://u@db/x?password=***&sslmode=disable"),
    ("host=db user=u password='a b' dbname=x", "host=db user=u password=*** dbname=x"),
    ("postgresql://magnetar@127.0.0.1:5432/magnetar", "postgresql://magnetar@127.0.0.1:5432/magnetar"),
    ("postgresql://u:@db/x", "postgresql://u:***@db/x"),
    ("not a url at all", "not a url at all"),
    ("", ""),
])
def test_redact_masks_the_password_and_keeps_where(url, shown):
    assert redact(url) == shown


def test_redact_masks_every_url_in_a_sentence():
    text = "tried postgresql://a:one@h1/x then mysql://b:two@h2/y, gave up"
    assert redact(text) == "tried postgresql://a:***@h1/x then mysql://b:***@h2/y, gave up"


def test_redact_text_also_masks_the_password_quoted_out_of_context():
    url = "postgresql://u:p%40ss%21@db/x"
    assert passwords_in(url) == ["p%40ss%21", "p@ss!"]
    message = 'invalid port "p@ss!" in p%40ss%21, connecting to postgresql://u:p%40ss%21@db/x'
    redacted = redact_text(message, url)
    assert "p@ss!" not in redacted and "p%40ss%21" not in redacted
    assert redacted == f'invalid port "{MASK}" in {MASK}, connecting to postgresql://u:{MASK}@db/x'


def test_redact_text_without_a_password_changes_nothing():
    assert redact_text("connection refused", "postgresql://u@db/x", "") == "connection refused"
