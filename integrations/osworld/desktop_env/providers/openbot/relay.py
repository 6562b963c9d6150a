"""A loopback relay from OSWorld's guest ports to an open-bot worker.

OSWorld talks to a guest at ``http://{ip}:{server_port}`` (its guest API)
and ``http://{ip}:{chromium_port}`` (Chrome's DevTools, through Playwright's
connect_over_cdp). On open-bot both are worker routes that need the worker's
token and the computer's capability, which OSWorld has no way to send. A
Relay listens on two 127.0.0.1 ports and adds them:

- the server port forwards every request to
  ``{worker}/v1/computers/{id}/bots/{bot}/osworld{path}``: the request line
  and Host rewritten, the two credentials added (any the client sent are
  dropped), ``Connection: close``; then the body and the answer are copied
  byte for byte (``Connection: close`` added to the answer's head when the
  worker left it out), one request per connection;
- the chromium port answers ``GET /json/version`` itself (a
  webSocketDebuggerUrl on this port, which is what Playwright dials next)
  and relays a websocket upgrade on any path to
  ``{worker}/v1/computers/{id}/bots/{bot}/cdp`` with the Upgrade, Connection
  and Sec-WebSocket-* headers kept, then pumps bytes both ways.

The credentials are what make these ports worth guarding: anything that can
reach them acts as the harness. They are bound to 127.0.0.1 only, and a
request that carries an Origin header (every browser page's cross-origin
request and websocket does; OSWorld's requests and Playwright do not) or a
Host other than a loopback name is refused 403, so a web page open on the
harness's host cannot use them (nor reach them by DNS rebinding).
The token and capability are never logged or put in an error.

Each connection is copied both ways by one thread (a selector over the
client's socket and the worker's): an https worker's ssl.SSLSocket must not
be read by one thread while another writes it.
"""

import json
import selectors
import socket
import ssl
import threading
import urllib.parse

__all__ = ["Relay"]

MAX_HEAD = 64 << 10
CAPABILITY_HEADER = "X-Computer-Capability"
BROWSER_PATH = "/devtools/browser/openbot"

# Headers the relay sets itself or that belong to one hop.
_DROP = {"host", "connection", "keep-alive", "proxy-connection", "proxy-authorization", "te",
         "authorization", CAPABILITY_HEADER.lower(), "upgrade", "origin"}
_LOOPBACK = {"127.0.0.1", "localhost", "[::1]"}


class _BadRequest(Exception):
    def __init__(self, status, reason, message):
        super().__init__(message)
        self.status, self.reason = status, reason


