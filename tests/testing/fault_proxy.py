#!/usr/bin/env python3
"""An HTTP/1.1 reverse proxy that breaks a seeded fraction of requests.

Tests and the benchmark put it between Stoker and an object store (nginx or
s3rver, see object_stores.py) to check that reads retry and resume, and to add
network latency. Standard library only.

    fault_proxy.py --upstream=http://127.0.0.1:8080 --port=0 \
        --fail_rate=0.2 --seed=1 --faults=reset,503,truncate \
        --delay_ms=20 --stats_file=/tmp/proxy_stats.json

Prints "listening on port N" (and flushes) once it accepts connections, and
writes --port_file (port=N, atomically) if given.

Each client connection gets its own thread and its own keep-alive connection
to the upstream; response bodies are relayed in chunks of up to 1 MiB.
Requests are forwarded unchanged: the request line (as HTTP/1.1), every
header as received, Host included, so SigV4 signatures still verify
upstream, and the body (read whole first, framing included). The proxy
answers "Expect: 100-continue" itself and drops the upstream's 100 Continue.
Responses keep their status line and end-to-end headers; the proxy sets
their framing and Connection headers.

For every request a random.Random(seed) decides, under one lock and so in the
order the requests arrive, whether it fails (probability --fail_rate) and how
(uniformly among --faults):
  reset     close the client socket with RST (SO_LINGER 0), no response; the
            request never reaches the upstream.
  503       "503 Slow Down" with an S3 <Error><Code>SlowDown</Code> XML body;
            the connection stays open.
  429       "429 Too Many Requests" with an XML body; the connection stays open.
  truncate  forward, send the upstream's status and headers (with the full
            Content-Length) and half of the body, then close the connection.
  slow      forward, send the status and headers, sleep 1-2 s, then the body.
--delay_ms delays every request (faulted or not) before it is handled, each
connection on its own thread, so delays overlap.

--throttle_in_flight=K makes the proxy a store that throttles bursts, as S3
does: a request that arrives while K others are being handled is answered
at once with "503 Slow Down" (counted as faults["throttle"]; no delay, no
random draw), while --throttle_file exists (always, if not given). The
stats then also hold "in_flight" (requests being handled now) and
"peak_in_flight" (the most at once).

--stats_file is rewritten (write to a temporary file, then rename) when each
request is decided, before any byte of its response is sent, and again when
it is done:
  {"requests": N, "forwarded": N, "completed": N, "upstream_errors": N,
   "in_flight": N, "peak_in_flight": N,
   "faults": {"reset": n, "503": n, "429": n, "truncate": n, "slow": n,
              "throttle": n}}
requests counts every request received; forwarded those sent to the upstream
(normal, slow and truncate); completed those whose whole response reached the
client (normal and slow); upstream_errors those the upstream failed (answered
with 502).
"""

import argparse
import json
import os
import random
import socket
import socketserver
import struct
import sys
import threading
import time
import urllib.parse

FAULT_KINDS = ("reset", "503", "429", "truncate", "slow")
# Not drawn at random: the answer to a burst (--throttle_in_flight).
THROTTLE = "throttle"
CHUNK = 1 << 20
MAX_HEAD = 64 << 10
# Headers that belong to one connection, not to the request or response.
HOP_BY_HOP = frozenset((
    "connection", "keep-alive", "proxy-connection", "proxy-authenticate",
    "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade",
    "expect",
))
CLIENT_IDLE_TIMEOUT_S = 300
UPSTREAM_TIMEOUT_S = 120


class ClosedError(Exception):
    """The peer closed the connection (cleanly, between messages)."""


