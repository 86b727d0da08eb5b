"""Framing for the host <-> in-namespace messages: a 4-byte length, then UTF-8 JSON, then raw bytes where the
JSON says how many (a request's "payload_bytes", an exec reply's "output_bytes"); file descriptors ride along
with the first chunk as SCM_RIGHTS. The host's side; csrc/message.c is the other.
"""

from __future__ import annotations

import array
import json
import socket
import struct

MAX_FDS = 16
_HEADER = struct.Struct("!I")
MAX_MESSAGE = 256 * 1024 * 1024


class ProtocolError(Exception):
    """The peer closed the connection or sent something that is not a message."""


def send(sock: socket.socket, message: dict, fds: list[int] | tuple[int, ...] = (), payload: bytes = b"") -> None:
    """One message; `payload`: raw bytes after it, their count in the message's "payload_bytes"."""
    if payload:
        message = {**message, "payload_bytes": len(payload)}
    text = json.dumps(message, separators=(",", ":")).encode()
    data = _HEADER.pack(len(text)) + text + payload
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sent = sock.sendmsg([data], ancillary)
    if sent < len(data):
        sock.sendall(data[sent:])


def recv(sock: socket.socket) -> tuple[dict, list[int]]:
    """Read one message; returns (message, received fds). Raises ProtocolError on EOF or garbage."""
    fds: list[int] = []
    data = b""
    while len(data) < _HEADER.size:
        chunk, ancdata, _flags, _addr = sock.recvmsg(_HEADER.size - len(data), socket.CMSG_SPACE(MAX_FDS * 4))
        fds += _fds_of(ancdata)
        if not chunk:
            raise ProtocolError("the peer closed the connection")
        data += chunk
    (length,) = _HEADER.unpack(data)
    if length > MAX_MESSAGE:
        raise ProtocolError(f"message of {length} bytes exceeds the {MAX_MESSAGE} byte limit")
    payload = recv_exact(sock, length)
    try:
        message = json.loads(payload)
    except ValueError as exc:
        raise ProtocolError(f"not a JSON message: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"expected a JSON object, found {type(message).__name__}")
    return message, fds


def recv_reply(sock: socket.socket, extra_key: str) -> tuple[dict, bytes]:
    """One message that carries no fds, and the raw bytes after it (their count in its `extra_key`), in as few
    reads as the peer's writes allow: a socket with a timeout polls before every read, so one read instead of
    three (header, JSON, bytes) saves two round trips into the kernel per command. Only for a peer that sends
    nothing after a reply until it is asked again (a session's supervisor)."""
    data = sock.recv(1 << 16)
    if len(data) < _HEADER.size:
        data += recv_exact(sock, _HEADER.size - len(data)) if data else b""
        if not data:
            raise ProtocolError("the peer closed the connection")
    (length,) = _HEADER.unpack_from(data)
    if length > MAX_MESSAGE:
        raise ProtocolError(f"message of {length} bytes exceeds the {MAX_MESSAGE} byte limit")
    end = _HEADER.size + length
    if len(data) < end:
        data += recv_exact(sock, end - len(data))
    try:
        message = json.loads(data[_HEADER.size : end])
    except ValueError as exc:
        raise ProtocolError(f"not a JSON message: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"expected a JSON object, found {type(message).__name__}")
    extra, rest = int(message.get(extra_key, 0)), data[end:]
    if len(rest) > extra:
        raise ProtocolError(f"{len(rest) - extra} bytes after the message that it did not announce")
    return message, rest + recv_exact(sock, extra - len(rest))


def recv_exact(sock: socket.socket, size: int) -> bytes:
    """The `size` raw bytes that follow a message (an exec reply's output). Raises ProtocolError on EOF."""
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), 1 << 20))
        if not chunk:
            raise ProtocolError("the peer closed the connection mid-message")
        data += chunk
    return bytes(data)


def _fds_of(ancdata: list) -> list[int]:
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            arr = array.array("i")
            arr.frombytes(data[: len(data) - (len(data) % arr.itemsize)])
            fds += list(arr)
    return fds
