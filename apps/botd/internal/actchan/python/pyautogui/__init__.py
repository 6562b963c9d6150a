"""pyautogui for an open-bot evaluation screen (issue 34, OSWorld).

OSWorld runs ``python -c "import pyautogui; ..."`` through its guest's
/execute. On an open-bot computer botd runs that command as the bot with a
socket to botd as the fd named by OPENBOT_ACT_FD, and this module in place of
the real pyautogui: every call becomes one request on that channel, which
botd runs as an ordered act under the screen's lease (the screen settles
after it; a person who took the screen refuses it). Nothing here reaches the
X display.

The protocol is JSON lines, one request then one reply (see botd's
internal/actchan): ``{"act": [action, ...]}``, ``{"query": "pointer"}``,
``{"query": "size"}``, ``{"query": "clipboard"}``, ``{"clipboard": text}``.
A refused request (``{"ok": false, "code", "error"}``) raises ActError,
which ends the command non-zero unless the code catches it.

Where this differs from pyautogui, and why:

- One request per call. A mouseDown(), the moves after it and the mouseUp()
  become one drag (left button only), sent at the mouseUp(); any other call
  releases the button first (the drag is sent, or a click when the pointer
  did not move). A button still down when the command ends is released
  there: a button cannot stay held from one /execute to the next.
- keyDown() sends nothing: the held keys join every press(), hotkey() and
  typewrite() until keyUp() (ctrl held then press('c') is ctrl+c). A keyUp()
  of a key that nothing used presses the keys held (keyDown('ctrl'),
  keyDown('c'), keyUp('c') is ctrl+c). A click, drag or scroll while a key
  is held raises PyAutoGUIException and sends nothing: the act has no held
  modifiers, and a plain click where a ctrl+click was meant would be worse
  than none.
- A left triple click raises PyAutoGUIException: botd settles after each
  action, so a third click cannot follow a double click within the
  double-click time (it would deselect what the double click selected).
  Right and middle clicks=N are N single clicks.
- duration and tween are accepted and not animated: the pointer moves at
  once, and a drag steps along its path at botd's pace. typewrite(str,
  interval) types the text as one action at botd's own per-key pace.
- Coordinates are truncated to ints like pyautogui's, and must be on the
  screen (0 <= x < width, 0 <= y < height): pyautogui's X backend would let
  the server clamp them; here they raise PyAutoGUIException.
- PAUSE (0.1 s, as in pyautogui) is the least time from a call's input to
  the next call, slept in this process: botd answers an act after the
  screen settled (450 ms after a click, key or typing), so after most acts
  nothing is left to sleep; after a move (no settle) or a call that sent
  nothing (keyDown) the rest of PAUSE is.
  FAILSAFE is checked against the pointer this process last knew (where it
  last moved it, or last asked), not with an extra request.
- Key names are pyautogui's, mapped onto open-bot's (pgdn is pagedown,
  ctrlleft is ctrl, num5 is 5, ...); a name with no equivalent on open-bot
  (volumeup, printscreen, f13, ...) raises ValueError before anything is
  sent.
- screenshot(), the locate functions, pixel() and the message boxes raise
  NotImplementedError: the harness takes screenshots itself (GET
  /screenshot).
"""

import atexit
import collections
import contextlib
import json
import math
import os
import socket
import sys
import threading
import time

__version__ = "0.9.54+openbot"

Point = collections.namedtuple("Point", "x y")
Size = collections.namedtuple("Size", "width height")

# Tunables that pyautogui has; the ones that mean nothing here are kept so
# code that sets them keeps working.
PAUSE = 0.1
FAILSAFE = True
FAILSAFE_POINTS = [(0, 0)]
MINIMUM_DURATION = 0.1
MINIMUM_SLEEP = 0.05
DARWIN_CATCH_UP_TIME = 0.01
LOG_SCREENSHOTS = False
LOG_SCREENSHOTS_LIMIT = 10

LEFT = "left"
MIDDLE = "middle"
RIGHT = "right"
PRIMARY = "primary"
SECONDARY = "secondary"

ENV_FD = "OPENBOT_ACT_FD"

# Bounds of one act (pkg/shared/actions.go).
_MAX_ACTIONS = 50
_MAX_TYPE_CHARS = 10000
_MAX_WAIT_MS = 10000
_MAX_DRAG_POINTS = 100
_MAX_KEYS = 8
_MAX_SCROLL_PX = 20000
_WHEEL_PX = 120  # pixels per wheel click