class Reader:
    """Buffered reads from a socket: heads line by line, bodies relayed."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise ClosedError()
        self.buf += data

    def read_head(self):
        """Returns the bytes up to and including the blank line."""
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end >= 0:
                head = bytes(self.buf[:end + 4])
                del self.buf[:end + 4]
                return head
            if len(self.buf) > MAX_HEAD:
                raise ValueError("header block too large")
            self._fill()

    def read_line(self):
        while True:
            end = self.buf.find(b"\r\n")
            if end >= 0:
                line = bytes(self.buf[:end + 2])
                del self.buf[:end + 2]
                return line
            if len(self.buf) > MAX_HEAD:
                raise ValueError("line too long")
            self._fill()

    def read_exact(self, n):
        while len(self.buf) < n:
            self._fill()
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def relay(self, n, dst, scratch):
        """Copies exactly n bytes to dst (a socket, or None to discard)."""
        if self.buf:
            k = min(n, len(self.buf))
            if dst is not None:
                dst.sendall(self.buf[:k])
            del self.buf[:k]
            n -= k
        view = memoryview(scratch)
        while n > 0:
            k = self.sock.recv_into(view[:min(n, len(scratch))])
            if k == 0:
                raise ClosedError()
            if dst is not None:
                dst.sendall(view[:k])
            n -= k

    def relay_to_close(self, dst, scratch):
        if self.buf:
            dst.sendall(self.buf)
            self.buf.clear()
        view = memoryview(scratch)
        while True:
            k = self.sock.recv_into(view)
            if k == 0:
                return
            dst.sendall(view[:k])

    def read_chunked_raw(self):
        """Reads a chunked body; returns it with its framing."""
        body = bytearray()
        while True:
            line = self.read_line()
            body += line
            size = int(line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                break
            body += self.read_exact(size + 2)
        while True:
            line = self.read_line()
            body += line
            if line == b"\r\n":
                return bytes(body)

    def relay_chunked(self, dst, scratch):
        """Copies a chunked body, framing included, to dst."""
        while True:
            line = self.read_line()
            if dst is not None:
                dst.sendall(line)
            size = int(line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                break
            self.relay(size + 2, dst, scratch)
        while True:  # trailers up to the blank line
            line = self.read_line()
            if dst is not None:
                dst.sendall(line)
            if line == b"\r\n":
                return


class Message:
    """A parsed request or response head."""

    def __init__(self, head):
        lines = head.decode("latin-1").split("\r\n")
        self.start = lines[0]
        self.parts = self.start.split(" ", 2)
        if len(self.parts) < 2:
            raise ValueError("bad start line %r" % self.start)
        self.headers = []
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep:
                raise ValueError("bad header line %r" % line)
            self.headers.append((name.strip(), value.strip()))

    def get(self, name):
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    def tokens(self, name):
        value = self.get(name) or ""
        return {t.strip().lower() for t in value.split(",") if t.strip()}

    def end_to_end(self):
        return [(k, v) for k, v in self.headers
                if k.lower() not in HOP_BY_HOP and k.lower() != "content-length"]

    def body_kind(self):
        """("chunked", None), ("length", n), or ("none", 0)."""
        if "chunked" in self.tokens("transfer-encoding"):
            return "chunked", None
        length = self.get("content-length")
        if length is not None:
            return "length", int(length)
        return "none", 0


def encode_head(start, headers):
    lines = [start] + ["%s: %s" % (k, v) for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def error_response(status, reason, code, message, keep_alive):
    body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code>"
            "<Message>%s</Message><RequestId>fault-proxy</RequestId></Error>"
            % (code, message)).encode()
    headers = [("Content-Type", "application/xml"),
               ("Content-Length", str(len(body)))]
    if not keep_alive:
        headers.append(("Connection", "close"))
    return encode_head("HTTP/1.1 %d %s" % (status, reason), headers) + body


class State:
    """Shared by all connections: the seeded decisions and the counters."""

    def __init__(self, args):
        self.fail_rate = args.fail_rate
        self.faults = args.faults
        self.delay_s = args.delay_ms / 1000.0
        self.stats_file = args.stats_file
        upstream = urllib.parse.urlsplit(args.upstream)
        if upstream.scheme != "http" or not upstream.hostname:
            raise SystemExit("--upstream must be http://host:port, got %r"
                             % args.upstream)
        self.upstream = (upstream.hostname, upstream.port or 80)
        self.mu = threading.Lock()
        self.rng = random.Random(args.seed)
        self.throttle_in_flight = args.throttle_in_flight
        self.throttle_file = args.throttle_file
        self.stats = {"requests": 0, "forwarded": 0, "completed": 0,
                      "upstream_errors": 0, "in_flight": 0,
                      "peak_in_flight": 0,
                      "faults": {k: 0 for k in FAULT_KINDS + (THROTTLE,)}}
        self._write_stats_locked()

    def throttling(self):
        return self.throttle_in_flight > 0 and (
            not self.throttle_file or os.path.exists(self.throttle_file))

    def decide(self):
        """Returns (fault kind or None, slow sleep in seconds). The request
        counts as in flight until done() is called."""
        with self.mu:
            self.stats["requests"] += 1
            in_flight = self.stats["in_flight"]
            self.stats["in_flight"] = in_flight + 1
            self.stats["peak_in_flight"] = max(self.stats["peak_in_flight"],
                                               in_flight + 1)
            fault, sleep_s = None, 0.0
            if in_flight >= self.throttle_in_flight > 0 and self.throttling():
                self.stats["faults"][THROTTLE] += 1
                self._write_stats_locked()
                return THROTTLE, 0.0
            if self.fail_rate > 0 and self.rng.random() < self.fail_rate:
                fault = self.rng.choice(self.faults)
                if fault == "slow":
                    sleep_s = self.rng.uniform(1.0, 2.0)
                self.stats["faults"][fault] += 1
            if fault in (None, "truncate", "slow"):
                self.stats["forwarded"] += 1
            self._write_stats_locked()
            return fault, sleep_s

    def done(self):
        with self.mu:
            self.stats["in_flight"] -= 1
            self._write_stats_locked()

    def count(self, key):
        with self.mu:
            self.stats[key] += 1
            self._write_stats_locked()

    def _write_stats_locked(self):
        if not self.stats_file:
            return
        tmp = self.stats_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.stats, f)
        os.replace(tmp, self.stats_file)


class Upstream:
    """One keep-alive connection to the upstream, reopened when needed."""

    def __init__(self, address):
        self.address = address
        self.sock = None
        self.reader = None
        self.reused = False

    def connect(self):
        self.close()
        self.sock = socket.create_connection(self.address, UPSTREAM_TIMEOUT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = Reader(self.sock)
        self.reused = False

    def close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None
        self.reader = None

    def exchange(self, head, body):
        """Sends a request and returns the final response head (a Message).

        A request on a reused connection that the upstream had closed is sent
        again once on a new connection (nothing of it was answered)."""
        for attempt in range(2):
            if self.sock is None:
                self.connect()
            reused = self.reused
            try:
                self.sock.sendall(head + body if len(body) < CHUNK else head)
                if len(body) >= CHUNK:
                    self.sock.sendall(body)
                while True:
                    response = Message(self.reader.read_head())
                    status = int(response.parts[1])
                    if 100 <= status < 200:
                        continue  # interim (100 Continue): not forwarded
                    self.reused = True
                    return response
            except (ClosedError, ConnectionError):
                self.close()
                if not reused or attempt == 1:
                    raise


class Handler(socketserver.BaseRequestHandler):
    """One client connection: requests in order, each forwarded or broken."""

    def handle(self):
        state = self.server.state
        client = self.request
        client.settimeout(CLIENT_IDLE_TIMEOUT_S)
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = Reader(client)
        upstream = Upstream(state.upstream)
        scratch = bytearray(CHUNK)
        try:
            while self._one_request(state, client, reader, upstream, scratch):
                pass
        except (ClosedError, ConnectionError, socket.timeout, ValueError):
            pass
        finally:
            upstream.close()

    def _one_request(self, state, client, reader, upstream, scratch):
        """Handles one request; returns whether the connection stays open."""
        try:
            request = Message(reader.read_head())
        except ClosedError:
            return False
        try:
            return self._answer(state, client, reader, upstream, scratch,
                                request)
        finally:
            state.done()

    def _answer(self, state, client, reader, upstream, scratch, request):
        """Answers `request` (forwarded or broken); returns whether the
        connection stays open."""
        method = request.parts[0].upper()
        version = request.parts[2] if len(request.parts) > 2 else "HTTP/1.0"
        connection = request.tokens("connection")
        keep_alive = ("close" not in connection and
                      (version == "HTTP/1.1" or "keep-alive" in connection))

        fault, slow_s = state.decide()
        if state.delay_s > 0 and fault != THROTTLE:
            time.sleep(state.delay_s)

        if fault == "reset":
            # Linger 0: close() sends RST instead of FIN. Closed here, as the
            # server's own shutdown(SHUT_WR) would send a FIN first.
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                              struct.pack("ii", 1, 0))
            client.close()
            return False

        # Read the whole request body as sent (test bodies are small), so
        # that it can be sent again on a fresh upstream connection.
        if "100-continue" in request.tokens("expect"):
            client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        kind, length = request.body_kind()
        if kind == "chunked":
            body = reader.read_chunked_raw()
        elif kind == "length":
            body = reader.read_exact(length)
        else:
            body = b""

        if fault in ("503", THROTTLE):
            client.sendall(error_response(
                503, "Slow Down", "SlowDown",
                "Please reduce your request rate.", keep_alive))
            return keep_alive
        if fault == "429":
            client.sendall(error_response(
                429, "Too Many Requests", "TooManyRequests",
                "Too many requests.", keep_alive))
            return keep_alive

        # Every header as received (a signature may cover any of them); the
        # upstream's 100 Continue, if any, is skipped.
        out_head = encode_head(
            "%s %s HTTP/1.1" % (request.parts[0], request.parts[1]),
            request.headers)
        try:
            response = upstream.exchange(out_head, body)
        except (ClosedError, OSError, ValueError) as e:
            upstream.close()
            state.count("upstream_errors")
            client.sendall(error_response(
                502, "Bad Gateway", "BadGateway",
                "fault_proxy: upstream failed: %s" % e, keep_alive))
            return keep_alive

        status = int(response.parts[1])
        upstream_keep_alive = "close" not in response.tokens("connection")
        if method == "HEAD" or status in (204, 304):
            body_kind, body_length = "length", 0
            send_length = response.get("content-length")
        else:
            body_kind, body_length = response.body_kind()
            send_length = body_length
            if body_kind == "none":
                body_kind = "close"
                keep_alive = False
        headers = response.end_to_end()
        if body_kind == "chunked":
            headers.append(("Transfer-Encoding", "chunked"))
        elif send_length is not None and body_kind != "close":
            headers.append(("Content-Length", str(send_length)))
        if not keep_alive:
            headers.append(("Connection", "close"))
        client.sendall(encode_head(response.start, headers))

        if fault == "truncate":
            if body_kind in ("length", "close") and body_length:
                upstream.reader.relay(body_length // 2, client, scratch)
            upstream.close()
            client.shutdown(socket.SHUT_WR)
            return False
        if fault == "slow":
            time.sleep(slow_s)

        if body_kind == "length":
            upstream.reader.relay(body_length, client, scratch)
        elif body_kind == "chunked":
            upstream.reader.relay_chunked(client, scratch)
        else:
            upstream.reader.relay_to_close(client, scratch)
            upstream_keep_alive = False
        if not upstream_keep_alive:
            upstream.close()
        state.count("completed")
        return keep_alive


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0,
                        help="port on 127.0.0.1 to listen on; 0 picks one")
    parser.add_argument("--port_file", default="",
                        help="if set, written atomically with the line "
                             "port=N once listening")
    parser.add_argument("--upstream", required=True,
                        help="http://host:port to forward to")
    parser.add_argument("--throttle_in_flight", type=int, default=0,
                        help="Answer 503 SlowDown to a request arriving "
                        "while this many are being handled (0: never).")
    parser.add_argument("--throttle_file", default="",
                        help="Throttle only while this file exists.")
    parser.add_argument("--fail_rate", type=float, default=0.0,
                        help="fraction of requests to break, 0 to 1")
    parser.add_argument("--seed", type=int, default=1,
                        help="seed of the random choices")
    parser.add_argument("--faults", default=",".join(FAULT_KINDS),
                        help="comma-separated kinds to choose from: "
                             + ",".join(FAULT_KINDS))
    parser.add_argument("--delay_ms", type=float, default=0.0,
                        help="milliseconds added to every request")
    parser.add_argument("--stats_file", default="",
                        help="JSON counters, rewritten after each request")
    args = parser.parse_args(argv)
    args.faults = [f for f in args.faults.split(",") if f]
    unknown = [f for f in args.faults if f not in FAULT_KINDS]
    if unknown or not args.faults:
        parser.error("--faults takes a non-empty list of %s; got %r"
                     % (",".join(FAULT_KINDS), ",".join(args.faults)))
    if not 0.0 <= args.fail_rate <= 1.0:
        parser.error("--fail_rate must be between 0 and 1")
    if args.delay_ms < 0:
        parser.error("--delay_ms must not be negative")
    return args


def main(argv):
    args = parse_args(argv)
    server = Server(("127.0.0.1", args.port), Handler)
    server.state = State(args)
    print("listening on port %d" % server.server_address[1], flush=True)
    if args.port_file:
        temp = "%s.tmp.%d" % (args.port_file, os.getpid())
        with open(temp, "w") as f:
            f.write("port=%d\n" % server.server_address[1])
        os.rename(temp, args.port_file)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
