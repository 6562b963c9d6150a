#!/usr/bin/env python3
"""Checks an OSWorld guest the way OSWorld's PythonController uses it.

    check_guest.py IP:SERVER:CHROMIUM:VNC:VLC
    check_guest.py --click X Y IP:SERVER:CHROMIUM:VNC:VLC

Each step makes the requests PythonController (desktop_env/controllers/
python.py) and SetupController make — the same paths, methods, bodies and
parsing, with the stdlib instead of requests — and prints one JSON line
{"step", "ok", ...}. It exits 1 when a step failed. --click sends
execute_python_command("pyautogui.click(X, Y)") and prints the answer.

The address is what a provider's get_ip_address returns (for open-bot, the
relay's loopback ports: see desktop_env/providers/openbot).
"""

import base64
import http.client
import json
import os
import socket
import struct
import sys
import time
import urllib.parse
import uuid
import xml.etree.ElementTree as ET

# PythonController's prefix for execute_python_command.
PKGS_PREFIX = "import pyautogui; import time; pyautogui.FAILSAFE = False; {command}"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
JPEG_MAGIC = b"\xff\xd8\xff"


class Guest:
    """One guest's ports, with PythonController's requests."""

    def __init__(self, address):
        parts = address.split(":")
        self.ip = parts[0]
        self.server_port, self.chromium_port = 5000, 9222
        if len(parts) > 1:
            if len(parts) != 5:
                raise SystemExit("the address is IP or IP:SERVER:CHROMIUM:VNC:VLC, not %r" % address)
            self.server_port, self.chromium_port = int(parts[1]), int(parts[2])

    def http(self, method, path, body=None, headers=None, timeout=None, port=None):
        """(status, headers, body); timeout None waits as long as requests does (forever)."""
        c = http.client.HTTPConnection(self.ip, port or self.server_port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    # --- PythonController ---

    def get_screenshot(self):
        status, h, body = self.http("GET", "/screenshot", timeout=10)
        ctype = h.get("content-type", "")
        valid = body.startswith(PNG_MAGIC) or body.startswith(JPEG_MAGIC) or "image/png" in ctype or "image/jpeg" in ctype
        return status, body, valid

    def get_accessibility_tree(self):
        status, _, body = self.http("GET", "/accessibility")
        return status, (json.loads(body)["AT"] if status == 200 else body)

    def get_terminal_output(self):
        status, _, body = self.http("GET", "/terminal")
        return status, (json.loads(body)["output"] if status == 200 else body)

    def execute_python_command(self, command):
        payload = json.dumps({"command": ["python", "-c", PKGS_PREFIX.format(command=command)], "shell": False})
        status, _, body = self.http("POST", "/execute", payload, {"Content-Type": "application/json"}, timeout=120)
        return status, (json.loads(body) if status == 200 else body)

    def get_vm_platform(self):
        status, out = self.execute_python_command("import platform; print(platform.system())")
        return status, (out["output"].strip() if status == 200 else out)

    def get_vm_screen_size(self):
        status, _, body = self.http("POST", "/screen_size")
        return status, (json.loads(body) if status == 200 else body)

    def get_vm_directory_tree(self, path):
        payload = json.dumps({"path": path})
        status, _, body = self.http("POST", "/list_directory", payload, {"Content-Type": "application/json"})
        return status, (json.loads(body)["directory_tree"] if status == 200 else body)

    def get_file(self, file_path):
        body = urllib.parse.urlencode({"file_path": file_path})
        return self.http("POST", "/file", body, {"Content-Type": "application/x-www-form-urlencoded"})

    # --- SetupController ---

    def upload_file(self, path, data):
        """_upload_file_setup's POST /setup/upload: requests_toolbelt's
        MultipartEncoder with file_path and file_data (basename, stream)."""
        boundary = uuid.uuid4().hex
        body = (b"--" + boundary.encode() + b"\r\n"
                b'Content-Disposition: form-data; name="file_path"\r\n\r\n' + path.encode() + b"\r\n"
                b"--" + boundary.encode() + b"\r\n"
                b'Content-Disposition: form-data; name="file_data"; filename="' + os.path.basename(path).encode() + b'"\r\n\r\n'
                + data + b"\r\n--" + boundary.encode() + b"--\r\n")
        headers = {"Content-Type": "multipart/form-data; boundary=" + boundary}
        return self.http("POST", "/setup/upload", body, headers, timeout=600)

    # --- DevTools, as Playwright's connect_over_cdp reaches it ---

    def cdp_version(self):
        """GET /json/version, then Browser.getVersion over its webSocketDebuggerUrl."""
        status, _, body = self.http("GET", "/json/version/", port=self.chromium_port, timeout=30)
        if status != 200:
            return status, body, None
        info = json.loads(body)
        u = urllib.parse.urlsplit(info["webSocketDebuggerUrl"])
        ws = WebSocket(u.hostname, u.port, u.path)
        try:
            ws.send_text(json.dumps({"id": 1, "method": "Browser.getVersion"}))
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                msg = json.loads(ws.recv_text())
                if msg.get("id") == 1:
                    return status, info, msg
        finally:
            ws.close()
        return status, info, None


class WebSocket:
    """A minimal RFC 6455 client: text frames, masked, no extensions."""

    def __init__(self, host, port, path, timeout=30):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (path, host, port, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError("the websocket closed during the handshake: %r" % head[:200])
            head += chunk
        if not head.startswith(b"HTTP/1.1 101"):
            rest = b""
            try:
                rest = self.sock.recv(2000)
            except OSError:
                pass
            raise ConnectionError("the websocket upgrade was refused: %s" % (head + rest)[:500].decode("latin-1"))

    def send_text(self, text):
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        if n < 126:
            hdr = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 65536:
            hdr = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            hdr = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        self.sock.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _exactly(self, n):
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the websocket closed")
            out += chunk
        return out

    def recv_text(self):
        parts = []
        while True:
            b0, b1 = self._exactly(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._exactly(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._exactly(8))[0]
            mask = self._exactly(4) if b1 & 0x80 else None
            data = self._exactly(n)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            op = b0 & 0x0F
            if op == 0x8:
                code = struct.unpack("!H", data[:2])[0] if len(data) >= 2 else None
                raise ConnectionError("the websocket closed: %s %s" % (code, data[2:].decode("utf-8", "replace")))
            if op in (0x9, 0xA):  # ping, pong: not a message
                continue
            parts.append(data)
            if b0 & 0x80:
                return b"".join(parts).decode()

    def close(self):
        try:
            self.sock.sendall(struct.pack("!BB", 0x88, 0x80) + os.urandom(4))
        except OSError:
            pass
        self.sock.close()


def emit(step, ok, **kw):
    line = {"step": step, "ok": bool(ok)}
    line.update(kw)
    print(json.dumps(line), flush=True)
    return bool(ok)


def _step(name, fn):
    t = time.monotonic()
    try:
        ok, kw = fn()
    except Exception as e:  # a step that raised is a failed step, with why
        ok, kw = False, {"error": "%s: %s" % (type(e).__name__, e)}
    kw["ms"] = int((time.monotonic() - t) * 1000)
    return emit(name, ok, **kw)


def _short(v, n=300):
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    v = str(v)
    return v if len(v) <= n else v[:n] + "…"


def run_checks(g, cdp=True):
    """Every step; True when all passed."""
    results = []

    def screenshot():
        status, body, valid = g.get_screenshot()
        return status == 200 and valid, {"status": status, "bytes": len(body), "png": body.startswith(PNG_MAGIC)}

    def accessibility():
        status, at = g.get_accessibility_tree()
        if status != 200:
            return False, {"status": status, "body": _short(at)}
        root = ET.fromstring(at)
        buttons = [el.get("name") for el in root.iter() if el.tag == "push-button"]
        return True, {"status": status, "root": root.tag, "elements": sum(1 for _ in root.iter()), "push_buttons": buttons[:50]}

    def execute():
        status, out = g.execute_python_command("print(1+1)")
        if status != 200:
            return False, {"status": status, "body": _short(out)}
        return out.get("output", "").strip() == "2" and out.get("returncode") == 0, {
            "status": status, "output": out.get("output"), "error": _short(out.get("error", "")), "returncode": out.get("returncode")}

    def platform():
        status, out = g.get_vm_platform()
        return status == 200 and out == "Linux", {"status": status, "platform": _short(out)}

    def screen_size():
        status, out = g.get_vm_screen_size()
        ok = status == 200 and isinstance(out.get("width"), int) and isinstance(out.get("height"), int)
        return ok, {"status": status, "size": out if status == 200 else _short(out)}

    name = "openbot-check-%s.bin" % uuid.uuid4().hex[:8]
    path = "/home/user/" + name
    data = os.urandom(3000) + b"\r\n--not-a-boundary\r\n" + bytes(range(256))

    def upload():
        status, _, body = g.upload_file(path, data)
        return status == 200, {"status": status, "path": path, "body": _short(body)}

    def get_file():
        status, _, body = g.get_file(path)
        return status == 200 and body == data, {"status": status, "bytes": len(body), "same": body == data}

    def directory_tree():
        status, tree = g.get_vm_directory_tree("/home/user")
        if status != 200:
            return False, {"status": status, "body": _short(tree)}
        names = [c.get("name") for c in tree.get("children", [])]
        return tree.get("type") == "directory" and name in names, {
            "status": status, "name": tree.get("name"), "children": len(names), "has_upload": name in names}

    def missing_file():
        status, _, body = g.get_file("/home/user/no-such-file-%s" % uuid.uuid4().hex[:8])
        return status == 404, {"status": status, "body": _short(body)}

    def terminal():
        status, out = g.get_terminal_output()
        return status == 200, {"status": status, "output": _short(out) if out is not None else None}

    def cdp_step():
        status, info, reply = g.cdp_version()
        if status != 200:
            return False, {"status": status, "body": _short(info)}
        result = (reply or {}).get("result") or {}
        return bool(result.get("product")), {"browser": info.get("Browser"), "product": result.get("product"),
                                             "reply": None if result else _short(reply)}

    steps = [("get_screenshot", screenshot), ("get_accessibility_tree", accessibility),
             ("execute_python_command", execute), ("get_vm_platform", platform),
             ("get_vm_screen_size", screen_size), ("setup_upload", upload), ("get_file", get_file),
             ("get_vm_directory_tree", directory_tree), ("get_file_missing", missing_file),
             ("get_terminal_output", terminal)]
    if cdp:
        steps.append(("cdp_browser_version", cdp_step))
    for step_name, fn in steps:
        results.append(_step(step_name, fn))
    return all(results)


def click(g, x, y):
    """execute_python_command("pyautogui.click(X, Y)"): True when it ran and exited 0."""
    status, out = g.execute_python_command("pyautogui.click(%d, %d)" % (x, y))
    ok = status == 200 and isinstance(out, dict) and out.get("returncode") == 0
    return emit("click", ok, status=status, reply=out if isinstance(out, dict) else _short(out))


def main(argv):
    if len(argv) == 4 and argv[0] == "--click":
        return 0 if click(Guest(argv[3]), int(argv[1]), int(argv[2])) else 1
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__.strip().split("\n\n")[0], file=sys.stderr)
        return 2
    return 0 if run_checks(Guest(argv[0])) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
