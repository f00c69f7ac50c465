"""tidemark.kube.binding: the HTTP/1.1 reply parser and the outcome mapping (the binder itself runs
against the real API server in tests/integration/kube/test_binding_api.py)."""

from __future__ import annotations

import asyncio

import pytest

from tidemark.kube.binding import _NoReply, _outcome, _read_reply
from tidemark.kube.eviction import BindOutcome


def _parse(data: bytes, eof: bool = True) -> tuple[int, dict[str, str], bytes]:
    async def run() -> tuple[int, dict[str, str], bytes]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        if eof:
            reader.feed_eof()
        return await _read_reply(reader)

    return asyncio.run(run())


def test_content_length() -> None:
    status, headers, body = _parse(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\nX-A: b\r\n\r\n{}tail")
    assert (status, headers["x-a"], body) == (201, "b", b"{}")


def test_chunked_with_extension_and_trailer() -> None:
    data = b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n"
    assert _parse(data)[::2] == (409, b"abcde")


def test_no_length_reads_to_the_end_and_closes() -> None:
    status, headers, body = _parse(b"HTTP/1.0 500 Oops\r\n\r\nbroken")
    assert (status, body, headers["connection"]) == (500, b"broken", "close")


def test_a_connection_closed_before_any_byte_is_no_reply() -> None:
    with pytest.raises(_NoReply):
        _parse(b"")


def test_a_truncated_reply_is_an_error_not_no_reply() -> None:
    with pytest.raises(asyncio.IncompleteReadError):
        _parse(b"HTTP/1.1 201 Created\r\nContent-Le")


def test_not_http() -> None:
    with pytest.raises(ConnectionError):
        _parse(b"SSH-2.0-OpenSSH\r\n\r\n")


def test_outcomes() -> None:
    assert _outcome(201, b"{}").outcome is BindOutcome.BOUND
    nf = _outcome(404, b'{"kind":"Status","message":"pods \\"x\\" not found"}')
    assert (nf.outcome, nf.status, nf.message) == (BindOutcome.NOT_FOUND, 404, 'pods "x" not found')
    assert _outcome(409, b"").outcome is BindOutcome.CONFLICT
    err = _outcome(500, b"not json")
    assert (err.outcome, err.status, err.message) == (BindOutcome.ERROR, 500, "not json")
