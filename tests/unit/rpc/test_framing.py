from __future__ import annotations

import json

import pytest

from zocrates_wire.framing import NEED_DATA, FrameDecoder, FrameTooLarge, SendQueue, encode_message


def frames(decoder: FrameDecoder) -> list[object]:
    out = []
    while (ev := decoder.next_event()) is not NEED_DATA:
        out.append(ev)
    return out


def test_splits_on_newline_and_strips_one_cr() -> None:
    d = FrameDecoder()
    d.feed(b'{"a":1}\n{"b":2}\r\n{"c"')
    assert frames(d) == [b'{"a":1}', b'{"b":2}']
    d.feed(b":3}\n")
    assert frames(d) == [b'{"c":3}']


def test_byte_at_a_time_gives_the_same_frames() -> None:
    data = b'{"x":"\xe2\x80\xa8 line sep stays inside"}\n\n  \n{"y":[1,2]}\r\n'
    d = FrameDecoder()
    got = []
    for i in range(len(data)):
        d.feed(data[i : i + 1])
        got += frames(d)
    assert got == [b'{"x":"\xe2\x80\xa8 line sep stays inside"}', b'{"y":[1,2]}']


def test_unicode_line_separators_do_not_split() -> None:
    msg = {"text": "a\u2028b\u2029c\x1cd\x85e"}
    d = FrameDecoder()
    d.feed(encode_message(msg))
    (frame,) = frames(d)
    assert json.loads(frame) == msg


def test_oversize_line_is_reported_once_and_dropped_then_decoding_resumes() -> None:
    d = FrameDecoder(max_frame_bytes=100)
    d.feed(b"x" * 150)
    assert frames(d) == [FrameTooLarge(100)]
    d.feed(b"y" * 1000)  # still the same oversize line: dropped, no second error
    assert frames(d) == []
    d.feed(b'zzz\n{"ok":true}\n')
    assert frames(d) == [b'{"ok":true}']


def test_oversize_line_arriving_whole_is_reported() -> None:
    d = FrameDecoder(max_frame_bytes=10)
    d.feed(b"0123456789abc\n{}\n")
    assert frames(d) == [FrameTooLarge(10), b"{}"]


def test_a_frame_of_exactly_the_cap_passes() -> None:
    d = FrameDecoder(max_frame_bytes=10)
    d.feed(b"0123456789\n")
    assert frames(d) == [b"0123456789"]


def test_buffer_stays_bounded_while_discarding() -> None:
    d = FrameDecoder(max_frame_bytes=64)
    for _ in range(1000):
        d.feed(b"a" * 4096)
        frames(d)
        assert len(d._buf) <= 64 + 4096


def test_final_line_without_newline_is_a_frame_at_eof() -> None:
    d = FrameDecoder()
    d.feed(b'{"a":1}\n{"last":true}')
    assert frames(d) == [b'{"a":1}']
    d.feed_eof()
    assert frames(d) == [b'{"last":true}']
    with pytest.raises(RuntimeError):
        d.feed(b"more")


def test_encode_is_one_compact_line_even_for_lone_surrogates() -> None:
    line = encode_message({"a": "x\ny", "b": "\ud800"})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {"a": "x\ny", "b": "\ud800"}
    assert encode_message({"k": "é"}) == '{"k":"é"}\n'.encode()


def test_cap_counts_the_line_not_its_crlf_however_the_bytes_arrive() -> None:
    for split in range(1, 13):
        d = FrameDecoder(max_frame_bytes=10)
        data = b"0123456789\r\n"
        d.feed(data[:split])
        first = frames(d)
        d.feed(data[split:])
        assert first + frames(d) == [b"0123456789"], split


# --- SendQueue: what a connection's writer takes -------------------------------------------------


def test_a_write_takes_everything_queued_in_order_and_settles_its_tickets() -> None:
    q = SendQueue()
    assert not q.busy
    tickets = [q.push(b"a\n"), q.push(b"b\nc\n"), q.push(b"d\n")]
    assert tickets == [1, 2, 3] and len(q) == 3 and q.busy
    data, upto = q.take()
    assert data == b"a\nb\nc\nd\n" and upto == 3
    assert len(q) == 0 and q.busy  # taken, not yet written
    assert q.push(b"e\n") == 4  # queued while the write is on: the next write
    q.wrote(upto)
    assert q.written == 3 and q.busy
    assert q.take() == (b"e\n", 4)
    q.wrote(4)
    assert not q.busy


def test_a_push_is_withdrawn_only_until_a_write_takes_it() -> None:
    q = SendQueue()
    first, second, third = q.push(b"1\n"), q.push(b"2\n"), q.push(b"3\n")
    assert q.withdraw(second)
    assert not q.withdraw(second)  # once
    assert q.take() == (b"1\n3\n", third)
    assert not q.withdraw(first)  # on its way: it goes out whole
    q.wrote(third)
    assert q.written >= first and not q.busy


def test_clear_drops_everything_and_settles_every_ticket() -> None:
    q = SendQueue()
    q.push(b"1\n")
    q.take()
    last = q.push(b"2\n")
    q.clear()
    assert len(q) == 0 and not q.busy and q.written == last
