"""Service logs (magnetar_runtime.logs) never carry a database password, whatever a
message or a traceback quotes."""

from __future__ import annotations

import io
import json
import logging

import pytest

from magnetar_runtime import logs

URL = "postgresql://magnetar:s3cret-pw@db:5432/magnetar"


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_every_log_line_is_redacted(fmt, monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(logs.sys, "stderr", stream)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logs.configure_logging("INFO", fmt, "test")
        log = logging.getLogger("magnetar.test")
        log.warning("cannot reach %s", URL)
        try:
            raise ConnectionError(f"lost {URL}")
        except ConnectionError:
            log.exception("pool failed")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    text = stream.getvalue()
    assert "s3cret-pw" not in text
    assert text.count("postgresql://magnetar:***@db:5432/magnetar") == 2
    if fmt == "json":
        assert [json.loads(line)["msg"] for line in text.splitlines() if line.startswith("{")][0] == \
            "cannot reach postgresql://magnetar:***@db:5432/magnetar"
