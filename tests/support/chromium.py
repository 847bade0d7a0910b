"""Headless Chromium (Debian's `chromium`) driven over the DevTools protocol, stdlib only.

    with Chromium(tmp_path) as b:
        page = b.open(url, javascript=False)     # a new tab; scripts off when asked
        page.html()                              # the DOM as rendered (DOM.getOuterHTML: no page JS)
        page.screenshot(path)                    # a PNG of the viewport
        page.reload()

`chromium --dump-dom` needs JavaScript to serialize the page, so a page with scripts
disabled cannot be read that way; the DevTools protocol's DOM domain can. The browser
runs with --remote-debugging-port=0 (the port it picked is read from DevToolsActivePort
in its profile dir) and one WebSocket to its browser target carries every command, the
tabs' ones as flat sessions. The process is killed at close(), and with the thread that
started it.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import time
from pathlib import Path

START_TIMEOUT_S = 60.0
COMMAND_TIMEOUT_S = 30.0


class WebSocket:
    """A client WebSocket (RFC 6455) with text frames only: enough for the DevTools protocol."""

    def __init__(self, host: str, port: int, path: str, timeout: float = COMMAND_TIMEOUT_S):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("DevTools closed the connection during the handshake")
            head += chunk
        head, self._buf = head.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"DevTools refused the WebSocket: {head[:200]!r}")

    def send(self, text: str) -> None:
        payload = text.encode()
        n = len(payload)
        header = bytearray([0x81])
        if n < 126:
            header.append(0x80 | n)
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(bytes(header) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("DevTools closed the connection")
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def recv(self) -> str:
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            opcode = b0 & 0x0F
            if opcode == 8:
                raise ConnectionError("DevTools closed the WebSocket")
            if opcode in (0, 1, 2):
                message += payload
                if b0 & 0x80:
                    return message.decode()

    def close(self) -> None:
        self.sock.close()


class Page:
    def __init__(self, browser: Chromium, session: str):
        self.browser = browser
        self.session = session

    def call(self, method: str, **params):
        return self.browser.call(method, session=self.session, **params)

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.browser.wait_event("Page.loadEventFired", self.session)

    def reload(self) -> None:
        self.call("Page.reload", ignoreCache=True)
        self.browser.wait_event("Page.loadEventFired", self.session)

    def html(self) -> str:
        root = self.call("DOM.getDocument", depth=0)["root"]
        return self.call("DOM.getOuterHTML", nodeId=root["nodeId"])["outerHTML"]

    def screenshot(self, path: Path, settle_s: float = 10.0) -> None:
        """A settled frame: two captures in a row alike (at most `settle_s` of tries)."""
        # a tab behind another one is not painted: it may hold a blank or half-drawn frame
        # (seen: PNGs with 0 to 108 of the 372 drawn lines of the status page), so bring it to the
        # front first; the capture right after that may still race its repaint (seen once in CI:
        # 114 lines), so capture until a frame repeats
        self.call("Page.bringToFront")
        data = self.call("Page.captureScreenshot", format="png")["data"]
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline:
            time.sleep(0.2)
            again = self.call("Page.captureScreenshot", format="png")["data"]
            if again == data:
                break
            data = again
        Path(path).write_bytes(base64.b64decode(data))


class Chromium:
    def __init__(self, directory: Path, width: int = 1280, height: int = 1600):
        self.dir = Path(directory)
        self.width, self.height = width, height
        self.proc: subprocess.Popen | None = None
        self.ws: WebSocket | None = None
        self._id = 0
        self._events: list[dict] = []

    def __enter__(self) -> Chromium:
        exe = shutil.which("chromium")
        assert exe is not None, "chromium is not installed"
        profile = self.dir / "chromium-profile"
        profile.mkdir(parents=True, exist_ok=True)
        die_with_parent = ["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []
        self.proc = subprocess.Popen(
            [
                *die_with_parent,
                "nice",
                "-n",
                "19",
                exe,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--hide-scrollbars",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                f"--window-size={self.width},{self.height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "chromium.log", "wb"),
        )
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (active.exists() and len(active.read_text().splitlines()) >= 2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise AssertionError(f"chromium did not start: {(self.dir / 'chromium.log').read_text()[-2000:]}")
            time.sleep(0.05)
        port, path = active.read_text().splitlines()[:2]
        self.ws = WebSocket("127.0.0.1", int(port), path)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.ws is not None:
            self.ws.close()
            self.ws = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def call(self, method: str, session: str | None = None, **params):
        assert self.ws is not None
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        while time.monotonic() < deadline:
            answer = json.loads(self.ws.recv())
            if answer.get("id") == self._id:
                if "error" in answer:
                    raise AssertionError(f"{method}: {answer['error']}")
                return answer["result"]
            if "method" in answer:
                self._events.append(answer)
        raise AssertionError(f"{method}: no answer within {COMMAND_TIMEOUT_S} s")

    def wait_event(self, method: str, session: str | None = None, timeout: float = COMMAND_TIMEOUT_S) -> dict:
        assert self.ws is not None
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self._events):
                if event["method"] == method and event.get("sessionId") == session:
                    del self._events[i]
                    return event
            if time.monotonic() > deadline:
                raise AssertionError(f"no {method} within {timeout} s")
            event = json.loads(self.ws.recv())
            if "method" in event:
                self._events.append(event)

    def open(self, url: str, javascript: bool = True) -> Page:
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        page = Page(self, session)
        page.call("Page.enable")
        page.call(
            "Emulation.setDeviceMetricsOverride",
            width=self.width,
            height=self.height,
            deviceScaleFactor=1,
            mobile=False,
        )
        if not javascript:
            page.call("Emulation.setScriptExecutionDisabled", value=True)
        self._events.clear()
        page.navigate(url)
        return page
