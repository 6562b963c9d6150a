"""Tests of the pyautogui and pyperclip shims against a fake botd.

Run: python3 -m unittest test_shim -v (in this directory). The fake end of
the act channel is a socketpair: it records each request line and answers
like botd's actchan. Each test checks the exact requests a call sends.
"""

import itertools
import json
import os
import socket
import subprocess
import sys
import threading
import time
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import pyautogui  # noqa: E402
import pyperclip  # noqa: E402

DEFAULT_PAUSE = pyautogui.PAUSE
DEFAULT_FAILSAFE = pyautogui.FAILSAFE

SIZE = {"query": "size"}
POINTER = {"query": "pointer"}


class FakeBotd:
    """The botd end of an act channel: records requests, answers them."""

    def __init__(self, width=1920, height=1080, pointer=(960, 540)):
        self.sock, child = socket.socketpair()
        self.child_fd = child.detach()
        self.width, self.height = width, height
        self.pointer = pointer
        self.clipboard = ""
        self.refuse = None  # (code, message) to refuse acts with
        self.lines = []  # raw request lines
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def sent(self):
        return [json.loads(line) for line in self.lines]

    def _answer(self, req):
        if "act" in req:
            if self.refuse:
                return {"ok": False, "code": self.refuse[0], "error": self.refuse[1]}
            return {"ok": True}
        if req.get("query") == "pointer":
            return {"ok": True, "x": self.pointer[0], "y": self.pointer[1]}
        if req.get("query") == "size":
            return {"ok": True, "width": self.width, "height": self.height}
        if req.get("query") == "clipboard":
            return {"ok": True, "text": self.clipboard}
        if "clipboard" in req:
            self.clipboard = req["clipboard"]
            return {"ok": True}
        return {"ok": False, "code": "bad_request", "error": "unknown request"}

    def _serve(self):
        r = self.sock.makefile("rb")
        while True:
            line = r.readline()
            if not line:
                return
            self.lines.append(line)
            rep = self._answer(json.loads(line))
            try:
                self.sock.sendall(json.dumps(rep).encode() + b"\n")
            except OSError:
                return

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)


def act(*actions):
    return {"act": list(actions)}


def click(x, y, button="left"):
    return {"type": "click", "x": x, "y": y, "button": button}


def keys(*k):
    return {"type": "keypress", "keys": list(k)}


