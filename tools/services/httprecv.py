#!/usr/bin/env python3
"""A webhook receiver for the tests of the HTTP sink (standard library only).

    httprecv.py --port P --dir DIR [--max-body BYTES] [--tls-cert PEM --tls-key PEM
                [--tls-ca PEM]] [--auth-file FILE]

Every POST to a path that does not start with "/_" is a delivery. Unless a
rule says otherwise, it is appended to that path's log in DIR and the log is
fsync'ed, and only then answered 200: what was acknowledged survives a stop
or a crash of the receiver. A body over --max-body (default 1 MiB) is read,
dropped and answered 413. With --tls-cert and --tls-key it serves HTTPS;
with --tls-ca too, only to clients presenting a certificate that CA signed
(the handshake fails without one).

With --auth-file, a file holding "user:password", every request but the
inspection protocol's and GET /_health (deliveries and /_control alike)
must carry that user and password as HTTP basic authentication, or is
answered 401 with WWW-Authenticate: Basic and stores nothing. The file is
read again on each such request, so a test changes the password by
writing the file anew (write another and rename it over, so no request
reads it half-written); without a readable "user:password" line every
request is refused. The inspection protocol stays open, so the tests read
back the same way in every mode.

The inspection protocol (what the sink's reader speaks):

  GET /_received?path=P[&from=N][&limit=M][&wait=MS]
      the stored deliveries to path P from the N-th (0-based), at most M
      (default 1000); when there are none yet, waits up to MS ms for one.
      200, header X-Outbox-Total: how many P holds; the body is the
      records one after another, each
          "<head_len> <body_len>\\n" HEAD BODY
      HEAD is the request as it came: the request line and header lines,
      each ending in CRLF, then an empty line; BODY is the body's bytes.
  DELETE /_received?path=P      forget what P holds (204)
  GET /_health                  200 once the receiver serves

Misbehaving, for the tests: POST /_control with a JSON object
  {"clear": true}               drop every rule (and restore max_body)
  {"max_body": BYTES}           change the size limit
  {"rule": {...}}               add a rule, which applies to the next
                                deliveries (to "path" only, when given):
      "count": N        only to the next N matching deliveries (default: all)
      "sleep_ms": MS    wait before answering
      "status": CODE    answer CODE (and store nothing), with "body" and
                        "retry_after" (a Retry-After header) when given
      "drop": true      close the connection without an answer
The first rule that matches a delivery applies to it.
"""
import argparse
import base64
import hashlib
import hmac
import json
import os
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class Log:
    """One path's deliveries: an append-only file and the records' offsets."""

    def __init__(self, filename):
        self.filename = filename
        self.index = []  # (offset, total length) of each record
        self.lock = threading.Lock()
        self.grown = threading.Condition(self.lock)
        self.f = open(filename, "a+b")
        self._load()

    def _load(self):
        self.f.seek(0)
        data = self.f.read()
        pos = 0
        while True:
            nl = data.find(b"\n", pos)
            if nl < 0:
                break
            try:
                head_len, body_len = (int(x) for x in data[pos:nl].split())
            except ValueError:
                break
            end = nl + 1 + head_len + body_len
            if end > len(data):
                break
            self.index.append((pos, end - pos))
            pos = end
        if pos < len(data):  # a record torn by a crash was never acknowledged
            self.f.truncate(pos)
        self.f.seek(0, os.SEEK_END)

    def append(self, head, body):
        record = b"%d %d\n" % (len(head), len(body)) + head + body
        with self.lock:
            offset = self.f.tell()
            self.f.write(record)
            self.f.flush()
            fd = self.f.fileno()
            self.index.append((offset, len(record)))
            self.grown.notify_all()
        # Outside the lock, so concurrent deliveries share the disk's flushes.
        os.fsync(fd)

    def read(self, start, limit, wait_s):
        with self.lock:
            if start >= len(self.index) and wait_s > 0:
                self.grown.wait_for(lambda: len(self.index) > start, timeout=wait_s)
            total = len(self.index)
            picked = self.index[start:start + limit]
            if not picked:
                return total, b""
            self.f.flush()
            with open(self.filename, "rb") as r:
                r.seek(picked[0][0])
                return total, r.read(picked[-1][0] + picked[-1][1] - picked[0][0])

    def clear(self):
        with self.lock:
            self.f.truncate(0)
            self.f.seek(0)
            self.index = []
            os.fsync(self.f.fileno())