def _read_head(sock):
    """The request head (up to the blank line) and what came after it."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_HEAD:
            raise _BadRequest(431, "Request Header Fields Too Large", "the request head is over 64 KiB")
        chunk = sock.recv(65536)
        if not chunk:
            if buf:
                raise _BadRequest(400, "Bad Request", "the connection closed inside the request head")
            return None, b""
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    return head, rest


def _parse_head(head):
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise _BadRequest(400, "Bad Request", "not an HTTP request line")
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        if line[0] in " \t" or ":" not in line:  # obsolete folding, or junk
            raise _BadRequest(400, "Bad Request", "a malformed header line")
        name, value = line.split(":", 1)
        headers.append((name.strip(), value.strip()))
    return parts[0], parts[1], parts[2], headers


def _header(headers, name):
    name = name.lower()
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


def _origin_form(target):
    """A request target as path and query ('http://h/x?q' is '/x?q')."""
    if target.startswith("http://") or target.startswith("https://"):
        u = urllib.parse.urlsplit(target)
        target = (u.path or "/") + ("?" + u.query if u.query else "")
    if not target.startswith("/"):
        raise _BadRequest(400, "Bad Request", "the request target must be a path")
    return target


def _answer(sock, status, reason, body, ctype="application/json"):
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    head = ("HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            % (status, reason, ctype, len(body))).encode()
    try:
        sock.sendall(head + body)
    except OSError:
        pass


class _ClosingHeads:
    """Passes an answer through, adding Connection: close to its final head
    (after any 1xx) when the worker left it out: the relay closes after one
    answer, and a keep-alive client must know."""

    def __init__(self):
        self.buf = b""
        self.done = False

    def feed(self, data):
        if self.done:
            return data
        self.buf += data
        out = b""
        while b"\r\n\r\n" in self.buf:
            head, self.buf = self.buf.split(b"\r\n\r\n", 1)
            status = head.split(b" ", 2)[1:2]
            if status and status[0].startswith(b"1") and status[0] != b"101":
                out += head + b"\r\n\r\n"
                continue
            if not any(line.lower().startswith(b"connection:") for line in head.split(b"\r\n")[1:]):
                head += b"\r\nConnection: close"
            out += head + b"\r\n\r\n" + self.buf
            self.buf, self.done = b"", True
            return out
        if len(self.buf) > MAX_HEAD:  # not HTTP as we know it: let it through
            out, self.buf, self.done = out + self.buf, b"", True
        return out

    def rest(self):
        return self.buf


def _pipe(conn, upstream, heads=None):
    """Copies bytes both ways in this one thread (an ssl.SSLSocket must not
    be read in one thread while written in another) until the worker's side
    ends; heads filters what the worker sends."""
    peer = {conn: upstream, upstream: conn}
    reading = [conn, upstream]
    with selectors.DefaultSelector() as sel:  # not select(): no FD_SETSIZE limit
        for s in reading:
            sel.register(s, selectors.EVENT_READ)
        while reading:
            ready = [s for s in reading if isinstance(s, ssl.SSLSocket) and s.pending()]
            if not ready:
                ready = [key.fileobj for key, _ in sel.select(1.0)]
                if not ready and any(s.fileno() == -1 for s in reading):
                    return  # closed under us (Relay.stop)
            if not _copy_ready(ready, reading, sel, peer, upstream, heads):
                return


def _recv(s):
    """What s has now: bytes, b"" at its end, or None when a TLS socket's
    readable bytes held no data (a TLS 1.3 session ticket, say), which a
    blocking read would wait on while the other way stalls."""
    if not isinstance(s, ssl.SSLSocket):
        return s.recv(65536)
    s.settimeout(0)
    try:
        return s.recv(65536)
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
        return None
    finally:
        s.settimeout(None)


def _copy_ready(ready, reading, sel, peer, upstream, heads):
    """One round of _pipe; False when the worker's side ended."""
    for s in ready:
        try:
            data = _recv(s)
        except OSError:
            data = b""
        if data is None:
            continue
        dst = peer[s]
        if not data:
            if s is upstream:
                if heads is not None and heads.rest():
                    dst.sendall(heads.rest())
                return False
            reading.remove(s)
            sel.unregister(s)
            if isinstance(dst, ssl.SSLSocket):
                return False  # a TLS side cannot be half-closed and still read
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                return False
            continue
        if s is upstream and heads is not None:
            data = heads.feed(data)
        if data:
            dst.sendall(data)
    return True