class PyAutoGUIException(Exception):
    """A call that cannot be done (pyautogui's own base exception)."""


class FailSafeException(PyAutoGUIException):
    """The pointer is on a FAILSAFE_POINTS corner while FAILSAFE is on."""


class ImageNotFoundException(PyAutoGUIException):
    """pyautogui's; never raised here (the locate functions are not offered)."""


class NoActChannel(PyAutoGUIException):
    """The process has no act channel (not an evaluation screen's execute)."""


class ActError(PyAutoGUIException):
    """botd refused a request; code is its stable error code."""

    def __init__(self, code, message):
        self.code = code
        if code == "user_has_control":
            text = ("a person has taken control of this screen (user_has_control): "
                    "the action was not done")
        else:
            text = "open-bot refused the action (%s): %s" % (code, message)
        super().__init__(text)


# --- the channel -----------------------------------------------------------


class _Channel:
    """One connection to botd over the inherited fd; one request at a time."""

    def __init__(self, fd):
        self._sock = socket.socket(fileno=fd)
        self._reader = self._sock.makefile("rb")
        self._lock = threading.Lock()  # one request and its reply at a time

    def request(self, obj):
        line = json.dumps(obj, separators=(",", ":")).encode("utf-8") + b"\n"
        with self._lock:
            try:
                self._sock.sendall(line)
                reply = self._reader.readline()
            except OSError as e:
                raise ActError("channel_closed", "the act channel failed: %s" % e) from None
        if not reply:
            raise ActError("channel_closed", "the act channel closed (the command's time ran out?)")
        try:
            rep = json.loads(reply)
        except ValueError:
            raise ActError("bad_reply", "botd answered something that is not JSON") from None
        if not rep.get("ok"):
            raise ActError(rep.get("code") or "error", rep.get("error") or "")
        return rep


class _State:
    """Everything a process knows between calls."""

    def __init__(self):
        self.channel = None
        self.size = None  # Size, asked once per process
        self.pointer = None  # Point this process last knew, or None
        self.drag = None  # {"button", "path": [Point]} between mouseDown and mouseUp
        self.held = []  # [[key, used]] in keyDown order
        self.broken = False  # a request failed: send nothing more at exit
        self.last_act = None  # time.monotonic() when the last act was sent


_st = _State()
_fd = os.environ.get(ENV_FD)
if _fd:
    try:
        # Programs the command starts do not get the channel.
        os.set_inheritable(int(_fd), False)
    except (OSError, ValueError):
        pass


def _channel():
    if _st.channel is None:
        fd = os.environ.get(ENV_FD)
        if not fd:
            raise NoActChannel(
                "pyautogui on open-bot only works in the execute of an open-bot evaluation "
                "screen (%s is not set)" % ENV_FD)
        try:
            _st.channel = _Channel(int(fd))
        except (OSError, ValueError) as e:
            raise NoActChannel("the act channel %s=%s cannot be opened: %s" % (ENV_FD, fd, e)) from None
    return _st.channel


def _request(obj):
    try:
        rep = _channel().request(obj)
    except ActError:
        _st.broken = True
        raise
    return rep


def _act(actions):
    """Sends actions as few acts as the bounds allow (one, nearly always)."""
    for i in range(0, len(actions), _MAX_ACTIONS):
        _st.last_act = time.monotonic()
        rep = _request({"act": actions[i:i + _MAX_ACTIONS]})
        p = rep.get("pointer")
        if isinstance(p, dict) and isinstance(p.get("x"), int) and isinstance(p.get("y"), int):
            _st.pointer = Point(p["x"], p["y"])


# --- call wrapper: FAILSAFE before, PAUSE after ------------------------------


def _api(fn):
    def wrapper(*args, **kwargs):
        pause = kwargs.pop("_pause", True)
        _channel()  # without one, every call says so, even those that send nothing yet
        _failsafe_check()
        start = time.monotonic()
        out = fn(*args, **kwargs)
        if pause and PAUSE:
            # PAUSE from this call's last input (its last act's start), or
            # from its end when it sent none.
            rest = PAUSE
            if _st.last_act is not None and _st.last_act >= start:
                rest -= time.monotonic() - _st.last_act
            if rest > 0:
                time.sleep(rest)
        return out

    wrapper.__name__ = fn.__name__
    wrapper.__qualname__ = fn.__qualname__
    wrapper.__doc__ = fn.__doc__
    wrapper.__wrapped__ = fn
    return wrapper