class ShimTest(unittest.TestCase):
    """The module in this process, on a fresh fake channel per test."""

    def setUp(self):
        self.botd = FakeBotd()
        self.env = mock.patch.dict(os.environ, {pyautogui.ENV_FD: str(self.botd.child_fd)})
        self.env.start()
        pyautogui._st = pyautogui._State()
        pyautogui.PAUSE = 0
        pyautogui.FAILSAFE = False

    def tearDown(self):
        ch = pyautogui._st.channel
        pyautogui._st = pyautogui._State()
        if ch is not None:
            ch._sock.close()
        else:
            os.close(self.botd.child_fd)
        self.botd.close()
        self.env.stop()
        pyautogui.PAUSE = DEFAULT_PAUSE
        pyautogui.FAILSAFE = DEFAULT_FAILSAFE

    def assertSent(self, *want):
        self.assertEqual(self.botd.sent, list(want))

    # --- the wire ---

    def test_one_compact_json_line_per_request(self):
        pyautogui.click(100, 200)
        self.assertEqual(self.botd.lines, [
            b'{"query":"size"}\n',
            b'{"act":[{"type":"click","x":100,"y":200,"button":"left"}]}\n',
        ])

    def test_non_ascii_text_is_sent_as_json_escapes(self):
        pyautogui.write("h\u00e9 \u2603\n")
        self.assertSent(act({"type": "type", "text": "h\u00e9 \u2603\n"}))
        self.assertIn(b"\\u00e9", self.botd.lines[0])

    # --- clicks ---

    def test_click_forms(self):
        pyautogui.click(100, 200)
        pyautogui.click((5, 6))
        pyautogui.click(x=7.9, y=8.2)
        pyautogui.click(button="right", x=1, y=2, clicks=1)
        pyautogui.click(10, 20, button="secondary")
        pyautogui.click([0, 0, 100, 50])  # a box: its centre
        self.assertSent(SIZE, act(click(100, 200)), act(click(5, 6)), act(click(7, 8)),
                        act(click(1, 2, "right")), act(click(10, 20, "right")), act(click(50, 25)))

    def test_click_at_the_pointer(self):
        self.botd.pointer = (300, 400)
        pyautogui.click()
        pyautogui.click()  # the pointer is known now: no second query
        self.assertSent(POINTER, SIZE, act(click(300, 400)), act(click(300, 400)))

    def test_click_fills_a_missing_coordinate_from_the_pointer(self):
        self.botd.pointer = (300, 400)
        pyautogui.click(x=10)
        self.assertSent(POINTER, SIZE, act(click(10, 400)))

    def test_click_kinds(self):
        pyautogui.doubleClick(10, 20)
        pyautogui.click(10, 20, clicks=2)
        pyautogui.rightClick(30, 40)
        pyautogui.middleClick(x=50, y=60)
        pyautogui.doubleClick(1, 2, button="right")
        pyautogui.leftClick(3, 4)
        pyautogui.click(5, 6, clicks=0)
        dbl = {"type": "double_click", "x": 10, "y": 20}
        self.assertSent(SIZE, act(dbl), act(dbl), act(click(30, 40, "right")),
                        act(click(50, 60, "middle")), act(click(1, 2, "right"), click(1, 2, "right")),
                        act(click(3, 4)), act({"type": "move", "x": 5, "y": 6}))

    def test_right_clicks_with_an_interval_wait_between(self):
        pyautogui.click(1, 2, clicks=2, interval=0.25, button="right")
        self.assertSent(SIZE, act(click(1, 2, "right"), {"type": "wait", "ms": 250}, click(1, 2, "right")))

    def test_triple_click_is_refused_and_sends_nothing(self):
        with self.assertRaisesRegex(pyautogui.PyAutoGUIException, "tripleClick is not available"):
            pyautogui.tripleClick(10, 20)
        with self.assertRaises(pyautogui.PyAutoGUIException):
            pyautogui.click(10, 20, clicks=3)
        self.assertSent(SIZE)

    def test_outside_the_screen_raises_and_sends_nothing(self):
        for x, y in [(1920, 5), (5, 1080), (-1, 0)]:
            with self.assertRaisesRegex(pyautogui.PyAutoGUIException, "outside the screen"):
                pyautogui.click(x, y)
        self.assertSent(SIZE)

    def test_size_is_asked_once(self):
        self.assertEqual(pyautogui.size(), (1920, 1080))
        self.assertEqual(pyautogui.size().width, 1920)
        self.assertTrue(pyautogui.onScreen(1919, 1079))
        self.assertFalse(pyautogui.onScreen((1920, 0)))
        self.assertSent(SIZE)

    def test_image_arguments_are_not_available(self):
        with self.assertRaisesRegex(NotImplementedError, "finding an image"):
            pyautogui.click("button.png")
        for f in (pyautogui.screenshot, pyautogui.locateOnScreen, pyautogui.locateCenterOnScreen):
            with self.assertRaisesRegex(NotImplementedError, "GET /screenshot"):
                f("x.png")
        self.assertSent()

    # --- moves and drags ---

    def test_moves(self):
        pyautogui.moveTo(100, 200, duration=0.7, tween=pyautogui.easeInQuad)
        pyautogui.moveRel(10, -5)
        pyautogui.move(0, 5)
        pyautogui.moveTo((1, 2))
        self.assertSent(SIZE, act({"type": "move", "x": 100, "y": 200}), act({"type": "move", "x": 110, "y": 195}),
                        act({"type": "move", "x": 110, "y": 200}), act({"type": "move", "x": 1, "y": 2}))

    def test_drag_to_and_rel(self):
        pyautogui.moveTo(10, 20)
        pyautogui.dragTo(500, 600, duration=1.0, button="left", mouseDownUp=True)  # computer_13's DRAG_TO
        pyautogui.dragRel(-100, 0)
        pyautogui.drag(0, 10)
        path = lambda *ps: {"type": "drag", "path": [{"x": x, "y": y} for x, y in ps]}  # noqa: E731
        self.assertSent(SIZE, act({"type": "move", "x": 10, "y": 20}), act(path((10, 20), (500, 600))),
                        act(path((500, 600), (400, 600))), act(path((400, 600), (400, 610))))

    def test_drag_from_an_unknown_pointer_asks_for_it(self):
        self.botd.pointer = (7, 8)
        pyautogui.dragTo(70, 80)
        self.assertSent(SIZE, POINTER, act({"type": "drag", "path": [{"x": 7, "y": 8}, {"x": 70, "y": 80}]}))

    def test_mouse_down_moves_up_are_one_drag(self):
        pyautogui.mouseDown(10, 10)
        pyautogui.moveTo(20, 30)
        self.assertEqual(pyautogui.position(), (20, 30))  # the drag's point, no request
        pyautogui.moveRel(5, 0)
        pyautogui.dragTo(40, 40, mouseDownUp=False)
        pyautogui.mouseUp(50, 50)
        self.assertSent(SIZE, act({"type": "drag", "path": [
            {"x": 10, "y": 10}, {"x": 20, "y": 30}, {"x": 25, "y": 30}, {"x": 40, "y": 40}, {"x": 50, "y": 50}]}))

    def test_mouse_down_up_in_place_is_a_click(self):
        pyautogui.mouseDown(10, 10, button="right")
        pyautogui.mouseUp(button="right")
        self.assertSent(SIZE, act(click(10, 10, "right")))

    def test_another_call_releases_the_button_first(self):
        pyautogui.mouseDown(10, 10)
        pyautogui.moveTo(20, 20)
        pyautogui.press("enter")
        self.assertSent(SIZE, act({"type": "drag", "path": [{"x": 10, "y": 10}, {"x": 20, "y": 20}]}),
                        act(keys("enter")))

    def test_a_right_button_drag_is_refused(self):
        pyautogui.mouseDown(10, 10, button="right")
        pyautogui.moveTo(20, 20)
        with self.assertRaisesRegex(pyautogui.PyAutoGUIException, "left only"):
            pyautogui.mouseUp()
        self.assertSent(SIZE)

    def test_a_long_drag_is_thinned_to_the_bound(self):
        pyautogui.mouseDown(0, 0)
        for i in range(1, 300):
            pyautogui.moveTo(i, i)
        pyautogui.mouseUp()
        path = self.botd.sent[1]["act"][0]["path"]
        self.assertEqual(len(path), 100)
        self.assertEqual(path[0], {"x": 0, "y": 0})
        self.assertEqual(path[-1], {"x": 299, "y": 299})

    # --- scrolling ---

    def test_scroll(self):
        self.botd.pointer = (100, 100)
        pyautogui.scroll(3)
        pyautogui.scroll(-2, x=5, y=6)
        pyautogui.vscroll(1)
        pyautogui.hscroll(4, 7, 8)
        pyautogui.hscroll(-1)
        pyautogui.scroll(0)
        sc = lambda x, y, sx, sy: {"type": "scroll", "x": x, "y": y, "scroll_x": sx, "scroll_y": sy}  # noqa: E731
        self.assertSent(POINTER, act(sc(100, 100, 0, -360)), SIZE, act(sc(5, 6, 0, 240)), act(sc(5, 6, 0, -120)),
                        act(sc(7, 8, 480, 0)), act(sc(7, 8, -120, 0)))

    def test_a_long_scroll_is_split_to_the_bound(self):
        pyautogui.scroll(-200, 1, 1)
        sc = lambda sy: {"type": "scroll", "x": 1, "y": 1, "scroll_x": 0, "scroll_y": sy}  # noqa: E731
        self.assertSent(SIZE, act(sc(20000), sc(4000)))

    # --- keyboard ---

    def test_typewrite(self):
        pyautogui.typewrite("hello world")
        pyautogui.write("a\tb", interval=0.05)
        pyautogui.typewrite(["a", "enter", "pgdn", "Tab"])
        pyautogui.typewrite(["x", "y"], interval=0.1)
        pyautogui.write("")
        self.assertSent(act({"type": "type", "text": "hello world"}), act({"type": "type", "text": "a\tb"}),
                        act(keys("a"), keys("enter"), keys("pagedown"), keys("tab")),
                        act(keys("x"), {"type": "wait", "ms": 100}, keys("y")))

    def test_long_text_is_split_to_the_bound(self):
        pyautogui.write("x" * 25000)
        self.assertSent(act({"type": "type", "text": "x" * 10000}, {"type": "type", "text": "x" * 10000},
                            {"type": "type", "text": "x" * 5000}))

    def test_press(self):
        pyautogui.press("enter")
        pyautogui.press("Enter")
        pyautogui.press(["left", "left", "\n"])
        pyautogui.press("pgdn", presses=3)
        pyautogui.press("a", presses=2, interval=0.5)
        pyautogui.press("A")
        pyautogui.press(["num5", "ctrlright", "winleft", "esc", "del", "f12", " ", "<"])
        pyautogui.press(["Page_Down", "ArrowUp"], logScreenshot=False)
        self.assertSent(act(keys("enter")), act(keys("enter")), act(keys("left"), keys("left"), keys("enter")),
                        act(keys("pagedown"), keys("pagedown"), keys("pagedown")),
                        act(keys("a"), {"type": "wait", "ms": 500}, keys("a")), act(keys("A")),
                        act(keys("5"), keys("ctrl"), keys("win"), keys("escape"), keys("delete"), keys("f12"),
                            keys("space"), keys("<")), act(keys("pagedown"), keys("up")))

    def test_many_presses_take_more_than_one_request(self):
        pyautogui.press("backspace", presses=60)
        self.assertEqual([len(r["act"]) for r in self.botd.sent], [50, 10])

    def test_keys_without_an_equivalent_raise_before_sending(self):
        for k in ("volumeup", "printscreen", "f13", "numlock", "nosuchkey"):
            with self.assertRaises(ValueError) as cm:
                pyautogui.press(["a", k])
            self.assertIn(repr(k), str(cm.exception))
        with self.assertRaises(ValueError):
            pyautogui.hotkey("ctrl", "volumemute")
        self.assertFalse(pyautogui.isValidKey("volumeup"))
        self.assertTrue(pyautogui.isValidKey("pgup"))
        self.assertSent()

    def test_hotkey(self):
        pyautogui.hotkey("ctrl", "c")
        pyautogui.hotkey("ctrlleft", "shiftright", "t")
        pyautogui.hotkey(["ctrl", "a"])
        pyautogui.hotkey("ctrl", "ctrlleft", "s", interval=0.1)
        pyautogui.hotkey("shift", ",")
        self.assertSent(act(keys("ctrl", "c")), act(keys("ctrl", "shift", "t")), act(keys("ctrl", "a")),
                        act(keys("ctrl", "s")), act(keys("shift", ",")))

    def test_held_keys_join_presses(self):
        pyautogui.keyDown("ctrl")
        pyautogui.press("c")
        pyautogui.hotkey("shift", "t")
        pyautogui.typewrite("ab")
        pyautogui.keyUp("ctrl")  # used: nothing more
        self.assertSent(act(keys("ctrl", "c")), act(keys("ctrl", "shift", "t")), act(keys("ctrl", "a"), keys("ctrl", "b")))

    def test_key_down_up_alone_is_a_press(self):
        pyautogui.keyDown("shift")
        pyautogui.keyUp("shift")
        pyautogui.keyDown("ctrl")
        pyautogui.keyDown("v")
        pyautogui.keyUp("v")
        pyautogui.keyUp("ctrl")
        pyautogui.keyUp("alt")  # never held: nothing
        with pyautogui.hold("shift"):
            pyautogui.press("left")
        self.assertSent(act(keys("shift")), act(keys("ctrl", "v")), act(keys("shift", "left")))

    def test_a_click_while_a_key_is_held_is_refused(self):
        pyautogui.keyDown("ctrl")
        for f in (lambda: pyautogui.click(1, 1), lambda: pyautogui.scroll(1), lambda: pyautogui.dragTo(5, 5),
                  lambda: pyautogui.mouseDown()):
            with self.assertRaisesRegex(pyautogui.PyAutoGUIException, "held"):
                f()
        pyautogui.moveTo(3, 3)  # a move is fine
        self.assertSent(SIZE, act({"type": "move", "x": 3, "y": 3}))

    # --- pointer, pause, failsafe ---

    def test_position(self):
        self.botd.pointer = (12, 34)
        p = pyautogui.position()
        self.assertEqual((p.x, p.y), (12, 34))
        self.assertIsInstance(p, pyautogui.Point)
        self.assertEqual(pyautogui.position(x=1), (1, 34))
        self.assertSent(POINTER, POINTER)

    def test_pause_is_slept_after_each_call(self):
        self.assertEqual(DEFAULT_PAUSE, 0.1)
        pyautogui.PAUSE = 0.1
        # The shim's clock moves 0.1 ms a reading, so the click's act takes
        # next to no time however slow this machine is (under load a real
        # round trip to the fake botd took longer than PAUSE, and no sleep
        # was left to make).
        clock = itertools.count(1000.0, 0.0001)
        with mock.patch.object(pyautogui.time, "sleep") as sleep, \
                mock.patch.object(pyautogui.time, "monotonic", lambda: next(clock)):
            pyautogui.click(1, 1)  # an act that took no time: nearly all of PAUSE
            pyautogui.press("a", _pause=False)
            pyautogui.keyDown("shift")  # sent nothing: all of PAUSE
            pyautogui.position()  # not a pausing call, as in pyautogui
        self.assertEqual(len(sleep.call_args_list), 2)
        self.assertTrue(0.09 < sleep.call_args_list[0].args[0] < 0.1, sleep.call_args_list)
        self.assertEqual(sleep.call_args_list[1], mock.call(0.1))

    def test_pause_counts_the_time_botd_took(self):
        pyautogui.PAUSE = 0.1
        pyautogui.size()
        answer, real_sleep = self.botd._answer, time.sleep
        self.botd._answer = lambda req: (real_sleep(0.15), answer(req))[1]  # botd settling
        with mock.patch.object(pyautogui.time, "sleep") as sleep:
            pyautogui.press("a")
        self.assertEqual(sleep.call_args_list, [])

    def test_failsafe(self):
        self.assertTrue(DEFAULT_FAILSAFE)
        pyautogui.FAILSAFE = True
        pyautogui.moveTo(0, 0)
        with self.assertRaises(pyautogui.FailSafeException):
            pyautogui.click(5, 5)
        pyautogui.FAILSAFE = False
        pyautogui.click(5, 5)
        self.assertSent(SIZE, act({"type": "move", "x": 0, "y": 0}), act(click(5, 5)))

    def test_easing_functions_are_callables(self):
        for f in (pyautogui.linear, pyautogui.easeInQuad, pyautogui.easeOutQuad, pyautogui.easeInOutQuad,
                  pyautogui.easeInBounce, pyautogui.easeInElastic):
            self.assertAlmostEqual(f(0.0), 0.0)
            self.assertAlmostEqual(f(1.0), 1.0)
            f(0.5)
        pyautogui.sleep(0)
        self.assertSent()

    def test_computer_13_lines(self):
        """The code PythonController.execute_action writes for computer_13."""
        self.botd.pointer = (50, 60)
        for line in ("pyautogui.moveTo(100, 200, 0.73, pyautogui.easeInElastic)",
                     "pyautogui.click(button='right', x=10, y=20, clicks=1)",
                     "pyautogui.click(x=10, y=20, clicks=2)",
                     "pyautogui.dragTo(300, 400, duration=1.0, button='left', mouseDownUp=True)",
                     "pyautogui.hscroll(-2)", "pyautogui.vscroll(3)",
                     "pyautogui.typewrite(\"'hi'\")", "pyautogui.press('enter')",
                     "pyautogui.hotkey('ctrl', 'c')"):
            exec(line, {"pyautogui": pyautogui})
        sc = lambda sx, sy: {"type": "scroll", "x": 300, "y": 400, "scroll_x": sx, "scroll_y": sy}  # noqa: E731
        self.assertSent(SIZE, act({"type": "move", "x": 100, "y": 200}), act(click(10, 20, "right")),
                        act({"type": "double_click", "x": 10, "y": 20}),
                        act({"type": "drag", "path": [{"x": 10, "y": 20}, {"x": 300, "y": 400}]}),
                        act(sc(-240, 0)), act(sc(0, -360)), act({"type": "type", "text": "'hi'"}),
                        act(keys("enter")), act(keys("ctrl", "c")))

    # --- refusals ---

    def test_a_persons_takeover_raises(self):
        self.botd.refuse = ("user_has_control", "a person has the screen")
        with self.assertRaisesRegex(pyautogui.ActError, "a person has taken control of this screen") as cm:
            pyautogui.press("a")
        self.assertEqual(cm.exception.code, "user_has_control")

    def test_other_refusals_name_their_code(self):
        self.botd.refuse = ("invalid_action", "actions[0].x: 5000 is outside the screen")
        with self.assertRaisesRegex(pyautogui.ActError, r"\(invalid_action\): actions\[0\]"):
            pyautogui.hotkey("ctrl", "s")

    # --- pyperclip ---

    def test_pyperclip(self):
        pyperclip.copy("h\u00e9llo")
        self.assertEqual(pyperclip.paste(), "h\u00e9llo")
        pyperclip.copy(42)
        with self.assertRaises(pyperclip.PyperclipException):
            pyperclip.copy(["no"])
        self.assertSent({"clipboard": "h\u00e9llo"}, {"query": "clipboard"}, {"clipboard": "42"})


