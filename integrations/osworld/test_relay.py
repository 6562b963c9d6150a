"""Tests of the relay against a local http.server standing in for the worker.

Run: cd integrations/osworld && python3 -m unittest test_relay -v
"""

import http.client
import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from desktop_env.providers.openbot.relay import Relay  # noqa: E402

TOKEN = "worker-token-sekrit"
CAP = "cap-sekrit"


class FakeWorker(http.server.ThreadingHTTPServer):
    """Records each request; echoes plain ones; a websocket upgrade gets 101
    and then upper-cases what it reads, after sending a greeting of its own."""

    daemon_threads = True

    def __init__(self, tls=None):
        self.requests = []
        super().__init__(("127.0.0.1", 0), Handler)
        self.scheme = "http"
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)
            self.scheme = "https"
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self):
        return "%s://127.0.0.1:%d" % (self.scheme, self.server_address[1])


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _record(self, body=b""):
        self.server.requests.append({"method": self.command, "path": self.path,
                                     "headers": {k.lower(): v for k, v in self.headers.items()},
                                     "header_list": list(self.headers.items()), "body": body})

    def do_GET(self):
        if self.headers.get("Upgrade", "").lower() == "websocket":
            self._record()
            self.send_response(101, "Switching Protocols")
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", "accept-" + self.headers.get("Sec-WebSocket-Key", ""))
            self.end_headers()
            self.wfile.flush()
            conn = self.connection
            conn.sendall(b"hello from the worker")
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                conn.sendall(data.upper())
            self.close_connection = True
            return
        self._record()
        self._reply(200, b"\x89PNG\r\n\x1a\n" + b"x" * 100000, "image/png")

    def do_HEAD(self):
        self._record()
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", "8")
        self.end_headers()

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        self._record(body)
        if self.path.endswith("/file"):
            self._reply(404, json.dumps({"error": "File not found"}).encode(), "application/json")
            return
        self._reply(200, json.dumps({"got": len(body)}).encode(), "application/json")

    def _reply(self, status, body, ctype):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def raw_request(port, data, read_all=True):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(data)
    if not read_all:
        return s
    out = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    s.close()
    return out


