"""A headless Chromium driven over the DevTools protocol (for the analysis page tests).

No driver package: Chromium is started with ``--remote-debugging-port=0``, its port is read
from ``DevToolsActivePort`` and one websocket (the ``websockets`` sync client) carries the
commands. Console errors, uncaught exceptions and failed loads are collected as they arrive.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from websockets.sync.client import connect

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1280,1000", "--remote-debugging-port=0", "about:blank"]


class Browser:
    def __init__(self) -> None:
        self.profile = tempfile.mkdtemp(prefix="selfplay-chromium-")
        self.process = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.time() + 30
        while not (port_file.exists() and len(port_file.read_text().split()) >= 2):
            if time.time() > deadline or self.process.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port, path = port_file.read_text().split()[:2]
        self._connection = connect(f"ws://127.0.0.1:{port}{path}", max_size=None, open_timeout=30)
        self.socket = self._connection.__enter__()
        self.next_id = 0
        self.errors: list[str] = []
        self.events: list[dict] = []
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget",
                                 {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=True)

    def send(self, method: str, params: dict | None = None, session: bool = False,
             timeout: float = 60) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        self.socket.send(json.dumps(message))
        deadline = time.time() + timeout
        while True:
            reply = json.loads(self.socket.recv(timeout=max(0.1, deadline - time.time())))
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._event(reply)

    def _event(self, event: dict) -> None:
        self.events.append(event)
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append("console: " + " ".join(
                str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append("exception: " + str(
                details.get("exception", {}).get("description") or details.get("text")))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            self.errors.append("log: " + params["entry"].get("text", ""))
        elif method == "Network.loadingFailed":
            self.errors.append("load failed: " + params.get("errorText", ""))

    def open(self, path: Path, timeout: float = 60) -> None:
        self.events.clear()
        self.send("Page.navigate", {"url": path.resolve().as_uri()}, session=True)
        deadline = time.time() + timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            if time.time() > deadline:
                raise TimeoutError(f"{path} did not load")
            self._event(json.loads(self.socket.recv(timeout=timeout)))

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, session=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.2)
        raise TimeoutError(f"never true: {expression}")

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot",
                         {"format": "png", "captureBeyondViewport": True}, session=True)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        socket = getattr(self, "socket", None)
        if socket is not None:
            self._connection.__exit__(None, None, None)
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# What each chart of an analysis page put on its canvas (uPlot draws on a <canvas>, not in the
# DOM): per figure of figures-data, the legend rows, and per series the pixels of its colour
# (lines and markers: opaque; bands: the colour at the band's 0.18 alpha); heatmaps: the
# painted cells' pixels. A series that a later one covers exactly (same mode and y) is left out,
# its pixels hidden under the later one's; so is a band another series has too (their pixels
# blend).
CHART_PIXELS = r"""(() => {
  const figures = JSON.parse(document.getElementById('figures-data').textContent);
  const hex = c => [1, 3, 5].map(i => parseInt(c.slice(i, i + 2), 16));
  const out = {};
  for (const [id, f] of Object.entries(figures)) {
    const div = document.getElementById(id);
    const canvas = div.querySelector('.uplot canvas');
    if (!canvas) { out[id] = null; continue; }
    const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    const count = (test) => {
      let n = 0;
      for (let i = 0; i < data.length; i += 4) if (test(data[i], data[i + 1], data[i + 2],
                                                        data[i + 3])) n++;
      return n;
    };
    const near = (rgb, tol, a0, a1) => count((r, g, b, a) => a >= a0 && a <= a1 &&
      Math.abs(r - rgb[0]) + Math.abs(g - rgb[1]) + Math.abs(b - rgb[2]) <= tol);
    const chart = {kind: f.kind, legend: div.querySelectorAll('.u-legend .u-series').length};
    if (f.kind === 'heatmap') {
      chart.cells = count((r, g, b, a) => a === 255 && Math.max(r, g, b) - Math.min(r, g, b) > 30);
    } else {
      const key = s => s.mode + JSON.stringify(s.y);
      chart.series = {};
      chart.bands = {};
      f.series.forEach((s, i) => {
        if (!f.series.slice(i + 1).some(t => key(t) === key(s)))
          chart.series[s.label] = near(hex(s.color), 60, 200, 255);
        const band = t => JSON.stringify([t.low, t.high]);
        if (s.low && !f.series.some(t => t !== s && t.low && band(t) === band(s)))
          chart.bands[s.label] = near(hex(s.color), 15, 30, 60);  // alpha 46: rgb rounds
      });
    }
    out[id] = chart;
  }
  return out;
})()"""


def chart_pixels(browser: Browser) -> dict:
    return browser.evaluate(CHART_PIXELS)