class CommandTest(unittest.TestCase):
    """The modules in a python -c like OSWorld's, the channel as a passed fd."""

    def run_command(self, code, botd=None, env_fd=True):
        env = {k: v for k, v in os.environ.items() if k != pyautogui.ENV_FD}
        env["PYTHONPATH"] = HERE
        fds = ()
        if botd is not None:
            fds = (botd.child_fd,)
            if env_fd:
                env[pyautogui.ENV_FD] = str(botd.child_fd)
        prefix = "import pyautogui; import time; pyautogui.FAILSAFE = False; "
        p = subprocess.run([sys.executable, "-c", prefix + code], env=env, pass_fds=fds, capture_output=True,
                           text=True, timeout=30)
        if botd is not None:
            os.close(botd.child_fd)
        return p

    def test_an_osworld_command(self):
        botd = FakeBotd()
        self.addCleanup(botd.close)
        p = self.run_command("pyautogui.click(960, 540); pyautogui.hotkey('ctrl', 's'); time.sleep(0.01); print(pyautogui.position())", botd)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "Point(x=960, y=540)\n")
        self.assertEqual(botd.sent, [SIZE, act(click(960, 540)), act(keys("ctrl", "s")), POINTER])

    def test_a_takeover_ends_the_command_non_zero(self):
        botd = FakeBotd()
        self.addCleanup(botd.close)
        botd.refuse = ("user_has_control", "a person has the screen")
        p = self.run_command("pyautogui.press('a'); print('not reached')", botd)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("a person has taken control of this screen", p.stderr)
        self.assertEqual(p.stdout, "")

    def test_without_a_channel_import_works_and_calls_raise(self):
        p = self.run_command("import pyperclip; print('imported')")
        self.assertEqual((p.returncode, p.stdout), (0, "imported\n"), p.stderr)
        for call in ("pyautogui.click(1, 1)", "pyautogui.keyDown('a')", "pyautogui.size()",
                     "import pyperclip; pyperclip.paste()"):
            p = self.run_command(call)
            self.assertNotEqual(p.returncode, 0, call)
            self.assertIn("only works in the execute of an open-bot evaluation screen", p.stderr, call)

    def test_a_drag_left_down_is_released_at_the_end(self):
        botd = FakeBotd()
        self.addCleanup(botd.close)
        p = self.run_command("pyautogui.mouseDown(10, 10); pyautogui.moveTo(20, 20)", botd)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("mouseDown() without mouseUp()", p.stderr)
        self.assertEqual(botd.sent, [SIZE, act({"type": "drag", "path": [{"x": 10, "y": 10}, {"x": 20, "y": 20}]})])

    def test_programs_the_command_starts_do_not_get_the_channel(self):
        botd = FakeBotd()
        self.addCleanup(botd.close)
        code = ("import os, subprocess, sys; fd = int(os.environ['OPENBOT_ACT_FD']); "
                "print(subprocess.run([sys.executable, '-c', 'import os; os.fstat(%d)' % fd], "
                "close_fds=False, capture_output=True).returncode)")
        p = self.run_command(code, botd)
        self.assertEqual((p.returncode, p.stdout), (0, "1\n"), p.stderr)


if __name__ == "__main__":
    unittest.main()
