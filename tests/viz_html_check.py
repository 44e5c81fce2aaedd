#!/usr/bin/env python3
"""viz_html_check.py - `flexplan viz --format=html` pages in headless Chromium.

usage: viz_html_check.py FLEXPLAN SOURCE_DIR WORKDIR

Debian's chromium (installed by .ci/run from .ci/packages) loads each page
from a file: URL, with no network and no DevTools:

- the page is one file that fetches nothing: no <link>, src=, href= or
  url(...) outside the page, and a Content-Security-Policy that forbids
  everything from elsewhere (a fetch would be refused and logged);
- no console output at all (`--enable-logging=stderr --v=0` prints every
  console message, uncaught exceptions and CSP refusals as CONSOLE lines;
  the healthy page logs nothing); a broken copy of the page (a script error
  and an outside image) must produce such lines, so the check is alive;
- the page's own self-test record in the dumped DOM (#fpviz-selftest,
  written after the first draw; the URL's #selftest also makes it build
  every tooltip and drive the wheel, a drag and a click) says ok: no
  errors, and every op of every rank shown is drawn, alone or in a merged
  box;
- one box per op for a small plan (tiny-mlp: `rect class="op ..."` elements
  in the dumped DOM, one per op index, none merged); the ragged/owned
  example shows its four layout classes; llama3-405b draws every op
  while keeping the number of elements small (merging boxes narrower than
  a pixel), and its load time is reported;
- names that look like markup (a bucket and a module of tiny-mlp renamed
  `</script><b onmouseover="alert(1)">&'` in its .fpir) stay text: the page
  draws, logs nothing, and the DOM holds no such element;
- a screenshot of a real plan (llama3-8b) is not blank: decoded here (PNG,
  zlib), it has many colours and a spread of pixel values.
Exit status 0 pass, 1 fail, 77 (skip) when chromium is not installed.
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def find_chromium():
    for name in ("chromium", "chromium-browser"):
        p = shutil.which(name)
        if p:
            return p
    return None


def run_chromium(chrome, args, url, timeout=180):
    with tempfile.TemporaryDirectory() as prof:
        cmd = [chrome, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
               "--enable-logging=stderr", "--v=0", "--user-data-dir=" + prof] + args + [url]
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return r, time.monotonic() - t0


def console_lines(stderr):
    return [l for l in stderr.splitlines() if ":CONSOLE" in l]


def load(chrome, path, width=1600, height=1000, hash=""):
    """dump the DOM after load; returns (dom, console lines, seconds)"""
    r, dt = run_chromium(chrome, ["--window-size=%d,%d" % (width, height), "--dump-dom"], "file://" + path + hash)
    if r.returncode != 0:
        fail(f"{path}: chromium exited {r.returncode}: {r.stderr[-500:]}")
    return r.stdout, console_lines(r.stderr), dt


def selftest(dom, where):
    m = re.search(r'<pre id="fpviz-selftest"[^>]*>([^<]*)</pre>', dom)
    if not m:
        fail(f"{where}: no self-test record in the DOM (the script did not finish)")
        return None
    rec = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    if rec.get("status") != "ok" or rec.get("errors"):
        fail(f"{where}: self-test says {rec}")
    if rec.get("covered") != rec.get("expected"):
        fail(f"{where}: {rec.get('covered')} ops drawn of {rec.get('expected')}")
    if not rec.get("tips"):
        fail(f"{where}: the interaction self-test (#selftest) did not run")
    return rec


def static_checks(html, where):
    if "Content-Security-Policy" not in html or "default-src 'none'" not in html:
        fail(f"{where}: no Content-Security-Policy forbidding outside resources")
    for pat, what in ((r"<link\b", "<link>"), (r"\bsrc\s*=", "src="), (r"\bhref\s*=", "href="),
                      (r"url\(\s*['\"]?(?!#)", "url() outside the page"), (r"@import", "@import"),
                      (r"\bfetch\s*\(", "fetch()"), (r"XMLHttpRequest", "XMLHttpRequest"),
                      (r"\bimport\s*\(", "import()"), (r"new\s+WebSocket", "WebSocket")):
        m = re.search(pat, html)
        if m:
            fail(f"{where}: {what} at offset {m.start()}: {html[max(0, m.start() - 40):m.start() + 40]!r}")


def png_pixels(path):
    """width, height, channels, rows of bytes (unfiltered) of an 8-bit RGB/RGBA PNG"""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, w = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                raise ValueError(f"unsupported PNG (depth {depth}, colour type {ctype}, interlace {interlace})")
            ch = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    raw = zlib.decompress(b"".join(idat))
    stride = w * ch
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - ch] if i >= ch else 0
            b = prev[i]
            c = prev[i - ch] if i >= ch else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, ch, rows


def screenshot_checks(chrome, path, png, where):
    r, dt = run_chromium(chrome, ["--window-size=1600,1000", "--screenshot=" + png], "file://" + path)
    if r.returncode != 0 or not os.path.exists(png):
        return fail(f"{where}: no screenshot (exit {r.returncode}): {r.stderr[-300:]}")
    for l in console_lines(r.stderr):
        fail(f"{where}: console output while taking the screenshot: {l}")
    w, h, ch, rows = png_pixels(png)
    colours, n, s, s2, ink = set(), 0, 0.0, 0.0, 0
    for y in range(0, h, 2):
        row = rows[y]
        for x in range(0, w * ch, 2 * ch):
            px = row[x:x + 3]
            colours.add(px)
            lum = 0.299 * px[0] + 0.587 * px[1] + 0.114 * px[2]
            n += 1
            s += lum
            s2 += lum * lum
            ink += lum < 200
    var = s2 / n - (s / n) ** 2
    print(f"{where}: screenshot {w}x{h}, {len(colours)} colours, luminance variance {var:.0f}, "
          f"{100.0 * ink / n:.1f}% dark pixels")
    if len(colours) < 16 or var < 100 or ink < n * 0.02:
        fail(f"{where}: the screenshot looks blank ({len(colours)} colours, variance {var:.0f}, "
             f"{100.0 * ink / n:.1f}% dark)")


def main():
    fp, src, work = sys.argv[1], sys.argv[2], sys.argv[3]
    chrome = find_chromium()
    if not chrome:
        print("chromium is not installed (apt-get install chromium; .ci/packages lists it): skipped")
        return 77
    os.makedirs(work, exist_ok=True)
    pages = {}
    for ex in ("tiny-mlp", "tiny-mlp-ragged", "llama3-8b", "llama3-405b"):
        plan = os.path.join(work, ex + ".plan.json")
        page = os.path.join(work, ex + ".html")
        subprocess.run([fp, "compile", os.path.join(src, "examples", ex + ".json"), "-o", plan], check=True,
                       stderr=subprocess.DEVNULL)
        subprocess.run([fp, "viz", plan, "--format=html", "-o", page], check=True, stderr=subprocess.DEVNULL)
        pages[ex] = (json.load(open(plan)), page)
        static_checks(open(page, encoding="utf-8").read(), ex)

    # names that look like markup
    fpir = os.path.join(work, "tiny-mlp.fpir")
    subprocess.run([fp, "compile", os.path.join(src, "examples", "tiny-mlp.json"), "--emit=ir", "-o", fpir], check=True,
                   stderr=subprocess.DEVNULL)
    evil = re.sub(r"(?<![\w.])fc0(?![\w.])", lambda m: '"</script><b onmouseover=\\"alert(1)\\">&\'"', open(fpir).read())
    evil_fpir, evil_page = os.path.join(work, "evil.fpir"), os.path.join(work, "evil.html")
    with open(evil_fpir, "w") as f:
        f.write(evil)
    subprocess.run([fp, "viz", evil_fpir, "--format=html", "-o", evil_page], check=True, stderr=subprocess.DEVNULL)
    dom, cons, _ = load(chrome, evil_page, hash="#selftest")
    for l in cons:
        fail(f"markup in names: console output: {l}")
    selftest(dom, "markup in names")
    if "<b onmouseover" in dom:
        fail("markup in names: a name became an element")

    # the check is alive: a broken copy of a page logs what it must
    tiny_plan, tiny = pages["tiny-mlp"]
    broken = os.path.join(work, "broken.html")
    text = open(tiny, encoding="utf-8").read()
    with open(broken, "w", encoding="utf-8") as f:
        f.write(text.replace("</body>", "<img src=\"http://192.0.2.1/x.png\"><script>throw new Error(\"boom\");</script></body>"))
    _, cons, _ = load(chrome, broken)
    if not any("Uncaught" in l for l in cons) or not any("Content Security Policy" in l for l in cons):
        fail(f"a page with a script error and an outside image did not log both: {cons}")

    for ex, (plan, page) in pages.items():
        # the large plan also times 20 zooming redraws (#bench)
        dom, cons, dt = load(chrome, page, hash="#selftest,bench" if ex == "llama3-405b" else "#selftest")
        for l in cons:
            fail(f"{ex}: console output: {l}")
        rec = selftest(dom, ex)
        if rec is None:
            continue
        nboxes = len(re.findall(r'<rect class="op ', dom))
        naggs = len(re.findall(r'<rect class="agg', dom))
        print(f"{ex}: {len(plan['ops'])} ops; in the page: script starts {rec['script_start_ms']} ms after navigation, "
              f"setup {rec['setup_ms']} ms, first draw {rec['draw_ms']} ms, ready at {rec['ready_ms']} ms; "
              + (f"a zooming redraw {rec['redraw_ms']} ms; " if rec.get("redraw_ms") is not None else "")
              + f"chromium run {dt:.2f} s; "
              f"{nboxes} op boxes + {naggs} merged boxes for {rec['expected']} ops on {rec['ranks']} rank(s), "
              f"{os.path.getsize(page)} bytes")
        if nboxes != rec["boxes"]:
            fail(f"{ex}: the DOM has {nboxes} op boxes, the self-test counted {rec['boxes']}")
        if ex == "tiny-mlp":
            ids = sorted(int(i) for i in re.findall(r'<rect class="op [^"]*" data-op="(\d+)"', dom))
            if ids != list(range(len(plan["ops"]))) or naggs:
                fail(f"tiny-mlp: not one box per op: {len(ids)} boxes for {len(plan['ops'])} ops, {naggs} merged")
        if ex == "tiny-mlp-ragged" and rec["ranks"] != 4:
            fail(f"tiny-mlp-ragged: {rec['ranks']} ranks shown, want its 4 layout classes")
        if ex == "llama3-405b" and nboxes + naggs > 8000:
            fail(f"llama3-405b: {nboxes + naggs} boxes at full view: too many to stay usable")
    screenshot_checks(chrome, pages["llama3-8b"][1], os.path.join(work, "llama3-8b.png"), "llama3-8b")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