class RelayTest(unittest.TestCase):
    tls = None  # the fake worker's server context (TLSRelayTest)

    def setUp(self):
        self.worker = FakeWorker(self.tls)
        self.relay = Relay(self.worker.url, "c_123", "osworld", TOKEN, CAP).start()
        self.addCleanup(self.worker.server_close)
        self.addCleanup(self.worker.shutdown)
        self.addCleanup(self.relay.stop)

    def conn(self, port=None):
        c = http.client.HTTPConnection("127.0.0.1", port or self.relay.server_port, timeout=10)
        self.addCleanup(c.close)
        return c

    def test_guest_requests_are_rewritten_with_both_credentials(self):
        c = self.conn()
        c.request("GET", "/screenshot", headers={"Authorization": "Bearer someone-elses", "X-Computer-Capability": "other"})
        r = c.getresponse()
        body = r.read()
        self.assertEqual(r.status, 200)
        self.assertTrue(body.startswith(b"\x89PNG\r\n\x1a\n"))
        self.assertEqual(len(body), 100008)
        self.assertEqual(r.getheader("Connection"), "close")
        req = self.worker.requests[0]
        self.assertEqual(req["path"], "/v1/computers/c_123/bots/osworld/osworld/screenshot")
        self.assertEqual(req["headers"]["authorization"], "Bearer " + TOKEN)
        self.assertEqual(req["headers"]["x-computer-capability"], CAP)
        self.assertEqual(req["headers"]["host"], "127.0.0.1:%d" % self.worker.server_address[1])
        self.assertEqual(req["headers"]["connection"], "close")
        # Exactly one of each credential: the client's were dropped.
        names = [k.lower() for k, _ in req["header_list"]]
        self.assertEqual((names.count("authorization"), names.count("x-computer-capability")), (1, 1))

    def test_bodies_and_answers_are_copied_byte_for_byte(self):
        boundary = "0123456789abcdef0123456789abcdef"
        data = bytes(range(256)) * 1000
        body = ("--%s\r\nContent-Disposition: form-data; name=\"file_path\"\r\n\r\n~/a.bin\r\n"
                "--%s\r\nContent-Disposition: form-data; name=\"file_data\"; filename=\"a.bin\"\r\n\r\n"
                % (boundary, boundary)).encode() + data + ("\r\n--%s--\r\n" % boundary).encode()
        c = self.conn()
        c.request("POST", "/setup/upload?x=1", body=body,
                  headers={"Content-Type": "multipart/form-data; boundary=" + boundary})
        r = c.getresponse()
        self.assertEqual((r.status, json.loads(r.read())), (200, {"got": len(body)}))
        req = self.worker.requests[0]
        self.assertEqual(req["path"], "/v1/computers/c_123/bots/osworld/osworld/setup/upload?x=1")
        self.assertEqual(req["body"], body)
        self.assertEqual(req["headers"]["content-type"], "multipart/form-data; boundary=" + boundary)

    def test_an_error_answer_passes_through(self):
        c = self.conn()
        c.request("POST", "/file", body="file_path=%7E%2Fnone", headers={"Content-Type": "application/x-www-form-urlencoded"})
        r = c.getresponse()
        self.assertEqual((r.status, json.loads(r.read())), (404, {"error": "File not found"}))
        self.assertEqual(self.worker.requests[0]["body"], b"file_path=%7E%2Fnone")

    def test_head_and_keep_alive_clients(self):
        c = self.conn()
        c.request("HEAD", "/screenshot")
        r = c.getresponse()
        r.read()
        self.assertEqual(r.status, 200)
        c.request("GET", "/terminal")  # http.client reconnects after Connection: close
        self.assertEqual(c.getresponse().status, 200)
        self.assertEqual([q["method"] for q in self.worker.requests], ["HEAD", "GET"])

    def test_a_screen_is_added_to_the_query(self):
        relay = Relay(self.worker.url + "/base/", "c_1", "b", TOKEN, CAP, screen="b-2").start()
        self.addCleanup(relay.stop)
        c = self.conn(relay.server_port)
        c.request("GET", "/accessibility?a=b")
        c.getresponse().read()
        self.assertEqual(self.worker.requests[0]["path"], "/base/v1/computers/c_1/bots/b/osworld/accessibility?a=b&screen=b-2")

    def test_web_pages_are_refused(self):
        for port in (self.relay.server_port, self.relay.chromium_port):
            out = raw_request(port, b"GET /screenshot HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\n\r\n")
            self.assertTrue(out.startswith(b"HTTP/1.1 403 "), out[:40])
            out = raw_request(port, b"GET /json/version HTTP/1.1\r\nHost: evil.example:%d\r\n\r\n" % port)
            self.assertTrue(out.startswith(b"HTTP/1.1 403 "), out[:40])
        self.assertEqual(self.worker.requests, [])

    def test_a_worker_that_does_not_answer_is_502_json(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        relay = Relay("http://127.0.0.1:%d" % port, "c_1", "b", TOKEN, CAP).start()
        self.addCleanup(relay.stop)
        c = self.conn(relay.server_port)
        c.request("GET", "/screenshot")
        r = c.getresponse()
        body = r.read()
        self.assertEqual(r.status, 502)
        self.assertEqual(json.loads(body)["status"], "error")
        self.assertNotIn(TOKEN.encode(), body)
        self.assertNotIn(CAP.encode(), body)
        self.assertNotIn(TOKEN, repr(relay))

    def test_json_version(self):
        for path in ("/json/version", "/json/version/"):
            c = self.conn(self.relay.chromium_port)
            c.request("GET", path)
            r = c.getresponse()
            self.assertEqual(r.status, 200)
            self.assertEqual(json.loads(r.read()), {
                "Browser": "open-bot", "Protocol-Version": "1.3",
                "webSocketDebuggerUrl": "ws://127.0.0.1:%d/devtools/browser/openbot" % self.relay.chromium_port})
        c = self.conn(self.relay.chromium_port)
        c.request("GET", "/json/list")
        self.assertEqual(c.getresponse().status, 404)
        self.assertEqual(self.worker.requests, [])

    def upgrade(self):
        s = raw_request(self.relay.chromium_port, (
            "GET /devtools/browser/openbot HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
            "Authorization: Bearer not-this\r\n\r\n" % self.relay.chromium_port).encode(), read_all=False)
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(1)
        return s, head

    def recv_exactly(self, s, n):
        out = b""
        while len(out) < n:
            chunk = s.recv(n - len(out))
            if not chunk:
                break
            out += chunk
        return out

    def test_a_websocket_upgrade_is_piped_both_ways(self):
        s, head = self.upgrade()
        self.assertTrue(head.startswith(b"HTTP/1.1 101 "), head)
        self.assertIn(b"Sec-WebSocket-Accept: accept-dGhlIHNhbXBsZSBub25jZQ==", head)
        self.assertEqual(self.recv_exactly(s, 21), b"hello from the worker")
        for msg in (b"frame one", bytes(range(256)) * 100):
            s.sendall(msg)
            self.assertEqual(self.recv_exactly(s, len(msg)), msg.upper())
        req = self.worker.requests[0]
        self.assertEqual(req["path"], "/v1/computers/c_123/bots/osworld/cdp")
        h = req["headers"]
        self.assertEqual((h["upgrade"], h["connection"], h["sec-websocket-key"], h["sec-websocket-version"]),
                         ("websocket", "Upgrade", "dGhlIHNhbXBsZSBub25jZQ==", "13"))
        self.assertEqual((h["authorization"], h["x-computer-capability"]), ("Bearer " + TOKEN, CAP))
        s.close()

    def test_stop_closes_open_connections(self):
        s, _ = self.upgrade()
        self.recv_exactly(s, 21)
        self.relay.stop()
        self.relay.stop()  # twice is fine
        s.settimeout(5)
        deadline = time.time() + 5
        while time.time() < deadline:
            try:
                if s.recv(100) == b"":
                    break
            except ConnectionResetError:
                break
        else:
            self.fail("the connection stayed open after stop")
        s.close()
        with self.assertRaises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", self.relay.server_port), timeout=2)


@unittest.skipUnless(shutil.which("openssl"), "needs the openssl command")
class TLSRelayTest(RelayTest):
    """The same, with the worker behind TLS (a certificate for 127.0.0.1
    that SSL_CERT_FILE makes trusted): one thread reads and writes each
    TLS socket."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        cert, key = os.path.join(cls.dir, "cert.pem"), os.path.join(cls.dir, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
                       check=True, capture_output=True)
        cls.tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cls.tls.load_cert_chain(cert, key)
        cls.env = mock.patch.dict(os.environ, {"SSL_CERT_FILE": cert})
        cls.env.start()

    @classmethod
    def tearDownClass(cls):
        cls.env.stop()
        shutil.rmtree(cls.dir)

    def test_a_screen_is_added_to_the_query(self):
        pass  # the path rewrite is the same as over plain TCP

    def test_a_worker_that_does_not_answer_is_502_json(self):
        pass  # likewise


if __name__ == "__main__":
    unittest.main()
