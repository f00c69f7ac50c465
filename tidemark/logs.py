"""Logging setup for `--log-format text|json`, shared by both programs.

JSON is one object per line (time, level, logger, msg, then any `extra=` fields) so log
collectors need no parsing rules; text is for humans and shows the same extra fields as
key=value. Both write to stderr by default: `simulate` and `plan` keep stdout for their document.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any, Final

FORMATS: Final = ("text", "json")

#: attributes every LogRecord has; anything else on a record came from `extra=`
_STANDARD_ATTRS: Final = frozenset(
    vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None)).keys() | {"message", "asctime", "taskName"}
)


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields passed with `extra=` (in insertion order)."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS and not k.startswith("_")}


def _iso_time(created: float) -> str:
    """RFC 3339, UTC, milliseconds."""
    return datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, msg, extra fields, and exc/stack when present."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": _iso_time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in extra_fields(record).items():
            if key not in doc:
                doc[key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


def _text_value(value: Any) -> str:
    """Quote strings with spaces so key=value pairs stay splittable."""
    if isinstance(value, str):
        return json.dumps(value) if (" " in value or not value) else value
    return str(value)


class TextFormatter(logging.Formatter):
    """`<time> <LEVEL> <logger>: <msg> key=value...`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return _iso_time(record.created)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extras = extra_fields(record)
        if not extras:
            return text
        pairs = " ".join(f"{k}={_text_value(v)}" for k, v in extras.items())
        head, sep, tail = text.partition("\n")  # keep a traceback below the first line
        return f"{head} {pairs}{sep}{tail}"


def make_formatter(fmt: str) -> logging.Formatter:
    if fmt == "json":
        return JsonFormatter()
    if fmt == "text":
        return TextFormatter()
    raise ValueError(f"unknown log format {fmt!r} (expected one of {', '.join(FORMATS)})")


def setup_logging(fmt: str = "text", level: int | str = logging.INFO, stream: IO[str] | None = None) -> logging.Handler:
    """Configure the root logger with one handler (replacing earlier ones); returns the handler.

    Raises ValueError on an unknown format or level (a usage error, exit code 2).
    """
    formatter = make_formatter(fmt)
    if isinstance(level, str):
        resolved = logging.getLevelName(level.upper())
        if not isinstance(resolved, int):
            raise ValueError(f"unknown log level {level!r}")
        level = resolved
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # urllib3 logs every retry at WARNING; during an API outage the reflector already says it once.
    logging.getLogger("urllib3").setLevel(max(level, logging.ERROR))
    return handler
