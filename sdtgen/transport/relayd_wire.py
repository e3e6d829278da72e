"""lttng-relayd's consumer protocol on the wire (lttng-tools 2.13, src/common/sessiond-comm/relayd.h): the packed
big-endian structs lttng-consumerd sends on its control and data sockets, and the replies the relay daemon gives.

Only the forms a 2.11+ peer uses are here (the length-prefixed CREATE_SESSION and ADD_STREAM, trace chunks, the
80-byte index with stream_instance_id and packet_seq_num): sdtgen announces 2.13 and refuses a relay daemon that
cannot speak 2.11. Every struct is packed, so a struct.Struct with ">" (no padding) is its exact layout.
"""

from __future__ import annotations

import struct

MAJOR, MINOR = 2, 13  # what sdtgen announces (RELAYD_VERSION)
MIN_MINOR = 11  # the oldest minor whose forms sdtgen sends

# enum lttcomm_relayd_command (src/common/sessiond-comm/sessiond-comm.h)
ADD_STREAM = 1
CREATE_SESSION = 2
VERSION = 5
SEND_METADATA = 6
CLOSE_STREAM = 7
SEND_INDEX = 13
STREAMS_SENT = 16
CREATE_TRACE_CHUNK = 19
CLOSE_TRACE_CHUNK = 20
NAMES = {ADD_STREAM: "ADD_STREAM", CREATE_SESSION: "CREATE_SESSION", VERSION: "VERSION",
         SEND_METADATA: "SEND_METADATA", CLOSE_STREAM: "CLOSE_STREAM", SEND_INDEX: "SEND_INDEX",
         STREAMS_SENT: "STREAMS_SENT", CREATE_TRACE_CHUNK: "CREATE_TRACE_CHUNK",
         CLOSE_TRACE_CHUNK: "CLOSE_TRACE_CHUNK"}

LTTNG_OK = 10  # every reply's ret_code when the command was carried out (include/lttng/lttng-error.h)
CHUNK_NO_OPERATION = 1  # CLOSE_TRACE_CHUNK's command: the chunk stays where it is (no rotation to archives/)
NO_SEQ = (1 << 64) - 1  # CLOSE_STREAM's last net_seq_num of a stream that sent no packet (the metadata's)

HEADER = struct.Struct(">QQII")  # lttcomm_relayd_hdr: circuit_id, data_size, cmd, cmd_version
DATA_HEADER = struct.Struct(">QQQII")  # lttcomm_relayd_data_hdr: circuit_id, stream_id, net_seq_num, size, padding
VERSION_BODY = struct.Struct(">II")  # major, minor: sent, and the relay daemon's own in reply
# lttcomm_relayd_create_session_2_11: the three names' lengths (NUL included), live_timer (us), snapshot,
# session_name_contains_creation_time, sessiond_uuid, session_id, creation_time, current_chunk_id (optional: unset)
CREATE_SESSION_BODY = struct.Struct(">IIIIBB16sQQBQ")
CREATE_SESSION_REPLY = struct.Struct(">QII")  # relay_session_id, ret_code, output_path_length (then the path)
CREATE_CHUNK_BODY = struct.Struct(">QQI")  # chunk_id, creation_timestamp, override_name_length (0: none)
ADD_STREAM_BODY = struct.Struct(">IIQQQ")  # channel_name_len, pathname_len, tracefile_size, tracefile_count, chunk
STATUS_STREAM = struct.Struct(">QI")  # handle (the relay's stream id), ret_code
GENERIC_REPLY = struct.Struct(">I")  # ret_code
METADATA_BODY = struct.Struct(">QI")  # stream_id (the metadata stream's handle), padding_size; then the text
# lttcomm_relayd_index (2.8+): relay_stream_id, net_seq_num, packet_size (bits), content_size (bits),
# timestamp_begin, timestamp_end, events_discarded, stream_id (the CTF stream class), stream_instance_id,
# packet_seq_num
INDEX_BODY = struct.Struct(">10Q")
CLOSE_STREAM_BODY = struct.Struct(">QQ")  # stream_id, last_net_seq_num
CLOSE_CHUNK_BODY = struct.Struct(">QQBI")  # chunk_id, close_timestamp, close_command (optional, packed)
CLOSE_CHUNK_REPLY = struct.Struct(">II")  # ret_code, path_length (the path follows only when ret_code is LTTNG_OK)

MAX_PATH = 4096  # the most bytes of a path a reply may say it carries (PATH_MAX): more is a protocol error
MAX_NAME = 255  # LTTNG_NAME_MAX: a session name, hostname or pathname, NUL excluded


def request(cmd: int, body: bytes = b"") -> bytes:
    """A control command: its header and body, sent back to back."""
    return HEADER.pack(0, len(body), cmd, 0) + body


def _names(*names: str) -> tuple[list[int], bytes]:
    raw = [n.encode() + b"\0" for n in names]
    return [len(r) for r in raw], b"".join(raw)


def create_session(name: str, hostname: str, live_timer_us: int, uuid: bytes, session_id: int,
                   creation_time: int) -> bytes:
    """CREATE_SESSION (2.11 form) of a live session (no snapshot, no base path: the relay daemon names its
    directory HOSTNAME/NAME-DATE), its current chunk unset (a chunk is created next, once)."""
    (n, h, b), text = _names(name, hostname, "")
    return request(CREATE_SESSION, CREATE_SESSION_BODY.pack(n, h, b, live_timer_us, 0, 0, uuid, session_id,
                                                            creation_time, 0, 0) + text)


def create_chunk(chunk_id: int, now: int) -> bytes:
    return request(CREATE_TRACE_CHUNK, CREATE_CHUNK_BODY.pack(chunk_id, now, 0))


def add_stream(channel: str, pathname: str, chunk_id: int) -> bytes:
    """ADD_STREAM (2.11 form): one unbounded file ``pathname/channel`` (the channel ``metadata`` is the metadata's)."""
    (c, p), text = _names(channel, pathname)
    return request(ADD_STREAM, ADD_STREAM_BODY.pack(c, p, 0, 0, chunk_id) + text)


def metadata(handle: int, text: bytes) -> bytes:
    return request(SEND_METADATA, METADATA_BODY.pack(handle, 0) + text)


def index(handle: int, net_seq: int, packet_bits: int, content_bits: int, begin: int, end: int, discarded: int,
          stream_class: int, instance: int, seq: int) -> bytes:
    return request(SEND_INDEX, INDEX_BODY.pack(handle, net_seq, packet_bits, content_bits, begin, end, discarded,
                                               stream_class, instance, seq))


def beacon(handle: int, net_seq: int, end: int, stream_class: int) -> bytes:
    """A live beacon: SEND_INDEX with packet_size 0, saying the stream has no event before ``end`` (its clock's
    cycles); every other field zero but the stream class, as lttng's live timer sends it."""
    return index(handle, net_seq, 0, 0, 0, end, 0, stream_class, 0, 0)


def close_stream(handle: int, last_net_seq: int) -> bytes:
    return request(CLOSE_STREAM, CLOSE_STREAM_BODY.pack(handle, last_net_seq))


def close_chunk(chunk_id: int, now: int) -> bytes:
    return request(CLOSE_TRACE_CHUNK, CLOSE_CHUNK_BODY.pack(chunk_id, now, 1, CHUNK_NO_OPERATION))


def data_header(handle: int, net_seq: int, size: int, padding: int) -> bytes:
    return DATA_HEADER.pack(0, handle, net_seq, size, padding)
