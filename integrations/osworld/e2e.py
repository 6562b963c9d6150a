#!/usr/bin/env python3
"""Drives the open-bot provider the way OSWorld's DesktopEnv does, against a
running worker, and prints one JSON line per step (exit 1 when one failed).

    OPENBOT_WORKER_URL=http://127.0.0.1:7100 OPENBOT_WORKER_TOKEN_FILE=... \\
    [OPENBOT_PROVIDER=docker] [OPENBOT_BOT=osworld] python3 e2e.py

manager.get_vm_path → provider.start_emulator → get_ip_address → the guest
checks of check_guest.py, a pyautogui click, and pyautogui calls each right
after a CDP session → upload ~/before.txt →
save_state("s1") → upload ~/after.txt → revert_to_snapshot("s1") (and the
manager calls DesktopEnv makes after a revert) → start_emulator(new) →
before.txt is there, after.txt is 404 → stop_emulator. Stdlib only; it
destroys what it made, also when a step fails.
"""

import json
import os
import sys
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import check_guest  # noqa: E402
from check_guest import emit, Guest  # noqa: E402
from desktop_env.providers.openbot.manager import OpenBotVMManager  # noqa: E402
from desktop_env.providers.openbot.provider import OpenBotProvider  # noqa: E402


def timed(step, fn, **extra):
    """Runs fn, prints its line; returns fn's value (raises on failure)."""
    t = time.monotonic()
    try:
        out = fn()
    except Exception as e:
        emit(step, False, error="%s: %s" % (type(e).__name__, e), ms=int((time.monotonic() - t) * 1000), **extra)
        raise
    emit(step, True, ms=int((time.monotonic() - t) * 1000), **extra)
    return out


def check(step, ok, **kw):
    if not emit(step, ok, **kw):
        raise AssertionError(step)


def execute_right_after_cdp(g, rounds=3):
    """OSWorld's setup runs chrome_open_tabs over CDP and then its next step
    at once: a pyautogui call right after a CDP session closed must work."""
    fails = []
    for i in range(rounds):
        g.cdp_version()
        status, out = g.execute_python_command("pyautogui.moveTo(600, 400)")
        if status != 200 or not isinstance(out, dict) or out.get("returncode") != 0:
            err = (out.get("error") or "").strip().splitlines()[-1:] if isinstance(out, dict) else [str(out)[:200]]
            fails.append({"round": i, "status": status, "error": err})
    return emit("execute_right_after_cdp", not fails, rounds=rounds, failed=fails)


def main():
    manager, provider = OpenBotVMManager(), OpenBotProvider(None)
    path = None
    ok = True
    try:
        path = timed("get_vm_path", lambda: manager.get_vm_path(os_type="Ubuntu", region=None, screen_size=(1280, 800)))
        emit("computer", True, id=path)
        timed("start_emulator", lambda: provider.start_emulator(path, True, "Ubuntu"))
        ip = provider.get_ip_address(path)
        parts = ip.split(":")
        check("get_ip_address", len(parts) == 5 and parts[0] == "127.0.0.1", address=ip)
        g = Guest(ip)

        ok = check_guest.run_checks(g) and ok
        time.sleep(2)  # the CDP step's session ends with a lease release: execute_right_after_cdp checks that race
        ok = check_guest.click(g, 640, 400) and ok
        status, out = g.execute_python_command("print(tuple(pyautogui.position()))")
        check("pyautogui_position", status == 200 and out.get("output", "").strip() == "(640, 400)",
              status=status, output=out.get("output") if isinstance(out, dict) else str(out)[:300],
              error=(out.get("error") or "")[:300] if isinstance(out, dict) else None)
        ok = execute_right_after_cdp(g) and ok

        before = b"before the snapshot\n"
        status, _, body = g.upload_file("~/before.txt", before)
        check("upload_before", status == 200, status=status, body=body[:200].decode("utf-8", "replace"))
        timed("save_state", lambda: provider.save_state(path, "s1"))
        status, _, body = g.upload_file("~/after.txt", b"after the snapshot\n")
        check("upload_after", status == 200, status=status, body=body[:200].decode("utf-8", "replace"))
        status, _, body = g.get_file("~/after.txt")
        check("after_is_there", status == 200, status=status)

        old = path
        new = timed("revert_to_snapshot", lambda: provider.revert_to_snapshot(old, "s1"))
        if new and new != old:  # what DesktopEnv._revert_to_snapshot does
            path = new
            manager.delete_vm(old, None)
            manager.add_vm(new, None)
            manager.occupy_vm(new, os.getpid(), None)
        check("reverted_to_a_new_computer", new != old, old=old, new=new)
        timed("start_emulator_again", lambda: provider.start_emulator(path, True, "Ubuntu"))
        g = Guest(provider.get_ip_address(path))
        status, _, body = g.get_file("~/before.txt")
        check("before_is_restored", status == 200 and body == before, status=status, bytes=len(body))
        status, _, body = g.get_file("~/after.txt")
        check("after_is_gone", status == 404, status=status, body=body[:200].decode("utf-8", "replace"))
        status, _, body = g.get_file("/home/user/after.txt")
        check("after_is_gone_by_home_user", status == 404, status=status)
    except Exception as e:
        ok = False
        if not isinstance(e, AssertionError):
            emit("error", False, error="%s: %s" % (type(e).__name__, e))
    finally:
        if path is not None:
            try:
                timed("stop_emulator", lambda: provider.stop_emulator(path))
            except Exception:
                ok = False
    emit("e2e", ok, worker=urllib.parse.urlsplit(os.environ.get("OPENBOT_WORKER_URL", "")).netloc)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
