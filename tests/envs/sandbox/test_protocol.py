"""The message framing between host and sandbox processes."""

from __future__ import annotations

import os
import socket
import struct

import pytest
from swebox.envs.sandbox import protocol


def test_messages_and_descriptors_round_trip():
    a, b = socket.socketpair()
    r, w = os.pipe()
    try:
        protocol.send(a, {"op": "x", "text": "é" * 10, "n": 3}, [r])
        message, fds = protocol.recv(b)
        assert message == {"op": "x", "text": "é" * 10, "n": 3}
        assert len(fds) == 1
        os.write(w, b"ok")
        assert os.read(fds[0], 2) == b"ok"
        os.close(fds[0])
    finally:
        for fd in (r, w):
            os.close(fd)
        a.close()
        b.close()


def test_large_messages_arrive_whole():
    a, b = socket.socketpair()
    with a, b:
        import threading

        text = "x" * 3_000_000
        sender = threading.Thread(target=protocol.send, args=(a, {"t": text}))
        sender.start()
        message, _ = protocol.recv(b)
        sender.join()
        assert message["t"] == text


def test_eof_and_garbage_are_protocol_errors():
    a, b = socket.socketpair()
    a.close()
    with pytest.raises(protocol.ProtocolError, match="closed"):
        protocol.recv(b)
    b.close()
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack("!I", 5) + b"[1,2]")
        with pytest.raises(protocol.ProtocolError, match="JSON object"):
            protocol.recv(b)
        a.sendall(struct.pack("!I", protocol.MAX_MESSAGE + 1))
        with pytest.raises(protocol.ProtocolError, match="exceeds"):
            protocol.recv(b)


def _frame(message: bytes) -> bytes:
    return struct.pack("!I", len(message)) + message


def test_a_reply_and_its_bytes_arrive_whole_however_the_peer_splits_them():
    import threading

    output = bytes(range(256)) * 1000  # more than one read's worth
    whole = _frame(b'{"exit_code":0,"output_bytes":%d}' % len(output)) + output
    for pieces in ([whole], [whole[:2], whole[2:7], whole[7:]], [whole[:-1], whole[-1:]]):
        a, b = socket.socketpair()
        with a, b:
            sender = threading.Thread(target=lambda sock, parts: [sock.sendall(p) for p in parts], args=(a, pieces))
            sender.start()
            message, data = protocol.recv_reply(b, "output_bytes")
            sender.join()
            assert message == {"exit_code": 0, "output_bytes": len(output)} and data == output


@pytest.mark.parametrize(
    "sent, error",
    [
        (b"", "closed the connection"),
        (_frame(b'{"output_bytes":1}') + b"xy", "1 bytes after the message"),
        (_frame(b"[1]"), "expected a JSON object"),
        (_frame(b'{"output_bytes":5}') + b"ab", "closed the connection mid-message"),
    ],
)
def test_a_reply_that_is_not_what_it_says_is_refused(sent: bytes, error: str):
    a, b = socket.socketpair()
    with b:
        a.sendall(sent)
        a.close()
        with pytest.raises(protocol.ProtocolError, match=error):
            protocol.recv_reply(b, "output_bytes")
