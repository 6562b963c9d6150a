"""OSWorld's provider for open-bot computers (issue 34).

A path_to_vm is an open-bot computer id. The manager creates an evaluation
computer through the worker's API and adds the bot; the provider starts it,
serves OSWorld's guest and DevTools ports through a loopback relay
(relay.py) that adds the worker's token and the computer's capability, and
maps save_state and revert_to_snapshot onto the worker's checkpoints and
kept homes. See README.md.

Configuration (environment):

- OPENBOT_WORKER_URL: the worker (default http://127.0.0.1:7100).
- OPENBOT_WORKER_TOKEN, or OPENBOT_WORKER_TOKEN_FILE naming a file holding it.
- OPENBOT_BOT: the bot whose screen OSWorld drives (default osworld).
- OPENBOT_PROVIDER: the worker's machine provider (e.g. docker; default the
  worker's own).

Capabilities and restore keys live in this process's memory only (the
registry below, shared by manager and provider), like the worker keeps
them: never in a file, a log line or an error message; the token neither.
"""

import json
import os
import secrets
import threading
import urllib.error
import urllib.parse
import urllib.request

CAPABILITY_HEADER = "X-Computer-Capability"
RESTORE_HEADER = "X-Restore-Key"
DEFAULT_WORKER_URL = "http://127.0.0.1:7100"
DEFAULT_BOT = "osworld"


class WorkerError(Exception):
    """The worker refused or failed a request: status, code and its message."""

    def __init__(self, what, status, code, message):
        self.status, self.code = status, code
        super().__init__("%s: %s %s: %s" % (what, status, code, message))


class Config:
    """The provider's settings, from the environment."""

    def __init__(self, env=None):
        env = os.environ if env is None else env
        self.worker_url = (env.get("OPENBOT_WORKER_URL") or DEFAULT_WORKER_URL).rstrip("/")
        token = env.get("OPENBOT_WORKER_TOKEN")
        if not token and env.get("OPENBOT_WORKER_TOKEN_FILE"):
            with open(env["OPENBOT_WORKER_TOKEN_FILE"]) as f:
                token = f.read().strip()
        if not token:
            raise RuntimeError("open-bot: set OPENBOT_WORKER_TOKEN or OPENBOT_WORKER_TOKEN_FILE (the worker's bearer token)")
        self.token = token
        self.bot = env.get("OPENBOT_BOT") or DEFAULT_BOT
        self.provider = env.get("OPENBOT_PROVIDER") or None

    def __repr__(self):  # never the token
        return "Config(worker_url=%r, bot=%r, provider=%r)" % (self.worker_url, self.bot, self.provider)