def _failsafe_check():
    p = _st.pointer
    if FAILSAFE and p is not None and tuple(p) in [tuple(q) for q in FAILSAFE_POINTS]:
        raise FailSafeException(
            "pyautogui's fail-safe: the pointer is at %s, a corner in FAILSAFE_POINTS. "
            "Set pyautogui.FAILSAFE = False to turn it off." % (tuple(p),))


def failSafeCheck():
    """Raises FailSafeException when the pointer is on a FAILSAFE_POINTS corner."""
    _failsafe_check()


# --- screen and pointer ---------------------------------------------------


def size():
    """The screen's size in pixels, asked once per process."""
    if _st.size is None:
        rep = _request({"query": "size"})
        _st.size = Size(int(rep["width"]), int(rep["height"]))
    return _st.size


resolution = size


def position(x=None, y=None):
    """Where the pointer is (a given x or y replaces that coordinate)."""
    if _st.drag is not None:
        p = _st.drag["path"][-1]
    else:
        rep = _request({"query": "pointer"})
        p = Point(int(rep["x"]), int(rep["y"]))
        _st.pointer = p
    return Point(int(x) if x is not None else p.x, int(y) if y is not None else p.y)


def _current():
    """The pointer without a request when this process knows it."""
    if _st.drag is not None:
        return _st.drag["path"][-1]
    if _st.pointer is not None:
        return _st.pointer
    return position()


def onScreen(x, y=None):
    """Whether (x, y) is on the screen; x may be an (x, y) pair."""
    if y is None and _is_seq(x):
        x, y = x[0], x[1]
    try:
        x, y = int(x), int(y)
    except (TypeError, ValueError):
        return False
    w, h = size()
    return 0 <= x < w and 0 <= y < h


def _is_seq(v):
    return not isinstance(v, (str, bytes)) and hasattr(v, "__len__") and hasattr(v, "__getitem__")


def _xy(x, y, what):
    """pyautogui's coordinate forms to a Point on the screen."""
    if isinstance(x, (str, bytes)):
        raise NotImplementedError(
            "%s(%r): finding an image on the screen is not available on open-bot; "
            "pass coordinates" % (what, x))
    if _is_seq(x):
        if y is not None:
            raise PyAutoGUIException("%s: with x a sequence, y must be None" % what)
        if len(x) == 2:
            x, y = x[0], x[1]
        elif len(x) == 4:  # (left, top, width, height): its centre
            x, y = x[0] + int(x[2]) // 2, x[1] + int(x[3]) // 2
        else:
            raise PyAutoGUIException("%s: x must be a number, an (x, y) pair or a box" % what)
    if x is None or y is None:
        cur = _current()
        x = cur.x if x is None else x
        y = cur.y if y is None else y
    try:
        p = Point(int(x), int(y))
    except (TypeError, ValueError):
        raise PyAutoGUIException("%s: x and y must be numbers, not %r, %r" % (what, x, y)) from None
    _check(p, what)
    return p


def _offset(xOffset, yOffset, what):
    if _is_seq(xOffset):
        xOffset, yOffset = xOffset[0], xOffset[1]
    cur = _current()
    p = Point(cur.x + int(xOffset or 0), cur.y + int(yOffset or 0))
    _check(p, what)
    return p


def _check(p, what):
    w, h = size()
    if not (0 <= p.x < w and 0 <= p.y < h):
        raise PyAutoGUIException(
            "%s: (%d, %d) is outside the screen (x 0..%d, y 0..%d)" % (what, p.x, p.y, w - 1, h - 1))


def _button(b, what):
    names = {"left": LEFT, "primary": LEFT, "right": RIGHT, "secondary": RIGHT, "middle": MIDDLE,
             1: LEFT, 2: MIDDLE, 3: RIGHT}
    key = b.lower() if isinstance(b, str) else b
    if key not in names:
        raise PyAutoGUIException("%s: button must be left, middle, right, primary or secondary, not %r" % (what, b))
    return names[key]


