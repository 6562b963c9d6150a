"""OpenBotProvider: OSWorld's Provider for open-bot computers.

A path_to_vm is a computer id the manager (or a revert) made in this
process. start_emulator starts the computer and a loopback relay for it;
get_ip_address names the relay's ports; save_state is a checkpoint;
revert_to_snapshot replaces the computer with one whose home is the
checkpoint's (or a fresh one), and returns its id; stop_emulator destroys
it. See README.md for what each does in the worker's terms.
"""

import json
import logging
import threading
import time
import urllib.error
import urllib.request

from . import config, make_computer, registry, Worker
from .relay import Relay

try:
    from desktop_env.providers.base import Provider
except ImportError:  # our own tests run without OSWorld
    Provider = object

logger = logging.getLogger("desktopenv.providers.openbot.OpenBotProvider")

READY_TIMEOUT = 300  # seconds for /screenshot to answer 200, like OSWorld's docker provider
INIT_STATE = "init_state"


class OpenBotProvider(Provider):
    """OSWorld's Provider over an open-bot worker (see the module's doc)."""

    def __init__(self, region=None, **kwargs):
        self.region = region
        self._lock = threading.Lock()  # guards _relays
        self._relays = {}  # computer id → its Relay

    def _worker(self):
        return Worker(config())

    def start_emulator(self, path_to_vm, headless=True, os_type=None, *args, **kwargs):
        """Starts the computer when it is not running, then its relay, and
        waits until GET /screenshot through the relay answers 200."""
        cid = path_to_vm
        c = registry.get(cid)
        w = self._worker()
        state = w.get(cid, c["capability"]).get("state")
        if state != "running":
            logger.info("open-bot: starting computer %s (%s)", cid, state)
            w.start(cid, c["capability"])
        with self._lock:
            relay = self._relays.get(cid)
            if relay is None:
                relay = Relay(w.config.worker_url, cid, c["bot"], w.config.token, c["capability"]).start()
                self._relays[cid] = relay
        self._wait_ready(relay, c.get("screen_size"))
        logger.info("open-bot: computer %s ready at %s", cid, self.get_ip_address(cid))

    def _wait_ready(self, relay, screen_size):
        base = "http://127.0.0.1:%d" % relay.server_port
        deadline = time.monotonic() + READY_TIMEOUT
        last = None
        while True:
            try:
                with urllib.request.urlopen(base + "/screenshot", timeout=10) as r:
                    if r.status == 200:
                        break
            except urllib.error.HTTPError as e:
                last = "%d %s" % (e.code, e.read()[:200].decode("utf-8", "replace"))
            except OSError as e:
                last = str(e)
            if time.monotonic() > deadline:
                raise TimeoutError("open-bot: GET /screenshot did not answer 200 within %d s (last: %s)" % (READY_TIMEOUT, last))
            time.sleep(1)
        if screen_size:
            try:
                req = urllib.request.Request(base + "/screen_size", data=b"", method="POST")
                with urllib.request.urlopen(req, timeout=30) as r:
                    got = json.loads(r.read())
                if (got.get("width"), got.get("height")) != tuple(screen_size):
                    logger.warning("open-bot: the screen is %sx%s, not the %sx%s DesktopEnv was given "
                                   "(set SCREEN_WIDTH and SCREEN_HEIGHT, or screen_size, to match)",
                                   got.get("width"), got.get("height"), screen_size[0], screen_size[1])
            except (OSError, ValueError) as e:
                logger.warning("open-bot: POST /screen_size failed: %s", e)

    def get_ip_address(self, path_to_vm):
        """127.0.0.1:<server>:<chromium>:0:0 (no VNC or VLC port)."""
        with self._lock:
            relay = self._relays.get(path_to_vm)
        if relay is None:
            raise RuntimeError("open-bot computer %s has no relay: start_emulator it first" % path_to_vm)
        return "127.0.0.1:%d:%d:0:0" % (relay.server_port, relay.chromium_port)

    def save_state(self, path_to_vm, snapshot_name):
        """A checkpoint of the computer's home, remembered as snapshot_name
        (the scope's latest: an earlier snapshot of it can no longer be
        reverted to)."""
        c = registry.get(path_to_vm)
        out = self._worker().checkpoint(path_to_vm, c["capability"])
        registry.save(c["scope"], snapshot_name)
        logger.info("open-bot: %s saved as %r (revision %s)", path_to_vm, snapshot_name, out.get("revision"))

    def revert_to_snapshot(self, path_to_vm, snapshot_name):
        """Replaces the computer and returns the new one's id: for a snapshot
        saved here, one whose home is that checkpoint's (same scope, the old
        computer destroyed keeping its home); for init_state or a name never
        saved, a fresh computer in a new scope."""
        c = registry.get(path_to_vm)
        w = self._worker()
        scope, latest = registry.snapshot(snapshot_name)
        if scope is not None and snapshot_name != INIT_STATE:
            if scope != c["scope"]:
                raise RuntimeError("open-bot: snapshot %r was saved on another computer's scope, which a revert "
                                   "already left; only this computer's snapshots can be reverted to" % snapshot_name)
            if not latest:
                raise RuntimeError("open-bot: snapshot %r is not this computer's latest save_state: a revert "
                                   "restores the latest checkpoint only" % snapshot_name)
            self._stop_relay(path_to_vm)
            key = w.destroy(path_to_vm, c["capability"], keep_home=True)
            registry.drop(path_to_vm)
            if not key:
                raise RuntimeError("open-bot: the worker kept no checkpoint of %s to restore (has it a home store?)" % path_to_vm)
            new = make_computer(w, scope, key, c.get("screen_size"))
            # The new computer's own first checkpoint is the snapshot again,
            # so a later revert to it finds it.
            w.checkpoint(new, registry.get(new)["capability"])
            logger.info("open-bot: %s reverted to %r as %s", path_to_vm, snapshot_name, new)
            return new
        self._stop_relay(path_to_vm)
        registry.forget_scope(c["scope"])
        w.destroy(path_to_vm, c["capability"])
        registry.drop(path_to_vm)
        new = make_computer(w, screen_size=c.get("screen_size"))
        logger.info("open-bot: %s replaced by a fresh computer %s (%r)", path_to_vm, new, snapshot_name)
        return new

    def stop_emulator(self, path_to_vm, region=None, *args, **kwargs):
        """Stops the relay and destroys the computer (its home and checkpoints too)."""
        self._stop_relay(path_to_vm)
        try:
            c = registry.get(path_to_vm)
        except KeyError:
            logger.warning("open-bot: stop_emulator(%s): not a computer of this process; nothing destroyed", path_to_vm)
            return
        registry.forget_scope(c["scope"])
        self._worker().destroy(path_to_vm, c["capability"])
        registry.drop(path_to_vm)
        logger.info("open-bot: computer %s destroyed", path_to_vm)

    def _stop_relay(self, cid):
        with self._lock:
            relay = self._relays.pop(cid, None)
        if relay is not None:
            relay.stop()
