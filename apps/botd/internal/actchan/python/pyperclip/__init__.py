"""pyperclip for an open-bot evaluation screen (issue 34, OSWorld).

copy() and paste() set and read the screen's CLIPBOARD through botd's act
channel (the same one pyautogui uses, see its doc): the command's own
screen, under its lease, never another screen's. Agents use it to type what
typewrite() could not, as pyperclip.copy(text) then hotkey('ctrl', 'v').
"""

import os

import pyautogui as _pg

__version__ = "1.8.2+openbot"


class PyperclipException(RuntimeError):
    """copy() was given something that is not text."""


def copy(text):
    """Puts text on the screen's clipboard (numbers and booleans as their str)."""
    if isinstance(text, (int, float, bool)):
        text = str(text)
    if not isinstance(text, str):
        raise PyperclipException("only str, int, float and bool values can be copied, not %s" % type(text).__name__)
    _pg._request({"clipboard": text})


def paste():
    """The screen's clipboard text ("" when nothing offers text)."""
    return _pg._request({"query": "clipboard"})["text"]


def determine_clipboard():
    """pyperclip's; the functions are always copy() and paste() here."""
    return copy, paste


def set_clipboard(name):
    """pyperclip's; open-bot has one clipboard mechanism, the act channel."""


def is_available():
    """Whether this process has an act channel."""
    return bool(os.environ.get(_pg.ENV_FD))


__all__ = ["copy", "paste", "PyperclipException", "determine_clipboard", "set_clipboard", "is_available"]