def _no_held_keys(what):
    if _st.held:
        keys = ", ".join(k for k, _ in _st.held)
        raise PyAutoGUIException(
            "%s while keys are held (%s): open-bot cannot click, drag or scroll with held keys; "
            "nothing was done" % (what, keys))


def _wait_actions(seconds):
    ms = int(round(float(seconds) * 1000))
    out = []
    while ms > 0:
        n = min(ms, _MAX_WAIT_MS)
        out.append({"type": "wait", "ms": n})
        ms -= n
    return out


# --- mouse ------------------------------------------------------------------


def _release():
    """Sends a pending mouseDown: a drag, or a click when it did not move."""
    d = _st.drag
    if d is None:
        return
    _st.drag = None
    path = []
    for p in d["path"]:
        if not path or path[-1] != p:
            path.append(p)
    if len(path) == 1:
        _send_click(path[0], d["button"], 1, 0.0)
        return
    if d["button"] != LEFT:
        raise PyAutoGUIException("a %s-button drag is not available on open-bot (left only); nothing was done" % d["button"])
    if len(path) > _MAX_DRAG_POINTS:  # keep the ends, thin the middle evenly
        step = (len(path) - 1) / (_MAX_DRAG_POINTS - 1)
        path = [path[int(round(i * step))] for i in range(_MAX_DRAG_POINTS)]
    _act([{"type": "drag", "path": [{"x": p.x, "y": p.y} for p in path]}])
    _st.pointer = path[-1]


def _send_click(p, button, clicks, interval):
    if clicks <= 0:
        _act([{"type": "move", "x": p.x, "y": p.y}])
    elif button == LEFT and clicks == 1:
        _act([{"type": "click", "x": p.x, "y": p.y, "button": "left"}])
    elif button == LEFT and clicks == 2:
        _act([{"type": "double_click", "x": p.x, "y": p.y}])
    elif button == LEFT:
        raise PyAutoGUIException(
            "%d left clicks: open-bot settles after each action, so a third click cannot follow "
            "a double click in time (tripleClick is not available); nothing was clicked" % clicks)
    else:
        actions = []
        for i in range(clicks):
            if i and interval:
                actions.extend(_wait_actions(interval))
            actions.append({"type": "click", "x": p.x, "y": p.y, "button": button})
        _act(actions)
    _st.pointer = p


@_api
def click(x=None, y=None, clicks=1, interval=0.0, button=PRIMARY, duration=0.0, tween=None, logScreenshot=None):
    """Clicks at (x, y) (the pointer when not given)."""
    b = _button(button, "click")
    _no_held_keys("click")
    _release()
    p = _xy(x, y, "click")
    _send_click(p, b, int(clicks), interval)


@_api
def leftClick(x=None, y=None, interval=0.0, duration=0.0, tween=None, logScreenshot=None):
    """A left click."""
    click(x, y, 1, interval, LEFT, _pause=False)


@_api
def rightClick(x=None, y=None, duration=0.0, tween=None, logScreenshot=None):
    """A right click."""
    click(x, y, 1, 0.0, RIGHT, _pause=False)


@_api
def middleClick(x=None, y=None, duration=0.0, tween=None, logScreenshot=None):
    """A middle click."""
    click(x, y, 1, 0.0, MIDDLE, _pause=False)


@_api
def doubleClick(x=None, y=None, interval=0.0, button=LEFT, duration=0.0, tween=None, logScreenshot=None):
    """A double click (two single clicks for right and middle)."""
    click(x, y, 2, interval, button, _pause=False)


@_api
def tripleClick(x=None, y=None, interval=0.0, button=LEFT, duration=0.0, tween=None, logScreenshot=None):
    """Three clicks: raises for the left button (see the module's doc)."""
    click(x, y, 3, interval, button, _pause=False)


@_api
def moveTo(x=None, y=None, duration=0.0, tween=None, logScreenshot=False):
    """Moves the pointer to (x, y); between mouseDown and mouseUp, a point of the drag."""
    p = _xy(x, y, "moveTo")
    if _st.drag is not None:
        _st.drag["path"].append(p)
        return
    _act([{"type": "move", "x": p.x, "y": p.y}])
    _st.pointer = p


@_api
def moveRel(xOffset=None, yOffset=None, duration=0.0, tween=None, logScreenshot=False):
    """Moves the pointer by (xOffset, yOffset)."""
    p = _offset(xOffset, yOffset, "moveRel")
    moveTo(p.x, p.y, _pause=False)