class Relay:
    """Two loopback ports for one computer's bot (see the module's doc)."""

    def __init__(self, worker_url, computer_id, bot, token, capability, screen=None, connect_timeout=30):
        u = urllib.parse.urlsplit(worker_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("the worker URL must be http(s)://host[:port], not %r" % worker_url)
        self._tls = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port or (443 if self._tls else 80)
        self._netloc = u.netloc.rsplit("@", 1)[-1]
        base = u.path.rstrip("/")
        prefix = "%s/v1/computers/%s/bots/%s" % (base, urllib.parse.quote(computer_id, safe=""),
                                                 urllib.parse.quote(bot, safe=""))
        self._guest = prefix + "/osworld"
        self._cdp = prefix + "/cdp"
        self._screen = screen
        self._token = token
        self._capability = capability
        self._connect_timeout = connect_timeout
        self._lock = threading.Lock()  # guards _conns and _closed
        self._conns = set()
        self._closed = False
        self._listeners = []
        self.server_port = None
        self.chromium_port = None

    def __repr__(self):  # never the credentials
        return "Relay(%s -> %s:%d%s)" % (self.server_port, self._host, self._port, self._guest)

    def start(self):
        """Binds both ports (chosen by the system) and serves them."""
        server = socket.create_server(("127.0.0.1", 0))
        chromium = socket.create_server(("127.0.0.1", 0))
        self.server_port = server.getsockname()[1]
        self.chromium_port = chromium.getsockname()[1]
        for lsock, handle in ((server, self._serve_guest), (chromium, self._serve_chromium)):
            lsock.settimeout(0.5)
            self._listeners.append(lsock)
            threading.Thread(target=self._accept, args=(lsock, handle), daemon=True,
                             name="openbot-relay-%d" % lsock.getsockname()[1]).start()
        return self

    def stop(self):
        """Closes the ports and every connection through them; safe twice."""
        with self._lock:
            self._closed = True
            conns, self._conns = self._conns, set()
        for lsock in self._listeners:
            try:
                lsock.shutdown(socket.SHUT_RDWR)  # stops listening now, not at the next accept timeout
            except OSError:
                pass
            lsock.close()
        self._untrack(list(conns))

    def _track(self, sock):
        with self._lock:
            if self._closed:
                sock.close()
                return False
            self._conns.add(sock)
            return True

    def _untrack(self, socks):
        with self._lock:
            for s in socks:
                self._conns.discard(s)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)  # wakes a pump blocked reading it
            except OSError:
                pass
            s.close()

    def _accept(self, lsock, handle):
        while True:
            with self._lock:
                if self._closed:
                    return
            try:
                conn, _ = lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            conn.settimeout(None)
            if not self._track(conn):
                return
            threading.Thread(target=self._handle, args=(conn, handle), daemon=True).start()

    def _handle(self, conn, handle):
        socks = [conn]  # this connection's sockets, the worker's added by _dial
        try:
            head, rest = _read_head(conn)
            if head is None:
                return
            method, target, version, headers = _parse_head(head)
            self._guard(headers)
            handle(socks, method, _origin_form(target), version, headers, rest)
        except _BadRequest as e:
            _answer(conn, e.status, e.reason, {"status": "error", "message": "open-bot relay: %s" % e})
        except OSError:
            pass
        finally:
            self._untrack(socks)

    def _guard(self, headers):
        if _header(headers, "Origin") is not None:
            raise _BadRequest(403, "Forbidden", "requests from web pages (with an Origin header) are refused")
        host = (_header(headers, "Host") or "").lower()
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if name not in _LOOPBACK:
            raise _BadRequest(403, "Forbidden", "the Host must be 127.0.0.1 or localhost")

    def _dial(self, socks):
        try:
            s = socket.create_connection((self._host, self._port), timeout=self._connect_timeout)
            if self._tls:
                s = ssl.create_default_context().wrap_socket(s, server_hostname=self._host)
        except OSError as e:
            raise _BadRequest(502, "Bad Gateway", "the worker at %s:%d did not answer: %s"
                              % (self._host, self._port, e.strerror or e)) from None
        s.settimeout(None)
        if not self._track(s):
            raise OSError("the relay stopped")
        socks.append(s)
        return s

    def _target(self, path_query, route):
        path, sep, query = path_query.partition("?")
        if route == self._cdp:  # one route, whatever path Playwright dials
            path, sep, query = "", "", ""
        if self._screen:
            query = (query + "&" if query else "") + urllib.parse.urlencode({"screen": self._screen})
            sep = "?"
        return route + path + (sep + query if query else "")

    def _head(self, method, target, version, headers, keep, connection):
        lines = ["%s %s %s" % (method, target, version), "Host: " + self._netloc]
        lines += ["%s: %s" % (k, v) for k, v in headers if k.lower() not in _DROP or k.lower() in keep]
        lines += ["Authorization: Bearer " + self._token, CAPABILITY_HEADER + ": " + self._capability]
        if connection:
            lines.append("Connection: " + connection)
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _relay(self, socks, head, rest, close=False):
        conn, upstream = socks[0], socks[-1]
        upstream.sendall(head + rest)
        try:
            _pipe(conn, upstream, _ClosingHeads() if close else None)
        except OSError:
            pass

    def _serve_guest(self, socks, method, path, version, headers, rest):
        if _header(headers, "Upgrade") is not None:
            raise _BadRequest(400, "Bad Request", "the guest port takes no upgrades (CDP is on the chromium port)")
        self._dial(socks)
        head = self._head(method, self._target(path, self._guest), version, headers, (), "close")
        self._relay(socks, head, rest, close=True)

    def _serve_chromium(self, socks, method, path, version, headers, rest):
        if (_header(headers, "Upgrade") or "").lower() == "websocket":
            self._dial(socks)
            head = self._head(method, self._target(path.partition("?")[0], self._cdp), version, headers,
                              ("upgrade",), _header(headers, "Connection") or "Upgrade")
            self._relay(socks, head, rest)
            return
        if method == "GET" and path.partition("?")[0] in ("/json/version", "/json/version/"):
            _answer(socks[0], 200, "OK", {
                "Browser": "open-bot",
                "Protocol-Version": "1.3",
                "webSocketDebuggerUrl": "ws://127.0.0.1:%d%s" % (self.chromium_port, BROWSER_PATH),
            })
            return
        raise _BadRequest(404, "Not Found", "this port answers GET /json/version and a websocket upgrade only")