class State:
    def __init__(self, directory, max_body, auth_file=None):
        self.dir = directory
        self.auth_file = auth_file
        self.default_max_body = max_body
        self.max_body = max_body
        self.rules = []
        self.logs = {}
        self.lock = threading.Lock()

    def log(self, path):
        with self.lock:
            if path not in self.logs:
                name = hashlib.sha256(path.encode()).hexdigest()[:32]
                filename = os.path.join(self.dir, "log-" + name)
                if not os.path.exists(filename):  # which file is whose, for a person looking
                    with open(os.path.join(self.dir, "paths"), "a") as f:
                        f.write("%s %s\n" % (name, path))
                self.logs[path] = Log(filename)
            return self.logs[path]

    def credentials(self):
        """b"user:password" from the auth file, or None when unreadable."""
        try:
            with open(self.auth_file, "rb") as f:
                line = f.readline().rstrip(b"\r\n")
        except OSError:
            return None
        return line if b":" in line else None

    def authorized(self, header):
        """Whether an Authorization header value carries the auth file's
        user and password (always, without an auth file)."""
        if self.auth_file is None:
            return True
        want = self.credentials()
        scheme, _, token = (header or "").partition(" ")
        if want is None or scheme.lower() != "basic":
            return False
        try:
            got = base64.b64decode(token.strip(), validate=True)
        except ValueError:
            return False
        return hmac.compare_digest(got, want)

    def rule_for(self, path):
        with self.lock:
            for rule in self.rules:
                if rule.get("path", path) != path:
                    continue
                if "count" in rule:
                    if rule["count"] <= 0:
                        continue
                    rule["count"] -= 1
                return dict(rule)
        return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    state = None

    def setup(self):
        super().setup()
        # The status line and headers go out before the body: without this,
        # Nagle's algorithm holds the body until the client's delayed ACK.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):
        pass

    def handle(self):
        if self.handshake():
            super().handle()

    def handshake(self):
        """The TLS handshake, here in the connection's thread rather than
        in the accepting one, where a client that stalls would hold up
        every other. When it fails (the client refused our certificate, or
        sent none where one is required), the alert OpenSSL wrote is
        followed by an orderly close: the socket is drained until the
        client hangs up, so the client reads the alert instead of a reset
        (closing with its request unread would send an RST first, and
        libcurl would then report whatever broke, not the alert)."""
        sock = self.connection
        if not isinstance(sock, ssl.SSLSocket):
            return True
        try:
            sock.settimeout(10)
            sock.do_handshake()
            sock.settimeout(None)
            return True
        except OSError:  # ssl.SSLError included
            pass
        try:
            socket.socket.shutdown(sock, socket.SHUT_WR)
            sock.settimeout(2)
            while socket.socket.recv(sock, 65536):
                pass
        except OSError:
            pass
        return False

    def answer(self, code, body=b"", headers=()):
        self.send_response(code)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_body(self, limit):
        """The body, or None when it is over limit (then read and dropped)."""
        n = int(self.headers.get("Content-Length") or 0)
        if n <= limit:
            return self.rfile.read(n)
        while n > 0:
            n -= len(self.rfile.read(min(n, 1 << 20)) or b"x" * n)
        return None

    def refused(self):
        """With an auth file, answers 401 to a request without its
        credentials (its body read and dropped, so the connection stays
        usable) and returns True."""
        if self.state.authorized(self.headers.get("Authorization")):
            return False
        self.read_body(0)
        self.answer(401, b"authentication required\n", [("WWW-Authenticate", 'Basic realm="outbox"')])
        return True

    def do_GET(self):
        url = urlsplit(self.path)
        q = parse_qs(url.query)
        if url.path == "/_health":
            return self.answer(200, b"ok\n")
        if url.path != "/_received" and self.refused():
            return
        if url.path != "/_received" or "path" not in q:
            return self.answer(404, b"unknown\n")
        start = int(q.get("from", ["0"])[0])
        limit = int(q.get("limit", ["1000"])[0])
        wait_s = int(q.get("wait", ["0"])[0]) / 1000.0
        total, data = self.state.log(q["path"][0]).read(start, limit, wait_s)
        self.answer(200, data, [("Content-Type", "application/x-outbox-records"),
                                ("X-Outbox-Total", str(total))])

    def do_DELETE(self):
        url = urlsplit(self.path)
        q = parse_qs(url.query)
        if url.path != "/_received" or "path" not in q:
            return self.answer(404, b"unknown\n")
        self.state.log(q["path"][0]).clear()
        self.answer(204)

    def do_POST(self):
        url = urlsplit(self.path)
        st = self.state
        if self.refused():
            return
        if url.path == "/_control":
            cmd = json.loads(self.read_body(1 << 20) or b"{}")
            with st.lock:
                if cmd.get("clear"):
                    st.rules = []
                    st.max_body = st.default_max_body
                if "max_body" in cmd:
                    st.max_body = int(cmd["max_body"])
                if "rule" in cmd:
                    st.rules.append(dict(cmd["rule"]))
            return self.answer(200, b"ok\n")
        if url.path.startswith("/_"):
            self.read_body(st.max_body)
            return self.answer(404, b"unknown\n")
        body = self.read_body(st.max_body)
        if body is None:
            return self.answer(413, b"body over %d bytes\n" % st.max_body)
        rule = st.rule_for(url.path)
        if rule:
            if rule.get("sleep_ms"):
                time.sleep(rule["sleep_ms"] / 1000.0)
            if rule.get("drop"):
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if rule.get("status"):
                headers = [("Retry-After", str(rule["retry_after"]))] if "retry_after" in rule else []
                text = rule.get("body", "refused by rule").encode()
                return self.answer(int(rule["status"]), text, headers)
        head = self.requestline.encode("latin-1") + b"\r\n"
        for name, value in self.headers.items():
            head += ("%s: %s\r\n" % (name, value)).encode("latin-1")
        st.log(url.path).append(head + b"\r\n", body)
        self.answer(200, b"stored\n")


def main():
    ap = argparse.ArgumentParser(description="webhook receiver for the HTTP sink's tests")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--max-body", type=int, default=1 << 20)
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    ap.add_argument("--tls-ca")
    ap.add_argument("--auth-file")
    args = ap.parse_args()
    if args.tls_ca and not args.tls_cert:
        ap.error("--tls-ca needs --tls-cert and --tls-key")
    os.makedirs(args.dir, exist_ok=True)
    Handler.state = State(args.dir, args.max_body, args.auth_file)
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.allow_reuse_address = True
    ThreadingHTTPServer.request_queue_size = 128
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    if args.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        if args.tls_ca:
            ctx.load_verify_locations(args.tls_ca)
            ctx.verify_mode = ssl.CERT_REQUIRED
        server.socket = ctx.wrap_socket(server.socket, server_side=True,
                                        do_handshake_on_connect=False)
    print("httprecv listening on 127.0.0.1:%d" % args.port, flush=True)
    try:
        server.serve_forever()
    finally:
        sys.stdout.flush()


if __name__ == "__main__":
    main()
