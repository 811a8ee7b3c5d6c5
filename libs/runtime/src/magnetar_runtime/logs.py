"""Structured logs: one JSON object per line (or plain text for humans)."""

from __future__ import annotations

import json
import logging
import sys
import time

from magnetar_storage.dsn import redact


class RedactingFormatter(logging.Formatter):
    """Every line with URL credentials masked (magnetar_storage.dsn): whatever a
    library's message or traceback quotes, no database password reaches the logs."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class JsonFormatter(RedactingFormatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact(self._entry(record))

    def _entry(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        extra = getattr(record, "fields", None)
        if extra:
            entry.update(extra)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str = "INFO", fmt: str = "json", service: str = "") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            RedactingFormatter(f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Access logs for every produce/fetch request would drown everything else.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)


def log_fields(logger: logging.Logger, level: int, msg: str, **fields) -> None:
    logger.log(level, msg, extra={"fields": fields})
