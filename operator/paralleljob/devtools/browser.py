"""The web view from outside, for the tests, the benchmark and the demo: ``paralleljob dashboard`` as a
subprocess on a free loopback port, and Debian's headless Chromium driven through Selenium and Debian's
chromedriver (Selenium is told both paths, so its manager never downloads a browser or a driver).

The page publishes what it drew as ``window.pj`` (the picture, the latest paint's sequence number and
wall-clock time, where a GPU's cell is on screen); pixels are read back from the canvas itself, so a test
checks what a person would see, not only what the page holds.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from paralleljob.devcluster.process import exit_with_parent, free_loopback_ports
from paralleljob.devtools.waiting import wait_until


class DashboardProcess:
    def __init__(
        self, kubeconfig: Path, log_path: Path, port: int | None = None, extra_args: list[str] | None = None
    ) -> None:
        self.kubeconfig = kubeconfig
        self.extra_args = list(extra_args or [])
        self.log_path = log_path
        self.port = port or free_loopback_ports(1)[0]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self, timeout_s: float = 60.0) -> None:
        argv = [sys.executable, "-m", "paralleljob.cli", "dashboard", "--kubeconfig", str(self.kubeconfig),
                "--port", str(self.port), *self.extra_args]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, preexec_fn=exit_with_parent)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dashboard exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "healthz", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"dashboard not healthy after {timeout_s} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class Browser:
    """One headless Chromium window of a fixed size."""

    def __init__(self, width: int = 1600, height: int = 1000) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = str(shutil.which("chromium"))
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    f"--window-size={width},{height}", "--force-device-scale-factor=1", "--hide-scrollbars"):
            options.add_argument(arg)
        self.driver = webdriver.Chrome(service=Service(str(shutil.which("chromedriver"))), options=options)

    def open(self, url: str) -> None:
        self.driver.get(url)

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def wait(self, what: str, script: str, timeout_s: float = 30.0, interval: float = 0.02) -> Any:
        """Until ``script`` (a JS expression) is truthy; its value."""
        return wait_until(what, lambda: self.js(f"return ({script})"), timeout_s, interval)

    def pixel(self, x: float, y: float) -> tuple[int, int, int]:
        """The canvas' colour at CSS pixel (x, y) of the map, as drawn (device pixels scaled in)."""
        rgb = self.js(
            "const c = document.getElementById('map'); const r = window.devicePixelRatio || 1;"
            "const x = Math.round(arguments[0] * r), y = Math.round(arguments[1] * r);"
            "const d = c.getContext('2d').getImageData(x, y, 1, 1).data;"
            "return [d[0], d[1], d[2]];",
            x,
            y,
        )
        return int(rgb[0]), int(rgb[1]), int(rgb[2])

    def cell_colour(self, node: str, gpu: int) -> tuple[int, int, int]:
        point = self.js("return window.pj.cellOnScreen(arguments[0], arguments[1])", node, gpu)
        assert point is not None, f"{node} is not on the map"
        return self.pixel(point[0], point[1])

    def screenshot(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self.driver.get_screenshot_as_base64()))
        return path

    def errors(self) -> list[str]:
        """Errors the page logged (script errors, failed loads)."""
        entries: list[dict[str, Any]] = self.driver.get_log("browser")  # type: ignore[no-untyped-call]
        return [e["message"] for e in entries if e.get("level") == "SEVERE"]

    def close(self) -> None:
        self.driver.quit()


def hex_rgb(colour: str) -> tuple[int, int, int]:
    colour = colour.lstrip("#")
    return int(colour[0:2], 16), int(colour[2:4], 16), int(colour[4:6], 16)