move = moveRel


@_api
def mouseDown(x=None, y=None, button=PRIMARY, duration=0.0, tween=None, logScreenshot=None):
    """Presses the button at (x, y): sent with the mouseUp() as one drag (or a click)."""
    b = _button(button, "mouseDown")
    _no_held_keys("mouseDown")
    _release()
    p = _xy(x, y, "mouseDown")
    _st.drag = {"button": b, "path": [p]}


@_api
def mouseUp(x=None, y=None, button=PRIMARY, duration=0.0, tween=None, logScreenshot=None):
    """Releases the button (at (x, y) when given): sends the drag or click since mouseDown()."""
    _button(button, "mouseUp")
    if _st.drag is None:
        if x is not None or y is not None:
            moveTo(x, y, _pause=False)
        sys.stderr.write("pyautogui (open-bot): mouseUp() without a mouseDown() in this command; "
                         "no button was down\n")
        return
    if x is not None or y is not None:
        _st.drag["path"].append(_xy(x, y, "mouseUp"))
    _release()


@_api
def dragTo(x=None, y=None, duration=0.0, tween=None, button=PRIMARY, logScreenshot=None, mouseDownUp=True):
    """Drags from the pointer to (x, y) with the left button."""
    b = _button(button, "dragTo")
    p = _xy(x, y, "dragTo")
    if not mouseDownUp:  # the button is where mouseDown/mouseUp left it
        moveTo(p.x, p.y, _pause=False)
        return
    _no_held_keys("dragTo")
    _release()
    start = _current()
    _st.drag = {"button": b, "path": [start, p]}
    _release()


@_api
def dragRel(xOffset=0, yOffset=0, duration=0.0, tween=None, button=PRIMARY, logScreenshot=None, mouseDownUp=True):
    """Drags from the pointer by (xOffset, yOffset)."""
    p = _offset(xOffset, yOffset, "dragRel")
    dragTo(p.x, p.y, button=button, mouseDownUp=mouseDownUp, _pause=False)


drag = dragRel


def _scroll(clicks, x, y, axis, what):
    _no_held_keys(what)
    _release()
    clicks = int(clicks)
    if x is not None or y is not None:
        p = _xy(x, y, what)
    else:
        p = _current()
    if clicks == 0:
        if x is not None or y is not None:
            moveTo(p.x, p.y, _pause=False)
        return
    # pyautogui: a positive vertical scroll goes up, a positive horizontal
    # one right; the act's scroll_y is positive down.
    px = -clicks * _WHEEL_PX if axis == "y" else clicks * _WHEEL_PX
    actions = []
    while px:
        n = max(-_MAX_SCROLL_PX, min(_MAX_SCROLL_PX, px))
        sx, sy = (0, n) if axis == "y" else (n, 0)
        actions.append({"type": "scroll", "x": p.x, "y": p.y, "scroll_x": sx, "scroll_y": sy})
        px -= n
    _act(actions)
    _st.pointer = p


@_api
def scroll(clicks, x=None, y=None, logScreenshot=None):
    """Scrolls clicks wheel clicks, up when positive, at (x, y) or the pointer."""
    _scroll(clicks, x, y, "y", "scroll")


@_api
def vscroll(clicks, x=None, y=None, logScreenshot=None):
    """scroll()."""
    _scroll(clicks, x, y, "y", "vscroll")


@_api
def hscroll(clicks, x=None, y=None, logScreenshot=None):
    """Scrolls horizontally, right when positive."""
    _scroll(clicks, x, y, "x", "hscroll")


# --- keyboard -------------------------------------------------------------

