"""--log-format text|json: the exact fields and shapes."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from tidemark.logs import JsonFormatter, TextFormatter, extra_fields, setup_logging


def record(
    msg: str = "cycle done in %.1f ms", args: tuple[object, ...] = (3.25,), **extra: object
) -> logging.LogRecord:
    rec = logging.LogRecord("agent.loop", logging.INFO, __file__, 1, msg, args, None)
    rec.created = 1_700_000_000.123456
    for k, v in extra.items():
        setattr(rec, k, v)
    return rec


def test_json_is_one_object_with_time_level_logger_msg_and_extras() -> None:
    line = JsonFormatter().format(record(node="n1", evicted=2, obj={"a": 1}, when=object()))
    assert "\n" not in line
    doc = json.loads(line)
    assert list(doc)[:4] == ["time", "level", "logger", "msg"]
    assert doc["time"] == "2023-11-14T22:13:20.123Z"
    assert (doc["level"], doc["logger"], doc["msg"]) == ("INFO", "agent.loop", "cycle done in 3.2 ms")
    assert doc["node"] == "n1" and doc["evicted"] == 2 and doc["obj"] == {"a": 1}
    assert doc["when"].startswith("<object object")  # unserialisable extras become strings, never an error


def test_json_includes_the_traceback() -> None:
    try:
        raise ValueError("bad")
    except ValueError:
        import sys

        rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    doc = json.loads(JsonFormatter().format(rec))
    assert "ValueError: bad" in doc["exc"]


def test_text_shows_extras_as_key_value() -> None:
    line = TextFormatter().format(record(node="n1", reason="over the high watermark"))
    assert (
        line
        == '2023-11-14T22:13:20.123Z INFO agent.loop: cycle done in 3.2 ms node=n1 reason="over the high watermark"'
    )
    assert extra_fields(record()) == {}


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


def test_setup_logging_json_end_to_end(restore_root: None) -> None:
    out = io.StringIO()
    setup_logging("json", "debug", stream=out)
    logging.getLogger("scheduler_ext.session").debug("bound %d pods", 5, extra={"cycle": 7})
    doc = json.loads(out.getvalue())
    assert doc["msg"] == "bound 5 pods" and doc["cycle"] == 7 and doc["level"] == "DEBUG"
    assert len(logging.getLogger().handlers) == 1


def test_setup_logging_rejects_unknown_format_and_level(restore_root: None) -> None:
    with pytest.raises(ValueError, match="log format"):
        setup_logging("yaml")
    with pytest.raises(ValueError, match="log level"):
        setup_logging("text", "LOUD")