class Worker:
    """The worker's /v1 API, with urllib (OSWorld's host needs nothing more)."""

    def __init__(self, config, timeout=600):
        self.config = config
        self.timeout = timeout

    def call(self, method, path, body=None, capability=None, headers=None, what=None):
        """The answer's JSON ({} when empty); WorkerError for a non-2xx."""
        what = what or "%s %s" % (method, path.split("?")[0])
        h = {"Authorization": "Bearer " + self.config.token, "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        if capability:
            h[CAPABILITY_HEADER] = capability
        h.update(headers or {})
        req = urllib.request.Request(self.config.worker_url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            code, message = "error", raw[:300].decode("utf-8", "replace")
            try:
                err = json.loads(raw).get("error") or {}
                code, message = err.get("code") or code, err.get("message") or message
            except (ValueError, AttributeError):
                pass
            raise WorkerError(what, e.code, code, message) from None
        except urllib.error.URLError as e:
            raise WorkerError(what, 0, "unreachable", "the worker at %s did not answer: %s"
                              % (self.config.worker_url, e.reason)) from None
        return json.loads(raw) if raw.strip() else {}

    def create(self, scope, restore_key=None):
        """A new evaluation computer of scope: (id, capability, restored)."""
        body = {"scope": {"session": scope}, "evaluation": True}
        if self.config.provider:
            body["provider"] = self.config.provider
        headers = {RESTORE_HEADER: restore_key} if restore_key else None
        out = self.call("POST", "/v1/computers", body, headers=headers, what="create a computer")
        return out["computer"]["id"], out["capability"], bool(out.get("restored"))

    def add_bot(self, cid, capability, bot):
        """Adds bot to computer cid; one already there is fine."""
        try:
            self.call("POST", "/v1/computers/%s/bots" % _q(cid), {"id": bot}, capability, what="add bot %s" % bot)
        except WorkerError as e:
            if e.status != 409 or self.has_bot(cid, capability, bot) is False:
                raise

    def has_bot(self, cid, capability, bot):
        c = self.get(cid, capability)
        return any((b.get("id") if isinstance(b, dict) else b) == bot for b in c.get("bots") or [])

    def get(self, cid, capability):
        return self.call("GET", "/v1/computers/%s" % _q(cid), capability=capability)["computer"]

    def start(self, cid, capability):
        return self.call("POST", "/v1/computers/%s/start" % _q(cid), {}, capability)

    def checkpoint(self, cid, capability):
        return self.call("POST", "/v1/computers/%s/checkpoint" % _q(cid), {}, capability)

    def destroy(self, cid, capability, keep_home=False):
        """Destroys cid; with keep_home, the restore key ("" when none)."""
        q = "?keepHome=true" if keep_home else ""
        out = self.call("DELETE", "/v1/computers/%s%s" % (_q(cid), q), capability=capability)
        return out.get("restoreKey") or ""


def _q(s):
    return urllib.parse.quote(s, safe="")


def new_scope():
    """A fresh session scope for one OSWorld environment."""
    return "osworld-" + secrets.token_hex(8)


class Registry:
    """What this process knows of its computers; shared by manager and provider.

    computers: id → {"capability", "scope", "bot", "screen_size"}.
    snapshots: snapshot name → the scope it was saved in; latest: scope →
    its latest snapshot's name. A restore brings back a scope's latest
    checkpoint, so only that snapshot can be reverted to.
    """

    def __init__(self):
        self.lock = threading.Lock()  # guards the three maps
        self.computers = {}
        self.snapshots = {}
        self.latest = {}

    def put(self, cid, capability, scope, bot, screen_size=None):
        with self.lock:
            self.computers[cid] = {"capability": capability, "scope": scope, "bot": bot, "screen_size": screen_size}

    def get(self, cid):
        with self.lock:
            c = self.computers.get(cid)
        if c is None:
            raise KeyError("open-bot computer %r is not one this process made (capabilities are kept in memory only; "
                           "let the manager make the computer: leave path_to_vm unset)" % (cid,))
        return dict(c)

    def drop(self, cid):
        with self.lock:
            self.computers.pop(cid, None)

    def save(self, scope, name):
        with self.lock:
            self.snapshots[name] = scope
            self.latest[scope] = name

    def snapshot(self, name):
        """The scope name was saved in and whether it is still that scope's latest."""
        with self.lock:
            scope = self.snapshots.get(name)
            return scope, scope is not None and self.latest.get(scope) == name

    def forget_scope(self, scope):
        with self.lock:
            self.latest.pop(scope, None)
            for n in [n for n, sc in self.snapshots.items() if sc == scope]:
                del self.snapshots[n]


registry = Registry()
_config = None
_config_lock = threading.Lock()  # guards _config


def config():
    """The process's Config, read from the environment once."""
    global _config
    with _config_lock:
        if _config is None:
            _config = Config()
        return _config


def make_computer(worker, scope=None, restore_key=None, screen_size=None):
    """Creates an evaluation computer in scope (a new one by default) with
    the bot, and registers it; returns its id."""
    scope = scope or new_scope()
    cid, cap, restored = worker.create(scope, restore_key)
    registry.put(cid, cap, scope, worker.config.bot, screen_size)
    if restore_key and not restored:
        raise WorkerError("restore %s" % scope, 200, "not_restored",
                          "the worker made computer %s without restoring the kept home" % cid)
    worker.add_bot(cid, cap, worker.config.bot)
    return cid