# pyautogui's key names.
KEYBOARD_KEYS = [
    "\t", "\n", "\r", " ", "!", '"', "#", "$", "%", "&", "'", "(", ")", "*", "+", ",", "-", ".", "/",
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", ":", ";", "<", "=", ">", "?", "@", "[", "\\",
    "]", "^", "_", "`", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o",
    "p", "q", "r", "s", "t", "u", "v", "w", "x", "y", "z", "{", "|", "}", "~",
    "accept", "add", "alt", "altleft", "altright", "apps", "backspace", "browserback",
    "browserfavorites", "browserforward", "browserhome", "browserrefresh", "browsersearch",
    "browserstop", "capslock", "clear", "convert", "ctrl", "ctrlleft", "ctrlright", "decimal",
    "del", "delete", "divide", "down", "end", "enter", "esc", "escape", "execute",
    "f1", "f10", "f11", "f12", "f13", "f14", "f15", "f16", "f17", "f18", "f19", "f2", "f20", "f21",
    "f22", "f23", "f24", "f3", "f4", "f5", "f6", "f7", "f8", "f9", "final", "fn", "hanguel",
    "hangul", "hanja", "help", "home", "insert", "junja", "kana", "kanji", "launchapp1",
    "launchapp2", "launchmail", "launchmediaselect", "left", "modechange", "multiply",
    "nexttrack", "nonconvert", "num0", "num1", "num2", "num3", "num4", "num5", "num6", "num7",
    "num8", "num9", "numlock", "pagedown", "pageup", "pause", "pgdn", "pgup", "playpause",
    "prevtrack", "print", "printscreen", "prntscrn", "prtsc", "prtscr", "return", "right",
    "scrolllock", "select", "separator", "shift", "shiftleft", "shiftright", "sleep", "space",
    "stop", "subtract", "tab", "up", "volumedown", "volumemute", "volumeup", "win", "winleft",
    "winright", "yen", "command", "option", "optionleft", "optionright",
]
KEY_NAMES = KEYBOARD_KEYS

# pyautogui's names (and a few common others) onto open-bot's.
_KEY_MAP = {
    "\n": "enter", "\r": "enter", "\t": "tab", " ": "space", "\b": "backspace",
    "enter": "enter", "return": "enter", "tab": "tab", "space": "space",
    "backspace": "backspace", "delete": "delete", "del": "delete", "insert": "insert",
    "esc": "escape", "escape": "escape",
    "up": "up", "down": "down", "left": "left", "right": "right",
    "home": "home", "end": "end", "pageup": "pageup", "pgup": "pageup",
    "pagedown": "pagedown", "pgdn": "pagedown", "capslock": "capslock",
    "ctrl": "ctrl", "ctrlleft": "ctrl", "ctrlright": "ctrl", "control": "ctrl",
    "shift": "shift", "shiftleft": "shift", "shiftright": "shift",
    "alt": "alt", "altleft": "alt", "altright": "alt",
    "option": "option", "optionleft": "option", "optionright": "option",
    "win": "win", "winleft": "win", "winright": "win", "super": "super", "meta": "meta",
    "command": "command", "cmd": "command",
    # Not pyautogui's, but names agents write (and botd takes).
    "page_down": "pagedown", "page_up": "pageup",
    "arrowup": "up", "arrowdown": "down", "arrowleft": "left", "arrowright": "right",
    "add": "+", "subtract": "-", "multiply": "*", "divide": "/", "decimal": ".",
}
_KEY_MAP.update({"f%d" % i: "f%d" % i for i in range(1, 13)})
_KEY_MAP.update({"num%d" % i: str(i) for i in range(10)})


def _key(name):
    """A pyautogui key name as open-bot's, or ValueError."""
    if not isinstance(name, str) or name == "":
        raise ValueError("a key name is a non-empty string, not %r" % (name,))
    if name in _KEY_MAP:
        return _KEY_MAP[name]
    if len(name) == 1:
        if name.isprintable():
            return name
        raise ValueError("key %r is a control character with no key on open-bot" % name)
    low = name.lower()
    if low in _KEY_MAP:
        return _KEY_MAP[low]
    if low in KEYBOARD_KEYS:
        raise ValueError("key %r has no equivalent on open-bot (it takes modifiers, enter, tab, "
                         "escape, backspace, delete, insert, arrows, page keys, home, end, capslock, "
                         "f1-f12 and single characters)" % name)
    raise ValueError("%r is not a pyautogui key name" % name)


def isValidKey(key):
    """Whether key is a key name open-bot can press."""
    try:
        _key(key)
        return True
    except ValueError:
        return False


def _combo(keys):
    """The held keys and then keys, each once, in order; marks the held ones used."""
    out = []
    for k, _ in _st.held:
        if k not in out:
            out.append(k)
    for k in keys:
        if k not in out:
            out.append(k)
    if len(out) > _MAX_KEYS:
        raise ValueError("at most %d keys at once (%s)" % (_MAX_KEYS, "+".join(out)))
    for h in _st.held:
        h[1] = True
    return out


@_api
def press(keys, presses=1, interval=0.0, logScreenshot=None):
    """Presses keys (a name or a list of names, one after another), presses times."""
    names = [keys] if isinstance(keys, str) else list(keys)
    mapped = [_key(k) for k in names]
    _release()
    actions = []
    for i in range(int(presses)):
        for k in mapped:
            actions.append({"type": "keypress", "keys": _combo([k])})
        if interval and i < int(presses) - 1:
            actions.extend(_wait_actions(interval))
    if actions:
        _act(actions)


@_api
def hotkey(*args, **kwargs):
    """Presses the keys together (ctrl, c: ctrl+c); interval is not needed."""
    if len(args) == 1 and _is_seq(args[0]):
        args = tuple(args[0])
    if not args:
        return
    mapped = [_key(k) for k in args]
    _release()
    _act([{"type": "keypress", "keys": _combo(mapped)}])


shortcut = hotkey


@_api
def typewrite(message, interval=0.0, logScreenshot=None):
    """Types message (a str), or presses each key name of a list in turn."""
    _release()
    if isinstance(message, str):
        if not message:
            return
        if _st.held:  # each character with the held keys
            actions = [{"type": "keypress", "keys": _combo([_key(c)])} for c in message]
        else:
            actions = [{"type": "type", "text": message[i:i + _MAX_TYPE_CHARS]}
                       for i in range(0, len(message), _MAX_TYPE_CHARS)]
        _act(actions)
        return
    mapped = [_key(k) for k in message]
    actions = []
    for i, k in enumerate(mapped):
        if i and interval:
            actions.extend(_wait_actions(interval))
        actions.append({"type": "keypress", "keys": _combo([k])})
    if actions:
        _act(actions)


write = typewrite


@_api
def keyDown(key, logScreenshot=None):
    """Holds key for the calls that follow, until keyUp(key) (sends nothing)."""
    k = _key(key)
    if all(h[0] != k for h in _st.held):
        _st.held.append([k, False])


@_api
def keyUp(key, logScreenshot=None):
    """Lets key go; a key nothing used is pressed now, with the keys held with it."""
    k = _key(key)
    for i, h in enumerate(_st.held):
        if h[0] == k:
            break
    else:
        return  # not held here: nothing to let go
    if not _st.held[i][1]:
        _release()
        _act([{"type": "keypress", "keys": _combo([])}])
    del _st.held[i]


@contextlib.contextmanager
def hold(keys, logScreenshot=None, _pause=True):
    """with hold('shift'): ... holds keys for the block."""
    names = [keys] if isinstance(keys, str) else list(keys)
    for k in names:
        keyDown(k, _pause=False)
    try:
        yield
    finally:
        for k in reversed(names):
            keyUp(k, _pause=False)


# --- what is not offered ---------------------------------------------------------


def _unavailable(name, why):
    def f(*args, **kwargs):
        raise NotImplementedError("pyautogui.%s is not available on open-bot: %s" % (name, why))

    f.__name__ = name
    return f


_NO_SCREEN = "the harness takes the screenshot itself (GET /screenshot); act on coordinates"
screenshot = _unavailable("screenshot", _NO_SCREEN)
locateOnScreen = _unavailable("locateOnScreen", _NO_SCREEN)
locateCenterOnScreen = _unavailable("locateCenterOnScreen", _NO_SCREEN)
locateAllOnScreen = _unavailable("locateAllOnScreen", _NO_SCREEN)
locateOnWindow = _unavailable("locateOnWindow", _NO_SCREEN)
locate = _unavailable("locate", _NO_SCREEN)
locateAll = _unavailable("locateAll", _NO_SCREEN)
pixel = _unavailable("pixel", _NO_SCREEN)
pixelMatchesColor = _unavailable("pixelMatchesColor", _NO_SCREEN)
_NO_BOX = "no one is at this screen to answer a message box"
alert = _unavailable("alert", _NO_BOX)
confirm = _unavailable("confirm", _NO_BOX)
prompt = _unavailable("prompt", _NO_BOX)
password = _unavailable("password", _NO_BOX)


def center(box):
    """The centre of a (left, top, width, height) box."""
    return Point(int(box[0] + box[2] / 2), int(box[1] + box[3] / 2))


def sleep(seconds):
    """time.sleep."""
    time.sleep(seconds)


def countdown(seconds):
    """Counts down in seconds on stdout, as pyautogui does."""
    for i in range(seconds, 0, -1):
        print(str(i), end=" ", flush=True)
        time.sleep(1)
    print()


# --- easing (accepted as tween, never animated) ----------------------------------


def linear(n):
    """Easing: n."""
    return n


def easeInQuad(n):
    """Easing: n squared."""
    return n * n


def easeOutQuad(n):
    """Easing: 1 - (1 - n) squared."""
    return 1 - (1 - n) * (1 - n)


def easeInOutQuad(n):
    """Easing: quadratic in, then out."""
    return 2 * n * n if n < 0.5 else 1 - 2 * (1 - n) * (1 - n)


def easeInCubic(n):
    """Easing: n cubed."""
    return n ** 3


def easeOutCubic(n):
    """Easing: 1 - (1 - n) cubed."""
    return 1 - (1 - n) ** 3


def easeInOutCubic(n):
    """Easing: cubic in, then out."""
    return 4 * n ** 3 if n < 0.5 else 1 - 4 * (1 - n) ** 3


def easeInSine(n):
    """Easing: a quarter sine in."""
    return 1 - math.cos(n * math.pi / 2)


def easeOutSine(n):
    """Easing: a quarter sine out."""
    return math.sin(n * math.pi / 2)


def easeInOutSine(n):
    """Easing: a half cosine."""
    return (1 - math.cos(n * math.pi)) / 2


def easeOutBounce(n):
    """Easing: bounces into 1."""
    k, d = 7.5625, 2.75
    if n < 1 / d:
        return k * n * n
    if n < 2 / d:
        n -= 1.5 / d
        return k * n * n + 0.75
    if n < 2.5 / d:
        n -= 2.25 / d
        return k * n * n + 0.9375
    n -= 2.625 / d
    return k * n * n + 0.984375


def easeInBounce(n):
    """Easing: bounces out of 0."""
    return 1 - easeOutBounce(1 - n)


def easeInOutBounce(n):
    """Easing: bounce in, then out."""
    return (1 - easeOutBounce(1 - 2 * n)) / 2 if n < 0.5 else (1 + easeOutBounce(2 * n - 1)) / 2


def easeInElastic(n, amplitude=1, period=0.3):
    """Easing: an elastic wind-up."""
    if n in (0, 1):
        return n
    return -(2 ** (10 * (n - 1))) * math.sin((n - 1 - period / 4) * 2 * math.pi / period) * amplitude


def easeOutElastic(n, amplitude=1, period=0.3):
    """Easing: an elastic overshoot."""
    return 1 - easeInElastic(1 - n, amplitude, period)


def easeInOutElastic(n, amplitude=1, period=0.5):
    """Easing: elastic in, then out."""
    return easeInElastic(2 * n, amplitude, period) / 2 if n < 0.5 else (1 + easeOutElastic(2 * n - 1, amplitude, period)) / 2


def getPointOnLine(x1, y1, x2, y2, n):
    """The point a fraction n of the way from (x1, y1) to (x2, y2)."""
    return (x1 + (x2 - x1) * n, y1 + (y2 - y1) * n)


# --- the end of the command ---------------------------------------------------------


def _at_exit():
    """A button still down is released where the pointer went; a held key that
    nothing used is not pressed: neither can outlive the command."""
    if _st.broken or _st.channel is None:
        return
    if _st.drag is not None:
        moved = len(set(_st.drag["path"])) > 1
        sys.stderr.write(
            "pyautogui (open-bot): mouseDown() without mouseUp(): the button was %s at the end "
            "of the command (a button cannot stay held between commands)\n"
            % ("released there, as a drag" if moved else "not pressed"))
        if moved:
            try:
                _release()
            except Exception as e:  # the command is ending; say why it did not happen
                sys.stderr.write("pyautogui (open-bot): the drag was not done: %s\n" % e)
        _st.drag = None
    unused = [k for k, used in _st.held if not used]
    if unused:
        sys.stderr.write("pyautogui (open-bot): keyDown(%s) without keyUp(): nothing was pressed "
                         "(a key cannot stay held between commands)\n" % ", ".join(map(repr, unused)))


atexit.register(_at_exit)
