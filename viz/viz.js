/* viz.js - the viewer of `flexplan viz --format=html` (docs/viz.md), compiled
 * into flexplan by viz/embed.cmake. Plain JavaScript, no libraries, nothing
 * fetched: it reads the plan's view from the JSON in #fpdata (viz/html.c
 * writes it) and draws, as SVG, per rank shown: the hooks (segments), one lane
 * per stream with a box per op coloured by kind, exposed communication on the
 * compute lane, and arrows for the waits; below, the memory timeline stacked
 * by category with the budget and the peak, and a list of what is live at the
 * peak (or at a clicked instant). With --measured, each measured record is a
 * row under the modeled ranks: its ops per stream, its hooks and the
 * trainer's work between them, drawn as measured or with its hooks lined up
 * with the modeled ones. Wheel zooms, drag pans, shift-drag zooms to
 * a range. Every redraw walks only the ops in view and merges runs of boxes
 * narrower than a pixel into one grey box, so a plan of any size draws a few
 * thousand elements at most. After the first draw it writes a self-test
 * record into #fpviz-selftest (status, errors, boxes drawn, ops covered,
 * timings) for the headless-browser test (tests/viz_html_check.py); with
 * #selftest in the URL it also drives the tooltips, wheel, drag and click,
 * and with #bench it times 20 zooming redraws. */
(function () {
  "use strict";
  var tStart = window.performance ? performance.now() : 0;
  var errors = [];
  window.addEventListener("error", function (e) { errors.push(String(e.message || e)); });
  document.addEventListener("securitypolicyviolation", function (e) {
    errors.push("Content-Security-Policy refused " + e.blockedURI + " (" + e.violatedDirective + ")");
  });
  var origError = console.error;
  console.error = function () {
    errors.push(Array.prototype.join.call(arguments, " "));
    return origError.apply(console, arguments);
  };

  var D = JSON.parse(document.getElementById("fpdata").textContent);
  var M = D.meta, O = D.ops, N = O.code.length;
  var ST = Float64Array.from(O.st), EN = Float64Array.from(O.en);
  var NS = "http" + "://www.w3.org/2000/svg"; /* the SVG namespace: a name, never fetched */

  /* ---- layout constants (px) ------------------------------------------------ */
  var LABEL_W = 178, RIGHT = 14, AXIS_H = 24, RANK_H = 20, HOOK_H = 17, LANE_H = 28, LANE_GAP = 4;
  var MEM_H = 190, MEM_GAP = 30, MEM_AXIS = 20, MIN_PX = 1, MAX_ARROWS = 400;
  /* a compute op is never drawn narrower than this: on a fast machine the
   * modeled forward of a small model is far under a pixel, yet it is what
   * the step is for */
  var MIN_COMPUTE_PX = 3;

  /* ---- kinds and formats ------------------------------------------------------ */
  var KIND = {
    all_gather: "gather", all_gather_v: "gather", broadcast: "gather",
    reduce_scatter: "reduce", reduce_scatter_v: "reduce", reduce: "reduce",
    all_reduce: "allreduce", send: "p2p", recv: "p2p",
    cast: "cast", quantize_mxfp8: "cast", dequantize_mxfp8: "cast",
    copy: "copy", h2d: "copy", d2h: "copy", add: "math", scale: "math", memset: "math",
    record: "record", wait: "wait"
  };
  var KIND_LABEL = [["fwd", "forward"], ["bwd", "backward"], ["opt", "optimizer"], ["gather", "all-gather / broadcast"],
    ["reduce", "reduce-scatter / reduce"], ["allreduce", "all-reduce"], ["p2p", "send / recv"], ["cast", "cast"],
    ["copy", "copy"], ["math", "add / scale / memset"], ["record", "record"], ["wait", "wait"]];
  function opName(i) { return D.opnames[O.code[i]]; }
  function opClass(i) { return D.opclass[O.code[i]]; }
  function kindOf(i) {
    if (opClass(i) === "compute") return ["fwd", "bwd", "opt"][O.pass[i]] || "fwd";
    return KIND[opName(i)] || "copy";
  }
  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return {"&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;"}[c];
    });
  }
  function fmtBytes(b) {
    var u = ["B", "KiB", "MiB", "GiB", "TiB"], k = 0;
    while (Math.abs(b) >= 1024 && k < u.length - 1) { b /= 1024; k++; }
    return (k ? b.toFixed(b >= 100 ? 1 : 2) : String(b)) + " " + u[k];
  }
  function fmtUs(us) {
    var a = Math.abs(us);
    if (a >= 1e6) return (us / 1e6).toFixed(3) + " s";
    if (a >= 1e3) return (us / 1e3).toFixed(3) + " ms";
    return us.toFixed(3) + " \u00b5s";
  }
  /* an axis label: the unit of the step, only the decimals the step needs */
  function fmtTick(us, step) {
    var u = step >= 1e5 ? [1e6, " s"] : step >= 100 ? [1e3, " ms"] : [1, " \u00b5s"];
    var d = Math.max(0, Math.min(6, -Math.floor(Math.log10(step / u[0]) + 1e-9)));
    return (us / u[0]).toFixed(d) + u[1];
  }
  function fmtInt(n) { return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ","); }
  function label(i) {
    var c = opClass(i);
    if (c === "compute") {
      var what = ["forward", "backward", "optimizer"][O.pass[i]];
      return O.mod[i] >= 0 ? what + " " + D.mods[O.mod[i]] : what;
    }
    if (c === "sync") return opName(i) + " e" + O.ev[i];
    return O.bucket[i] >= 0 ? opName(i) + " " + D.buckets[O.bucket[i]] : opName(i);
  }

  /* ---- ranks: the ops each runs, per stream (program order = time order) ------- */
  var R = D.ranks.map(function (rk) {
    var skip = new Uint8Array(N), bytes = {};
    rk.skip.forEach(function (i) { skip[i] = 1; });
    rk.bytes.forEach(function (p) { bytes[p[0]] = p[1]; });
    var lanes = D.streams.map(function () { return []; });
    var nops = 0;
    for (var i = 0; i < N; i++) if (!skip[i]) { lanes[O.stream[i]].push(i); nops++; }
    return {rank: rk.rank, cls: rk.cls, members: rk.members, skip: skip, bytes: bytes, flows: rk.flows,
            lanes: lanes.map(function (l) { return Int32Array.from(l); }), nops: nops};
  });
  function bytesOn(row, i) { return row.bytes[i] !== undefined ? row.bytes[i] : O.bytes[i]; }
  /* per lane, the running maximum of the ends drawn: the search for the first
   * op in view needs it (a measured op can end after the next one on its
   * stream by a rounding) */
  function prefixMax(L, en) {
    var pm = new Float64Array(L.length), mx = -Infinity;
    for (var k = 0; k < L.length; k++) { mx = Math.max(mx, en[L[k]]); pm[k] = mx; }
    return pm;
  }
  R.forEach(function (rk) { rk.ST = ST; rk.EN = EN; rk.pm = rk.lanes.map(function (L) { return prefixMax(L, EN); }); });

  /* ---- measured steps (--measured) ---------------------------------------------
   * A row per record, under the modeled ranks: the ops it ran per stream in
   * the order they started, its hooks, and the trainer's work between them.
   * Its times are drawn on the modeled axis as measured (microseconds from
   * the step's start), or with the hooks lined up: each stretch from one
   * hook's entry to the next stretched onto the modeled segment (the
   * "line up hooks" box; the tooltips always give the measured times). */
  var NSEG = D.segs.st.length, MEAS = D.measured || [];
  var MR = MEAS.map(function (m) {
    var lanes = D.streams.map(function () { return []; }), nops = 0;
    for (var i = 0; i < N; i++) if (m.st[i] >= 0) { lanes[O.stream[i]].push(i); nops++; }
    lanes.forEach(function (L) { L.sort(function (a, b) { return m.st[a] - m.st[b] || a - b; }); });
    var same = R.filter(function (rk) { return rk.rank === m.rank; })[0];
    return {m: m, rank: m.rank, lanes: lanes.map(function (L) { return Int32Array.from(L); }), nops: nops,
            bytes: same ? same.bytes : {}, ST: new Float64Array(N), EN: new Float64Array(N),
            HS: new Float64Array(NSEG), HE: new Float64Array(NSEG), END: 0, pm: []};
  });
  var aligned = MR.length > 0;
  /* measured time -> drawn time: the identity, or piecewise linear through
   * (hook k's entry, modeled segment k's start) and (the last hook's exit,
   * the last segment's end); outside them, the whole step's ratio */
  function warpOf(m) {
    if (!aligned || !NSEG) return function (t) { return t; };
    var a = [], b = [];
    for (var k = 0; k < NSEG; k++) { a.push(m.hook_st[k]); b.push(MH_ST[k]); }
    a.push(m.hook_en[NSEG - 1]); b.push(MH_EN[NSEG - 1]);
    var n = a.length, g = a[n - 1] > a[0] ? (b[n - 1] - b[0]) / (a[n - 1] - a[0]) : 1;
    return function (t) {
      if (t <= a[0]) return b[0] + (t - a[0]) * g;
      if (t >= a[n - 1]) return b[n - 1] + (t - a[n - 1]) * g;
      var lo = 0, hi = n - 1; /* a[lo] <= t < a[hi] */
      while (hi - lo > 1) { var md = (lo + hi) >> 1; if (a[md] <= t) lo = md; else hi = md; }
      return a[hi] > a[lo] ? b[lo] + (t - a[lo]) / (a[hi] - a[lo]) * (b[hi] - b[lo]) : b[lo];
    };
  }
  /* the trainer's work between hook k-1 and hook k, named by the hook that ends it */
  function workKind(k) {
    var kd = D.segkinds[D.segs.kind[k]];
    return kd === "post_forward" ? "fwd" : kd === "post_backward" ? "bwd" : kd === "post_optimizer" ? "opt" : "other";
  }
  function workLabel(k) {
    var kd = workKind(k), mod = D.segs.mod[k] >= 0 ? " " + D.mods[D.segs.mod[k]] : "";
    return kd === "fwd" ? "forward" + mod : kd === "bwd" ? "backward" + mod : kd === "opt" ? "optimizer" :
      "trainer, before " + D.segkinds[D.segs.kind[k]];
  }
  /* The trainer's hooks in the model, the measured record's counterpart:
   * hook k is entered when the compute stream (the trainer) reaches segment
   * k, and left when the segment's other ops on that stream (its waits, its
   * local work) are done; its compute ops then are the trainer's work until
   * the next hook. (A segment's own extent, the earliest start to the latest
   * end of its ops on any stream, is in the hook's tooltip.) */
  var MH_ST = new Float64Array(NSEG), MH_EN = new Float64Array(NSEG), MH_END = 0;
  (function () {
    var cur = 0, k = -1;
    for (var i = 0; i < N; i++) {
      for (; k < O.seg[i]; ) { k++; MH_ST[k] = cur; MH_EN[k] = cur; }
      if (O.stream[i] !== 0) continue;
      cur = Math.max(cur, EN[i]);
      if (opClass(i) !== "compute") MH_EN[k] = Math.max(MH_EN[k], cur);
    }
    for (; k < NSEG - 1; ) { k++; MH_ST[k] = cur; MH_EN[k] = cur; }
    MH_END = Math.max(cur, M.t_hi);
  })();
  var waitRecord = {}; /* wait op -> record op */
  D.flows.forEach(function (f) { waitRecord[f[0]] = f[1]; });
  var exposedByWait = {};
  D.exposed.forEach(function (x, j) { exposedByWait[x[2]] = j; });

  /* ---- memory ------------------------------------------------------------------ */
  var PTS = D.mem.pts, NC = D.cats.length;
  function total(p) { var s = 0; for (var c = 1; c <= NC; c++) s += p[c]; return s; }
  var peakPt = PTS[D.mem.peak] || [0], peakT = peakPt[0], peakBytes = total(peakPt);
  /* bytes live at instant t, per category: the last point at or before t */
  function ptAt(t) {
    var lo = 0, hi = PTS.length - 1, k = -1;
    while (lo <= hi) { var m = (lo + hi) >> 1; if (PTS[m][0] <= t) { k = m; lo = m + 1; } else hi = m - 1; }
    return k < 0 ? null : PTS[k];
  }
  /* what is live at t: the same rule as the timeline (docs/cost-model.md) */
  function liveAt(t) {
    var L = D.lives, out = [];
    for (var k = 0; k < L.t0.length; k++) {
      var t0 = L.t0[k], t1 = L.t1[k];
      if ((t0 <= t && t < t1) || (t0 === t && t1 === t)) out.push(k);
    }
    out.sort(function (a, b) { return L.bytes[b] - L.bytes[a]; });
    return out;
  }
  function lifeName(k) {
    var L = D.lives;
    return L.buf[k] >= 0 ? D.bufs.name[L.buf[k]] : "activations of " + D.mods[L.mod[k]] + " mb" + L.micro[k];
  }

  /* ---- the page ---------------------------------------------------------------- */
  var app = document.getElementById("app");
  var budgetName = M.budget_from_plan ? "budget" : "device memory";
  app.innerHTML =
    "<div id=\"figures\"></div><details id=\"exposed-rank\"></details>" +
    "<div id=\"controls\"><button data-act=\"fit\" title=\"show the whole step (0)\">fit</button>" +
    "<button data-act=\"in\" title=\"zoom in (+)\">+</button><button data-act=\"out\" title=\"zoom out (-)\">\u2212</button>" +
    "<button data-act=\"peak\" title=\"zoom to the memory peak\">peak</button>" +
    "<label><input type=\"checkbox\" id=\"arrows\" checked> dependency arrows</label>" +
    (MR.length ? "<label title=\"draw each measured step with its hooks at the modeled hooks' times; unchecked: as measured\">" +
                 "<input type=\"checkbox\" id=\"align\" checked> line up hooks</label>" : "") +
    "<span class=\"hint\">wheel: zoom \u00b7 drag: pan \u00b7 shift-drag: zoom to a range \u00b7 click the memory chart: what is live then</span></div>" +
    "<div id=\"legend\"></div><div id=\"status\"></div>" +
    "<div id=\"plot\"><svg id=\"svg\" xmlns=\"" + NS + "\"></svg></div>" +
    "<div id=\"live\"></div><div id=\"tip\" hidden></div>" +
    "<pre id=\"fpviz-selftest\" hidden></pre>";
  var svg = document.getElementById("svg"), tip = document.getElementById("tip");
  var statusEl = document.getElementById("status"), liveEl = document.getElementById("live");
  var arrowsBox = document.getElementById("arrows");

  document.getElementById("figures").innerHTML = [
    ["modeled step", fmtUs(M.step_us)], ["compute", fmtUs(M.compute_us)],
    ["exposed communication", fmtUs(M.exposed_us) + (M.step_us > 0 ? " (" + (100 * M.exposed_us / M.step_us).toFixed(1) + "%)" : "")],
    ["peak memory", fmtBytes(M.peak_bytes)], [budgetName, fmtBytes(M.budget) + (M.budget_from_plan ? "" : " (no budget in the plan)")],
    ["arena", fmtBytes(M.arena_bytes)], ["ops", fmtInt(M.nops)], ["layout classes", String(M.nclasses)]
  ].concat(MEAS.map(function (m) {
    var e = M.step_us > 0 ? " (model " + (M.step_us >= m.end ? "" : "\u2212") + (100 * Math.abs(m.end - M.step_us) / m.end).toFixed(1) +
            "% " + (M.step_us >= m.end ? "over" : "under") + ")" : "";
    return ["measured step, rank " + m.rank, fmtUs(m.end) + e];
  })).map(function (f) { return "<span class=\"fig\"><span class=\"k\">" + esc(f[0]) + "</span> " + esc(f[1]) + "</span>"; }).join("");
  /* the exposed communication ranked (as `flexplan explain --exposed`):
   * the op the compute stream waited for, its bucket, the hook that waited;
   * a row zooms to the wait */
  (function () {
    var X = D.exposed_rank || [], el = document.getElementById("exposed-rank"), TOP = 20;
    if (!X.length) { el.hidden = true; return; }
    var rows = X.slice(0, TOP).map(function (x, k) {
      var by = x[1] >= 0 ? x[1] : x[0];
      return "<tr data-wait=\"" + x[0] + "\"><td>" + (k + 1) + "</td><td class=\"num\">" + esc((x[2] / 1e3).toFixed(3)) +
        "</td><td class=\"num\">" + (M.step_us > 0 ? (100 * x[2] / M.step_us).toFixed(1) + "%" : "") + "</td><td>" +
        esc(opName(by)) + " (op " + by + ")</td><td>" + esc(O.bucket[by] >= 0 ? D.buckets[O.bucket[by]] : "-") +
        "</td><td>" + esc(D.segs.label[O.seg[x[0]]]) + "</td></tr>";
    });
    el.innerHTML = "<summary>exposed communication, ranked: " + X.length + " wait" + (X.length === 1 ? "" : "s") +
      (X.length > TOP ? " (the largest " + TOP + " shown)" : "") + "</summary><table><thead><tr><th>#</th><th>ms</th>" +
      "<th>share</th><th>op waited for</th><th>bucket</th><th>hook (waiting)</th></tr></thead><tbody>" +
      rows.join("") + "</tbody></table>";
    el.addEventListener("click", function (ev) {
      var tr = ev.target.closest ? ev.target.closest("tr[data-wait]") : null;
      if (!tr) return;
      var w = +tr.getAttribute("data-wait"), by = X.filter(function (x) { return x[0] === w; })[0][1];
      var a = Math.min(O.st[w], by >= 0 ? O.st[by] : O.st[w]), b = Math.max(O.en[w], by >= 0 ? O.en[by] : O.en[w]);
      var pad = Math.max((b - a) * 0.25, 1);
      setView(a - pad, b + pad);
      redraw();
    });
  })();
  document.getElementById("legend").innerHTML =
    KIND_LABEL.map(function (k) { return "<span class=\"lg\"><i class=\"sw k-" + k[0] + "\"></i>" + esc(k[1]) + "</span>"; }).join("") +
    "<span class=\"lg\"><i class=\"sw exposed-sw\"></i>exposed communication</span><span class=\"lg\"><i class=\"sw agg-sw\"></i>merged (zoom in)</span><br>" +
    D.cats.map(function (c, k) { return "<span class=\"lg\"><i class=\"sw m-" + k + "\"></i>" + esc(c) + "</span>"; }).join("");

  /* ---- geometry ------------------------------------------------------------------- */
  var width = 1200, W = 1000, v0 = 0, v1 = 1;
  var span0 = Math.max(M.t_hi - M.t_lo, 1e-3), pad = span0 * 0.01;
  var full0 = M.t_lo - pad, full1 = M.t_hi + pad;
  /* the measured rows' drawn times, and the whole view (the modeled step and every row) */
  function placeMeasured() {
    var lo = M.t_lo, hi = M.t_hi;
    MR.forEach(function (row) {
      var m = row.m, w = warpOf(m);
      for (var i = 0; i < N; i++) if (m.st[i] >= 0) { row.ST[i] = w(m.st[i]); row.EN[i] = w(m.en[i]); }
      for (var k = 0; k < NSEG; k++) { row.HS[k] = w(m.hook_st[k]); row.HE[k] = w(m.hook_en[k]); }
      row.END = w(m.end);
      row.pm = row.lanes.map(function (L) { return prefixMax(L, row.EN); });
      lo = Math.min(lo, w(0));
      hi = Math.max(hi, row.END);
    });
    var sp = Math.max(hi - lo, 1e-3);
    full0 = lo - sp * 0.01;
    full1 = hi + sp * 0.01;
  }
  placeMeasured();
  var laneY = []; /* [rank][stream] = y of the lane's top */
  var memTop = 0, height = 0;
  function layout() {
    width = Math.max(600, Math.floor(document.getElementById("plot").clientWidth || window.innerWidth - 16));
    W = width - LABEL_W - RIGHT;
    var y = AXIS_H;
    function block() {
      var top = y + RANK_H + HOOK_H + 2, ys = [];
      for (var s = 0; s < D.streams.length; s++) ys.push(top + s * (LANE_H + LANE_GAP));
      y = top + D.streams.length * (LANE_H + LANE_GAP) + 6;
      return ys;
    }
    laneY = R.map(function (rk) { rk.y = block(); return rk.y; });
    MR.forEach(function (row) { row.y = block(); });
    memTop = y + MEM_GAP;
    height = memTop + MEM_H + MEM_AXIS + 6;
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
  }
  function X(t) { return LABEL_W + (t - v0) / (v1 - v0) * W; }
  function Xc(t) { return Math.max(LABEL_W - 2, Math.min(LABEL_W + W + 2, X(t))); }
  function T(x) { return v0 + (x - LABEL_W) / W * (v1 - v0); }
  function f1(x) { return Math.round(x * 10) / 10; }

  /* ---- drawing ----------------------------------------------------------------------- */
  var stats = {};
  function niceStep(span, n) {
    var raw = span / n, p = Math.pow(10, Math.floor(Math.log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
  }
  function axis(out) {
    var step = niceStep(v1 - v0, Math.max(2, Math.floor(W / 110)));
    var t = Math.ceil(v0 / step) * step;
    out.push("<g class=\"axis\">");
    for (; t <= v1; t += step) {
      var x = f1(X(t));
      out.push("<line x1=\"" + x + "\" x2=\"" + x + "\" y1=\"" + (AXIS_H - 5) + "\" y2=\"" + (memTop + MEM_H) + "\" class=\"grid\"/>");
      out.push("<text x=\"" + x + "\" y=\"" + (AXIS_H - 8) + "\" text-anchor=\"middle\">" + esc(fmtTick(Math.abs(t) < step / 1e6 ? 0 : t, step)) + "</text>");
    }
    out.push("</g>");
  }
  function lowerBound(pm, t) { /* the first position in a lane whose running maximum end is at or after t */
    var lo = 0, hi = pm.length;
    while (lo < hi) { var m = (lo + hi) >> 1; if (pm[m] < t) lo = m + 1; else hi = m; }
    return lo;
  }
  /* lane s of a row (a modeled rank or a measured record); merged boxes and
   * ticks carry the lane positions they cover (data-ka, data-kb) */
  function lane(out, row, s) {
    var L = row.lanes[s], y = row.y[s], h = LANE_H, ticks = [], ST = row.ST, EN = row.EN;
    var agg = null;
    function box(i, x0, x1, yy, hh) {
      var w = Math.max(opClass(i) === "compute" ? MIN_COMPUTE_PX : MIN_PX, x1 - x0);
      out.push("<rect class=\"op k-" + kindOf(i) + "\" data-op=\"" + i + "\" x=\"" + f1(x0) + "\" y=\"" + f1(yy) +
               "\" width=\"" + f1(w) + "\" height=\"" + f1(hh) + "\"/>");
      stats.boxes++;
      if (w > 46 && hh >= 12) {
        var t = label(i), room = Math.floor((w - 6) / 6.2);
        if (room >= 4) out.push("<text class=\"bl\" x=\"" + f1(x0 + 3) + "\" y=\"" + f1(yy + hh / 2 + 4) + "\">" +
                                esc(t.length > room ? t.slice(0, room - 1) + "\u2026" : t) + "</text>");
      }
    }
    function flush() {
      if (!agg) return;
      if (agg.n === 1) { /* one op alone: its own box, a pixel wide */
        box(agg.a, agg.x0, agg.x1, y, h);
        agg = null;
        return;
      }
      out.push("<rect class=\"agg\" data-a=\"" + agg.a + "\" data-b=\"" + agg.b + "\" data-ka=\"" + agg.ka + "\" data-kb=\"" + agg.kb +
               "\" data-n=\"" + agg.n + "\" data-s=\"" + s +
               "\" x=\"" + f1(agg.x0) + "\" y=\"" + y + "\" width=\"" + f1(Math.max(MIN_PX, agg.x1 - agg.x0)) + "\" height=\"" + h + "\"/>");
      stats.aggs++;
      stats.merged += agg.n;
      agg = null;
    }
    for (var k = lowerBound(row.pm[s], v0); k < L.length; k++) {
      var i = L[k];
      if (ST[i] > v1) break;
      if (opClass(i) === "sync") { ticks.push(k); continue; }
      var j = k; /* a grouped call: its members run as one, with one start and end */
      if (O.group[i] >= 0)
        while (j + 1 < L.length && O.group[L[j + 1]] === O.group[i] && ST[L[j + 1]] === ST[i]) j++;
      var x0 = Xc(ST[i]), x1 = Xc(EN[i]), n = j - k + 1;
      if (x1 - x0 < MIN_PX) {
        if (agg && x0 - agg.x1 < MIN_PX) { agg.x1 = Math.max(agg.x1, x1); agg.b = L[j]; agg.kb = j; agg.n += n; }
        else { flush(); agg = {x0: x0, x1: x1, a: i, b: L[j], ka: k, kb: j, n: n}; }
      } else if (n > 1 && h / n < 3) {
        flush(); /* too many members to stack: one box for the call */
        agg = {x0: x0, x1: x1, a: i, b: L[j], ka: k, kb: j, n: n};
        flush();
      } else {
        flush();
        for (var m = k; m <= j; m++) box(L[m], x0, x1, y + (m - k) * h / n, h / n - (n > 1 ? 0.5 : 0));
      }
      k = j;
    }
    flush();
    /* sync ops: thin ticks, records at the top of the lane, waits at the bottom;
     * ticks of one kind less than a pixel apart merge into one grey tick */
    var tk = null, tks = {record: null, wait: null};
    function flushTick() {
      if (!tk) return;
      var rec = opName(tk.a) === "record";
      if (tk.n === 1) {
        out.push("<rect class=\"op sync k-" + (rec ? "record" : "wait") + "\" data-op=\"" + tk.a + "\" x=\"" + f1(tk.x - 0.75) +
                 "\" y=\"" + f1(rec ? y : y + h * 0.7) + "\" width=\"1.5\" height=\"" + f1(h * 0.3) + "\"/>");
        stats.boxes++;
      } else {
        out.push("<rect class=\"agg tick\" data-sync=\"" + (rec ? "record" : "wait") + "\" data-a=\"" + tk.a + "\" data-b=\"" + tk.b +
                 "\" data-ka=\"" + tk.ka + "\" data-kb=\"" + tk.kb +
                 "\" data-n=\"" + tk.n + "\" data-s=\"" + s + "\" x=\"" + f1(tk.x - 0.75) + "\" y=\"" + f1(rec ? y : y + h * 0.7) +
                 "\" width=\"1.5\" height=\"" + f1(h * 0.3) + "\"/>");
        stats.aggs++;
        stats.merged += tk.n;
      }
      tk = null;
    }
    ticks.forEach(function (k) {
      var i = L[k], x = Xc(ST[i]), kd = opName(i);
      tk = tks[kd];
      if (tk && x - tk.x < MIN_PX) { tk.n++; tk.b = i; tk.kb = k; return; }
      flushTick();
      tks[kd] = {x: x, a: i, b: i, ka: k, kb: k, n: 1};
    });
    tk = tks.record; flushTick();
    tk = tks.wait; flushTick();
  }
  function exposed(out, r) {
    var y = laneY[r][0];
    D.exposed.forEach(function (x, j) {
      if (x[1] < v0 || x[0] > v1) return;
      var a = Xc(x[0]), b = Xc(x[1]);
      out.push("<rect class=\"exposed\" data-x=\"" + j + "\" x=\"" + f1(a) + "\" y=\"" + (y - 2) + "\" width=\"" +
               f1(Math.max(MIN_PX, b - a)) + "\" height=\"" + (LANE_H + 4) + "\"/>");
    });
  }
  /* the longest of a segment's labels that fits in room characters:
   * "pre_forward(layers.3) mb0", "pre_forward(layers.3)", "layers.3", "3" */
  function segLabelFit(k, room) {
    var full = D.segs.label[k], mod = D.segs.mod[k] >= 0 ? D.mods[D.segs.mod[k]] : "";
    var forms = [full, full.replace(/ mb0$/, ""), mod || D.segkinds[D.segs.kind[k]], mod.split(".").pop()];
    for (var f = 0; f < forms.length; f++) if (forms[f] && forms[f].length <= room) return forms[f];
    return "";
  }
  function segLabel(out, k, a, b, y) {
    var t = segLabelFit(k, Math.floor((b - a - 3) / 6.1));
    if (t) out.push("<text class=\"sl\" x=\"" + f1(a + 2) + "\" y=\"" + (y + HOOK_H - 5) + "\">" + esc(t) + "</text>");
  }
  /* the hooks lane, modeled (attr "seg") or measured ("mseg"): hook k from
   * its entry to the next hook's entry, the hook call itself a dark bar at
   * its foot; labelled where the label fits */
  function hookLane(out, y, HS, HE, end, attr) {
    for (var k = 0; k < NSEG; k++) {
      var t0 = HS[k], t1 = k + 1 < NSEG ? HS[k + 1] : Math.max(HE[k], end);
      if (t1 < v0 || t0 > v1) continue;
      var a = Xc(t0), b = Xc(t1), c = Xc(HE[k]);
      if (b - a >= 2) {
        out.push("<rect class=\"seg sk-" + D.segs.kind[k] + "\" data-" + attr + "=\"" + k + "\" x=\"" + f1(a) + "\" y=\"" + y +
                 "\" width=\"" + f1(b - a) + "\" height=\"" + HOOK_H + "\"/>");
        segLabel(out, k, a, b, y);
      }
      if (c - a >= 1)
        out.push("<rect class=\"hookcall\" data-" + attr + "=\"" + k + "\" x=\"" + f1(a) + "\" y=\"" + (y + HOOK_H - 3) + "\" width=\"" +
                 f1(c - a) + "\" height=\"3\"/>");
    }
  }
  function hooks(out, r) { hookLane(out, laneY[r][0] - HOOK_H - 2, MH_ST, MH_EN, MH_END, "seg"); }
  /* a measured row's hooks, and on its compute lane the trainer's work
   * between one hook's exit and the next hook's entry, coloured as the
   * compute it is */
  function mhooks(out, row) {
    var yc = row.y[0];
    hookLane(out, row.y[0] - HOOK_H - 2, row.HS, row.HE, row.END, "mseg");
    for (var k = 0; k < NSEG; k++) {
      if (k + 1 < NSEG && row.HS[k + 1] > row.HE[k] && !(row.HS[k + 1] < v0 || row.HE[k] > v1)) {
        var x0 = Xc(row.HE[k]), x1 = Xc(row.HS[k + 1]);
        out.push("<rect class=\"tw k-" + workKind(k + 1) + "\" data-tw=\"" + (k + 1) + "\" x=\"" + f1(x0) + "\" y=\"" + (yc + 4) +
                 "\" width=\"" + f1(Math.max(MIN_PX, x1 - x0)) + "\" height=\"" + (LANE_H - 8) + "\"/>");
      }
    }
  }
  function arrows(out, r) {
    if (!arrowsBox.checked) return 0;
    var F = R[r].flows, shown = [];
    for (var j = 0; j < F.length; j++) {
      var a = F[j][0], b = F[j][1], ta = EN[a], tb = ST[b];
      if (Math.max(ta, tb) < v0 || Math.min(ta, tb) > v1) continue;
      shown.push(j);
      if (shown.length > MAX_ARROWS) return -1;
    }
    shown.forEach(function (j) {
      var a = F[j][0], b = F[j][1], w = D.flows[j][0];
      var x0 = Xc(EN[a]), y0 = laneY[r][O.stream[a]] + LANE_H / 2;
      var x1 = Xc(ST[b]), y1 = laneY[r][O.stream[b]] + LANE_H / 2;
      var dx = Math.max(12, Math.abs(x1 - x0) / 3);
      var cls = exposedByWait[w] !== undefined ? "arrow hot" : "arrow";
      out.push("<path class=\"" + cls + "\" data-w=\"" + w + "\" d=\"M" + f1(x0) + "," + f1(y0) + " C" + f1(x0 + dx) + "," + f1(y0) +
               " " + f1(x1 - dx) + "," + f1(y1) + " " + f1(x1) + "," + f1(y1) + "\" marker-end=\"url(#ah" + (cls === "arrow" ? "" : "h") + ")\"/>");
    });
    return shown.length;
  }
  var memMax = 1, budgetOnChart = true;
  function memory(out, gut) {
    var top = memTop, h = MEM_H;
    budgetOnChart = M.budget <= 4 * Math.max(peakBytes, 1);
    var offScale = "";
    memMax = Math.max(peakBytes, budgetOnChart ? M.budget : 0) * 1.08 || 1;
    function Y(b) { return top + h - b / memMax * h; }
    out.push("<rect class=\"membg\" x=\"" + LABEL_W + "\" y=\"" + top + "\" width=\"" + W + "\" height=\"" + h + "\"/>");
    /* gridlines at round numbers of the binary unit the scale calls for */
    var unit = memMax >= 1073741824 ? 1073741824 : memMax >= 1048576 ? 1048576 : memMax >= 1024 ? 1024 : 1;
    var step = Math.max(1, niceStep(memMax / unit, 4)) * unit;
    for (var b = 0; b <= memMax; b += step) {
      out.push("<line class=\"grid\" x1=\"" + LABEL_W + "\" x2=\"" + (LABEL_W + W) + "\" y1=\"" + f1(Y(b)) + "\" y2=\"" + f1(Y(b)) + "\"/>");
      gut.push("<text class=\"ml\" x=\"" + (LABEL_W - 6) + "\" y=\"" + f1(Y(b) + 4) + "\" text-anchor=\"end\">" + esc(fmtBytes(b)) + "</text>");
    }
    /* stacked step areas, one path per category */
    var n = PTS.length, cum = new Float64Array(n);
    for (var c = 1; c <= NC; c++) {
      var upper = [], lower = [];
      for (var k = 0; k < n; k++) {
        var t0 = PTS[k][0], t1 = k + 1 < n ? PTS[k + 1][0] : Math.max(M.t_hi, t0);
        if (t1 < v0 && k + 1 < n) { cum[k] += PTS[k][c]; continue; }
        if (t0 > v1) break;
        var a = f1(Xc(t0)), e = f1(Xc(t1));
        lower.push(a + "," + f1(Y(cum[k])), e + "," + f1(Y(cum[k])));
        cum[k] += PTS[k][c];
        upper.push(a + "," + f1(Y(cum[k])), e + "," + f1(Y(cum[k])));
      }
      for (; k < n; k++) cum[k] += PTS[k][c];
      if (upper.length) out.push("<path class=\"area m-" + (c - 1) + "\" data-c=\"" + (c - 1) + "\" d=\"M" + upper.join(" L") +
                                 " L" + lower.reverse().join(" L") + " Z\"/>");
    }
    if (budgetOnChart) {
      var yb = f1(Y(M.budget));
      out.push("<line class=\"budget\" x1=\"" + LABEL_W + "\" x2=\"" + (LABEL_W + W) + "\" y1=\"" + yb + "\" y2=\"" + yb + "\"/>");
      out.push("<text class=\"bl2\" x=\"" + (LABEL_W + W - 4) + "\" y=\"" + (yb - 4) + "\" text-anchor=\"end\">" + esc(budgetName + " " +
               fmtBytes(M.budget) + (M.budget_from_plan ? "" : " (no budget in the plan)")) + "</text>");
    } else {
      offScale = "\u2191 " + budgetName + " " + fmtBytes(M.budget) + (M.budget_from_plan ? "" : " (no budget in the plan)") +
        " is far above this scale";
    }
    if (peakT >= v0 && peakT <= v1) {
      var xp = f1(X(peakT)), yp = f1(Y(peakBytes));
      out.push("<line class=\"peak\" x1=\"" + xp + "\" x2=\"" + xp + "\" y1=\"" + top + "\" y2=\"" + (top + h) + "\"/>");
      out.push("<circle class=\"peak\" id=\"peak-mark\" cx=\"" + xp + "\" cy=\"" + yp + "\" r=\"4\"/>");
      var right = X(peakT) > LABEL_W + W * 0.62;
      out.push("<text class=\"pl\" x=\"" + f1(X(peakT) + (right ? -6 : 6)) + "\" y=\"" + f1(Math.max(top + 12, Y(peakBytes) - 6)) +
               "\"" + (right ? " text-anchor=\"end\"" : "") + ">" +
               esc("peak " + fmtBytes(peakBytes) + " at " + fmtUs(peakT)) + "</text>");
    }
    if (inspectT !== null && inspectT >= v0 && inspectT <= v1) {
      var xi = f1(X(inspectT));
      out.push("<line class=\"inspect\" x1=\"" + xi + "\" x2=\"" + xi + "\" y1=\"" + top + "\" y2=\"" + (top + h) + "\"/>");
    }
    gut.push("<text class=\"title\" x=\"8\" y=\"" + (top - 10) + "\">memory (modeled)<tspan class=\"sub2\" dx=\"8\">" +
             "device bytes per rank by category; the same on every rank (one arena)</tspan>" +
             (offScale ? "<tspan class=\"off\" dx=\"12\">" + esc(offScale) + "</tspan>" : "") + "</text>");
  }
  function render() {
    stats = {boxes: 0, aggs: 0, merged: 0, arrows: 0, arrowsHidden: false};
    var out = ["<defs><clipPath id=\"clip\"><rect x=\"" + LABEL_W + "\" y=\"0\" width=\"" + W + "\" height=\"" + height + "\"/></clipPath>" +
               "<marker id=\"ah\" viewBox=\"0 0 8 8\" refX=\"7\" refY=\"4\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0 L8,4 L0,8 z\" class=\"ahead\"/></marker>" +
               "<marker id=\"ahh\" viewBox=\"0 0 8 8\" refX=\"7\" refY=\"4\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0 L8,4 L0,8 z\" class=\"ahead hot\"/></marker></defs>"];
    axis(out);
    R.forEach(function (rk, r) {
      var y0 = laneY[r][0] - HOOK_H - RANK_H - 2;
      out.push("<text class=\"rank\" x=\"8\" y=\"" + (y0 + 14) + "\">" + esc("rank " + rk.rank) + "</text>");
      out.push("<text class=\"rank2\" x=\"" + LABEL_W + "\" y=\"" + (y0 + 14) + "\">" + esc("layout class " + (rk.cls + 1) + " of " +
               M.nclasses + " (" + fmtInt(rk.members) + " rank" + (rk.members === 1 ? "" : "s") + ") \u00b7 " + fmtInt(rk.nops) + " ops") + "</text>");
      out.push("<text class=\"ln\" x=\"8\" y=\"" + (laneY[r][0] - 5) + "\">hooks</text>");
      D.streams.forEach(function (s, k) {
        out.push("<rect class=\"lanebg\" x=\"" + LABEL_W + "\" y=\"" + laneY[r][k] + "\" width=\"" + W + "\" height=\"" + LANE_H + "\"/>");
        out.push("<text class=\"ln\" x=\"8\" y=\"" + (laneY[r][k] + LANE_H / 2 + 4) + "\">" + esc(s) + (k === 0 ? " (trainer)" : "") + "</text>");
      });
      out.push("<g clip-path=\"url(#clip)\" data-r=\"" + r + "\">");
      hooks(out, r);
      exposed(out, r);
      for (var s = 0; s < D.streams.length; s++) lane(out, rk, s);
      var na = arrows(out, r);
      if (na < 0) stats.arrowsHidden = true; else stats.arrows += na;
      out.push("</g>");
    });
    MR.forEach(function (row, q) {
      var m = row.m, y0 = row.y[0] - HOOK_H - RANK_H - 2;
      out.push("<text class=\"rank meas\" x=\"8\" y=\"" + (y0 + 14) + "\">" + esc("rank " + m.rank + " measured") + "</text>");
      out.push("<text class=\"rank2\" x=\"" + LABEL_W + "\" y=\"" + (y0 + 14) + "\">" + esc(m.path + " \u00b7 step " + m.step + " \u00b7 " +
               fmtUs(m.end) + " measured against " + fmtUs(M.step_us) + " modeled \u00b7 " + fmtInt(row.nops) + " ops timed \u00b7 " +
               (aligned ? "hooks lined up with the modeled ones" : "drawn as measured")) + "</text>");
      out.push("<text class=\"ln\" x=\"8\" y=\"" + (row.y[0] - 5) + "\">hooks (measured)</text>");
      D.streams.forEach(function (s, k) {
        out.push("<rect class=\"lanebg meas\" x=\"" + LABEL_W + "\" y=\"" + row.y[k] + "\" width=\"" + W + "\" height=\"" + LANE_H + "\"/>");
        out.push("<text class=\"ln\" x=\"8\" y=\"" + (row.y[k] + LANE_H / 2 + 4) + "\">" + esc(s) + (k === 0 ? " (trainer)" : "") + "</text>");
      });
      out.push("<g clip-path=\"url(#clip)\" data-m=\"" + q + "\">");
      mhooks(out, row);
      for (var s = 0; s < D.streams.length; s++) lane(out, row, s);
      out.push("</g>");
    });
    var gut = [];
    out.push("<g clip-path=\"url(#clip)\" data-mem=\"1\">");
    memory(out, gut);
    out.push("</g>");
    out.push.apply(out, gut);
    svg.innerHTML = out.join("");
    /* the view may reach past the step (padding, panning): say what of the step is shown */
    var s0 = Math.max(v0, M.t_lo), s1 = Math.min(v1, M.t_hi);
    statusEl.textContent = (s1 > s0 ? "showing " + fmtUs(s0) + " \u2026 " + fmtUs(s1) + " of the step (" + fmtUs(s1 - s0) + ")"
                                    : "outside the step") + " \u00b7 " + fmtInt(stats.boxes) +
      " boxes, " + fmtInt(stats.merged) + " ops merged into " + fmtInt(stats.aggs) + " grey boxes (zoom in to separate them) \u00b7 " +
      (stats.arrowsHidden ? "more than " + MAX_ARROWS + " waits in view: zoom in to see their arrows" : fmtInt(stats.arrows) + " dependency arrows");
  }

  /* ---- what is live (the peak, or a clicked instant) -------------------------------- */
  var inspectT = null;
  function showLive(t, why) {
    var ks = liveAt(t), p = ptAt(t), L = D.lives;
    var tot = p ? total(p) : 0;
    var rows = [];
    D.mem.persistent.forEach(function (pc, c) {
      if (pc[1] > 0) rows.push("<tr><td>" + esc(pc[1] + " persistent " + D.cats[c] + " buffer" + (pc[1] === 1 ? "" : "s")) +
                               "</td><td><i class=\"sw m-" + c + "\"></i>" + esc(D.cats[c]) + "</td><td class=\"n\">" + esc(fmtBytes(pc[0])) +
                               "</td><td>all step</td></tr>");
    });
    var LIMIT = 60;
    ks.slice(0, LIMIT).forEach(function (k) {
      rows.push("<tr><td>" + esc(lifeName(k)) + "</td><td><i class=\"sw m-" + L.cat[k] + "\"></i>" + esc(D.cats[L.cat[k]]) +
                "</td><td class=\"n\">" + esc(fmtBytes(L.bytes[k])) + "</td><td>" + esc(fmtUs(L.t0[k]) + " \u2026 " + fmtUs(L.t1[k])) + "</td></tr>");
    });
    if (ks.length > LIMIT) {
      var rest = 0;
      ks.slice(LIMIT).forEach(function (k) { rest += L.bytes[k]; });
      rows.push("<tr><td>\u2026 and " + (ks.length - LIMIT) + " more</td><td></td><td class=\"n\">" + esc(fmtBytes(rest)) + "</td><td></td></tr>");
    }
    liveEl.innerHTML = "<h2>" + esc(why + ": " + fmtBytes(tot) + " live at " + fmtUs(t)) +
      (M.budget ? " <span class=\"sub\">(" + esc((100 * tot / M.budget).toFixed(1) + "% of the " + budgetName + ", " + fmtBytes(M.budget) + ")") + "</span>" : "") +
      "</h2><table><thead><tr><th>what</th><th>category</th><th>bytes</th><th>live (modeled)</th></tr></thead><tbody>" +
      rows.join("") + "</tbody></table>";
  }

  /* ---- tooltips ----------------------------------------------------------------------- */
  function durLine(what, t0, t1) { return what + " " + esc(fmtUs(t0)) + " \u2192 " + esc(fmtUs(t1)) + " (" + esc(fmtUs(t1 - t0)) + ")"; }
  function ratio(meas, model) {
    return model > 0 ? " \u00b7 " + (meas / model).toFixed(meas / model >= 100 ? 0 : 2) + "\u00d7 the modeled" : "";
  }
  /* op i as a measured row ran it, against the model */
  function measuredLines(i, row) {
    var m = row.m;
    return [durLine("measured on rank " + m.rank + ":", m.st[i], m.en[i]) + ratio(m.en[i] - m.st[i], EN[i] - ST[i])];
  }
  function opTip(i, row) {
    var meas = row.m !== undefined;
    var lines = ["<b>op " + i + " \u00b7 " + esc(label(i)) + "</b>" + (meas ? " <span class=\"hint\">(measured row)</span>" : ""),
      esc(D.segs.label[O.seg[i]]) + " \u00b7 stream " + esc(D.streams[O.stream[i]])];
    var c = opClass(i);
    if (c === "comm" || c === "local") {
      var parts = [];
      if (O.bucket[i] >= 0) parts.push("bucket " + esc(D.buckets[O.bucket[i]]));
      if (O.comm[i] >= 0) parts.push("comm " + esc(D.comms[O.comm[i]]));
      parts.push(esc(D.dtypes[O.dtype[i]]) + (O.sdtype[i] !== O.dtype[i] ? " from " + esc(D.dtypes[O.sdtype[i]]) : ""));
      parts.push(esc(fmtBytes(bytesOn(row, i))));
      lines.push(parts.join(" \u00b7 "));
      var ops = [];
      if (O.dst[i] >= 0) ops.push(esc(D.bufs.name[O.dst[i]]));
      if (O.src[i] >= 0) ops.push((O.dst[i] >= 0 ? "\u2190 " : "") + esc(D.bufs.name[O.src[i]]));
      if (ops.length) lines.push(ops.join(" "));
      if (O.group[i] >= 0) lines.push("grouped call " + O.group[i] + " (its members run as one call)");
    } else if (c === "compute") {
      lines.push(O.flops[i] > 0 ? esc(O.flops[i].toPrecision(3) + " flop") : "no flops in the model");
    } else if (opName(i) === "wait" && waitRecord[i] !== undefined) {
      lines.push("waits for op " + waitRecord[i] + " (" + esc(label(waitRecord[i])) + ", " + esc(D.streams[O.stream[waitRecord[i]]]) + ")");
      if (exposedByWait[i] !== undefined) {
        var x = D.exposed[exposedByWait[i]];
        lines.push("<span class=\"hot\">compute idles " + esc(fmtUs(x[1] - x[0])) + " here</span>");
      }
    }
    lines.push(durLine("modeled", ST[i], EN[i]));
    if (meas) lines.push.apply(lines, measuredLines(i, row));
    else MR.forEach(function (mr) { if (mr.m.st[i] >= 0) lines.push.apply(lines, measuredLines(i, mr)); });
    return lines.join("<br>");
  }
  function aggTip(el, row) {
    var a = +el.dataset.a, b = +el.dataset.b, s = +el.dataset.s, L = row.lanes[s], counts = {};
    var n = 0, bytes = 0, sync = el.dataset.sync; /* "record" or "wait" for merged ticks */
    var meas = 0, model = 0;
    for (var k = +el.dataset.ka; k <= +el.dataset.kb; k++) {
      var i = L[k];
      if (sync ? opName(i) !== sync : opClass(i) === "sync") continue; /* box merges hold timed ops, tick merges one sync kind */
      var kd = kindOf(i);
      counts[kd] = (counts[kd] || 0) + 1;
      bytes += bytesOn(row, i);
      model += EN[i] - ST[i];
      if (row.m) meas += row.m.en[i] - row.m.st[i];
      n++;
    }
    if (n !== +el.dataset.n) errors.push("a merged box of " + el.dataset.n + " ops covers " + n);
    return "<b>" + fmtInt(+el.dataset.n) + " ops merged</b> (each narrower than a pixel: zoom in)<br>ops " + a + " \u2026 " + b +
      "<br>" + Object.keys(counts).map(function (k) { return esc(k) + " \u00d7" + counts[k]; }).join(", ") +
      (bytes ? "<br>" + esc(fmtBytes(bytes)) + " moved" : "") +
      (row.m ? "<br>measured on rank " + row.m.rank + ": " + esc(fmtUs(row.m.st[a])) + " \u2192 " + esc(fmtUs(row.m.en[b])) +
               ", the ops' durations add to " + esc(fmtUs(meas)) + " (modeled " + esc(fmtUs(model)) + ")"
             : "<br>modeled " + esc(fmtUs(ST[a])) + " \u2192 " + esc(fmtUs(EN[b])));
  }
  /* hook k, modeled, and what each measured row (or the one hovered) took */
  function segTip(k, row) {
    var mnext = (k + 1 < NSEG ? MH_ST[k + 1] : Math.max(MH_EN[k], MH_END)) - MH_ST[k];
    var lines = ["<b>" + esc(D.segs.label[k]) + "</b>" + (row ? " <span class=\"hint\">(measured row)</span>" : ""),
      "hook (segment " + k + ")", durLine("modeled: the hook", MH_ST[k], MH_EN[k]) + ", to the next hook " + esc(fmtUs(mnext)),
      durLine("modeled: its ops, on every stream,", D.segs.st[k], D.segs.en[k])];
    (row ? [row] : MR).forEach(function (mr) {
      var m = mr.m, next = k + 1 < NSEG ? m.hook_st[k + 1] : Math.max(m.hook_en[k], m.end);
      lines.push(durLine("measured on rank " + m.rank + ": the hook", m.hook_st[k], m.hook_en[k]) + ", to the next hook " +
                 esc(fmtUs(next - m.hook_st[k])) + ratio(next - m.hook_st[k], mnext));
    });
    return lines.join("<br>");
  }
  /* the trainer's work before hook k on a measured row */
  function workTip(k, row) {
    var m = row.m;
    return "<b>" + esc(workLabel(k)) + "</b> <span class=\"hint\">(the trainer's own work between two hooks)</span><br>" +
      durLine("measured on rank " + m.rank + ":", m.hook_en[k - 1], m.hook_st[k]) + "<br>" +
      durLine("modeled:", MH_EN[k - 1], MH_ST[k]) + ratio(m.hook_st[k] - m.hook_en[k - 1], MH_ST[k] - MH_EN[k - 1]);
  }
  function expTip(j) {
    var x = D.exposed[j], w = x[2];
    var s = "<b class=\"hot\">exposed communication: " + esc(fmtUs(x[1] - x[0])) + "</b><br>";
    if (opName(w) === "wait") {
      s += "the compute stream waits (op " + w + ", " + esc(label(w)) + ")";
      if (x[3] >= 0) s += "<br>for op " + x[3] + ": " + esc(label(x[3])) + " on " + esc(D.streams[O.stream[x[3]]]);
    } else {
      s += "a collective on the compute stream: op " + w + " " + esc(label(w));
    }
    return s + "<br>modeled " + esc(fmtUs(x[0])) + " \u2192 " + esc(fmtUs(x[1]));
  }
  function memTip(t) {
    var p = ptAt(t);
    if (!p) return null;
    var s = "<b>" + esc(fmtBytes(total(p))) + " live at " + esc(fmtUs(t)) + "</b> (modeled)";
    for (var c = NC; c >= 1; c--) if (p[c]) s += "<br><i class=\"sw m-" + (c - 1) + "\"></i>" + esc(D.cats[c - 1]) + " " + esc(fmtBytes(p[c]));
    return s + "<br><span class=\"hint\">click: list what is live then</span>";
  }
  function showTip(html, ev) {
    if (!html) { tip.hidden = true; return; }
    tip.innerHTML = html;
    tip.hidden = false;
    var x = ev.clientX + 14, y = ev.clientY + 14, r = tip.getBoundingClientRect();
    if (x + r.width > window.innerWidth - 4) x = Math.max(4, ev.clientX - r.width - 14);
    if (y + r.height > window.innerHeight - 4) y = Math.max(4, ev.clientY - r.height - 14);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }
  /* the row an element is drawn in: a modeled rank (data-r) or a measured record (data-m) */
  function rowOf(el) {
    var g = el.closest ? el.closest("[data-r],[data-m]") : null;
    if (g && g.dataset.m !== undefined) return MR[+g.dataset.m];
    return R[g ? +g.dataset.r : 0];
  }
  function svgX(ev) { var b = svg.getBoundingClientRect(); return ev.clientX - b.left; }
  function svgY(ev) { var b = svg.getBoundingClientRect(); return ev.clientY - b.top; }
  function inMemory(ev) { var y = svgY(ev); return y >= memTop && y <= memTop + MEM_H && svgX(ev) >= LABEL_W; }
  svg.addEventListener("mousemove", function (ev) {
    if (drag) return;
    var el = ev.target, row = rowOf(el);
    if (el.dataset && el.dataset.op !== undefined) return showTip(opTip(+el.dataset.op, row), ev);
    if (el.dataset && el.dataset.n !== undefined) return showTip(aggTip(el, row), ev);
    if (el.dataset && el.dataset.x !== undefined) return showTip(expTip(+el.dataset.x), ev);
    if (el.dataset && el.dataset.seg !== undefined) return showTip(segTip(+el.dataset.seg, null), ev);
    if (el.dataset && el.dataset.mseg !== undefined) return showTip(segTip(+el.dataset.mseg, row), ev);
    if (el.dataset && el.dataset.tw !== undefined) return showTip(workTip(+el.dataset.tw, row), ev);
    if (el.dataset && el.dataset.w !== undefined) {
      var w = +el.dataset.w;
      return showTip("<b>dependency</b>: op " + w + " (" + esc(label(w)) + ") waits for op " + waitRecord[w] + " (" +
                     esc(label(waitRecord[w])) + ")", ev);
    }
    if (inMemory(ev)) return showTip(memTip(T(svgX(ev))), ev);
    showTip(null, ev);
  });
  svg.addEventListener("mouseleave", function () { tip.hidden = true; });

  /* ---- zoom and pan ----------------------------------------------------------------- */
  var pending = false;
  function redraw() {
    if (pending) return;
    pending = true;
    window.requestAnimationFrame(function () { pending = false; render(); });
  }
  function setView(a, b) {
    var minSpan = 0.01, maxSpan = (full1 - full0) * 1.5;
    var span = Math.min(maxSpan, Math.max(minSpan, b - a)), mid = (a + b) / 2;
    if (b - a !== span) { a = mid - span / 2; b = mid + span / 2; }
    var lo = full0 - span * 0.25, hi = full1 + span * 0.25;
    if (a < lo) { b += lo - a; a = lo; }
    if (b > hi) { a -= b - hi; b = hi; }
    v0 = a; v1 = b;
  }
  function zoomAt(t, f) { setView(t - (t - v0) * f, t + (v1 - t) * f); redraw(); }
  svg.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    var d = ev.deltaY * (ev.deltaMode === 1 ? 33 : ev.deltaMode === 2 ? 400 : 1);
    if (ev.shiftKey || Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) {
      var dx = ev.shiftKey ? d : ev.deltaX;
      setView(v0 + dx / W * (v1 - v0), v1 + dx / W * (v1 - v0));
      return redraw();
    }
    zoomAt(T(Math.max(LABEL_W, svgX(ev))), Math.exp(d * 0.0015));
  }, {passive: false});
  var drag = null;
  svg.addEventListener("pointerdown", function (ev) {
    if (ev.button !== 0) return;
    drag = {x: svgX(ev), v0: v0, v1: v1, shift: ev.shiftKey, moved: false, sel: null};
    try { svg.setPointerCapture(ev.pointerId); } catch (e) { /* a pointer the browser does not track */ }
  });
  svg.addEventListener("pointermove", function (ev) {
    if (!drag) return;
    var dx = svgX(ev) - drag.x;
    if (Math.abs(dx) > 3) drag.moved = true;
    if (!drag.moved) return;
    tip.hidden = true;
    if (drag.shift) {
      if (!drag.sel) { drag.sel = document.createElementNS(NS, "rect"); drag.sel.setAttribute("class", "sel"); svg.appendChild(drag.sel); }
      var a = Math.min(drag.x, svgX(ev)), b = Math.max(drag.x, svgX(ev));
      drag.sel.setAttribute("x", a); drag.sel.setAttribute("y", AXIS_H);
      drag.sel.setAttribute("width", b - a); drag.sel.setAttribute("height", height - AXIS_H);
      return;
    }
    var dt = dx / W * (drag.v1 - drag.v0);
    setView(drag.v0 - dt, drag.v1 - dt);
    redraw();
  });
  svg.addEventListener("pointerup", function (ev) {
    if (!drag) return;
    var d = drag;
    drag = null;
    if (d.shift && d.moved) {
      var a = T(Math.min(d.x, svgX(ev))), b = T(Math.max(d.x, svgX(ev)));
      setView(a, b);
      return redraw();
    }
    if (!d.moved && inMemory(ev)) {
      inspectT = T(svgX(ev));
      showLive(inspectT, "clicked");
      redraw();
    }
  });
  document.getElementById("controls").addEventListener("click", function (ev) {
    var act = ev.target.dataset ? ev.target.dataset.act : null;
    if (act === "fit") { setView(full0, full1); redraw(); }
    if (act === "in") zoomAt((v0 + v1) / 2, 0.5);
    if (act === "out") zoomAt((v0 + v1) / 2, 2);
    if (act === "peak") {
      var sp = (full1 - full0) / 20;
      setView(peakT - sp / 2, peakT + sp / 2);
      inspectT = null;
      showLive(peakT, "at the peak");
      redraw();
    }
  });
  arrowsBox.addEventListener("change", redraw);
  function setAligned(on) {
    aligned = on;
    placeMeasured();
    setView(full0, full1);
  }
  if (MR.length) document.getElementById("align").addEventListener("change", function (ev) { setAligned(ev.target.checked); redraw(); });
  document.addEventListener("keydown", function (ev) {
    if (ev.target && ev.target.tagName === "INPUT") return;
    var sp = v1 - v0;
    if (ev.key === "+" || ev.key === "=") zoomAt((v0 + v1) / 2, 0.5);
    else if (ev.key === "-" || ev.key === "_") zoomAt((v0 + v1) / 2, 2);
    else if (ev.key === "0") { setView(full0, full1); redraw(); }
    else if (ev.key === "ArrowLeft") { setView(v0 - sp / 5, v1 - sp / 5); redraw(); }
    else if (ev.key === "ArrowRight") { setView(v0 + sp / 5, v1 + sp / 5); redraw(); }
  });
  window.addEventListener("resize", function () { layout(); redraw(); });

  /* ---- first draw and the self-test record -------------------------------------------- */
  layout();
  setView(full0, full1);
  /* #view=A,B (microseconds) opens the page on that window */
  var hv = /view=(-?[0-9.eE+-]+),(-?[0-9.eE+-]+)/.exec(window.location.hash || "");
  if (hv && +hv[2] > +hv[1]) setView(+hv[1], +hv[2]);
  var drawn = false;
  var tDraw = window.performance ? performance.now() : 0;
  try {
    render();
    showLive(peakT, "at the peak");
    drawn = true;
  } catch (e) {
    errors.push(String(e && e.stack || e));
  }
  /* #selftest: every tooltip builds (each op on each rank shown, each merged
   * box, each exposed interval, the memory at every timeline point), a real
   * mousemove over the first box shows its tooltip, the wheel zooms, a drag
   * pans, a click on the memory chart lists what is live */
  var tips = 0;
  if (/selftest/.test(window.location.hash || "") && drawn) try {
    R.forEach(function (rk) { for (var i = 0; i < N; i++) if (!rk.skip[i]) { opTip(i, rk); tips++; } });
    MR.forEach(function (row) {
      for (var i = 0; i < N; i++) if (row.m.st[i] >= 0) { opTip(i, row); tips++; }
      for (var k = 0; k < NSEG; k++) { segTip(k, row); tips++; if (k) { workTip(k, row); tips++; } }
    });
    svg.querySelectorAll("rect.agg").forEach(function (el) {
      aggTip(el, rowOf(el));
      tips++;
    });
    D.exposed.forEach(function (x, j) { expTip(j); tips++; });
    PTS.forEach(function (p) { memTip(p[0]); tips++; });
    /* the wheel zooms in around the pointer, a drag pans */
    var pb = svg.getBoundingClientRect(), px = pb.left + LABEL_W + W / 2, py = pb.top + laneY[0][0] + 5;
    var s0 = v1 - v0;
    svg.dispatchEvent(new WheelEvent("wheel", {bubbles: true, cancelable: true, deltaY: -200, clientX: px, clientY: py}));
    if (!(v1 - v0 < s0)) errors.push("the wheel did not zoom in");
    var a0 = v0;
    svg.dispatchEvent(new PointerEvent("pointerdown", {bubbles: true, button: 0, pointerId: 1, clientX: px, clientY: py}));
    svg.dispatchEvent(new PointerEvent("pointermove", {bubbles: true, pointerId: 1, clientX: px - 100, clientY: py}));
    svg.dispatchEvent(new PointerEvent("pointerup", {bubbles: true, pointerId: 1, clientX: px - 100, clientY: py}));
    if (!(v0 > a0)) errors.push("dragging left did not pan right");
    setView(full0, full1);
    render();
    /* a click on the memory chart lists what is live then */
    var my = pb.top + memTop + MEM_H / 2;
    svg.dispatchEvent(new PointerEvent("pointerdown", {bubbles: true, button: 0, pointerId: 1, clientX: px, clientY: my}));
    svg.dispatchEvent(new PointerEvent("pointerup", {bubbles: true, pointerId: 1, clientX: px, clientY: my}));
    if (liveEl.textContent.indexOf("clicked") !== 0) errors.push("a click on the memory chart listed nothing");
    inspectT = null;
    showLive(peakT, "at the peak");
    render();
    var first = svg.querySelector("rect.op");
    if (first) {
      var bb = first.getBoundingClientRect();
      first.dispatchEvent(new MouseEvent("mousemove", {bubbles: true, clientX: bb.left + bb.width / 2, clientY: bb.top + bb.height / 2}));
      if (tip.hidden || tip.innerHTML.indexOf("op " + first.dataset.op) < 0) errors.push("no tooltip over op " + first.dataset.op);
      tip.hidden = true;
    }
  } catch (e) {
    errors.push("tooltip: " + String(e && e.stack || e));
  }
  /* #selftest with measured rows: drawn as measured, every op is still
   * covered; lined up, each measured hook starts where the modeled one does */
  var measuredCheck = null;
  if (/selftest/.test(window.location.hash || "") && drawn && MR.length) try {
    setAligned(false);
    render();
    var cov = covered();
    if (cov[0] !== cov[1]) errors.push("drawn as measured: " + cov[0] + " ops drawn of " + cov[1]);
    setAligned(true);
    render();
    var worst = 0, nseg = 0;
    svg.querySelectorAll("rect.seg[data-seg]").forEach(function (el) {
      var k = el.dataset.seg, x = +el.getAttribute("x");
      svg.querySelectorAll("g[data-m] rect.seg[data-mseg=\"" + k + "\"]").forEach(function (me) {
        worst = Math.max(worst, Math.abs(+me.getAttribute("x") - x));
        nseg++;
      });
    });
    if (worst > 0.11) errors.push("lined up, a measured hook is " + worst + " px from the modeled one");
    /* a real mousemove over a measured op: its tooltip gives both durations */
    var mop = svg.querySelector("g[data-m] rect.op"), mtip = "";
    if (mop) {
      var mb = mop.getBoundingClientRect();
      mop.dispatchEvent(new MouseEvent("mousemove", {bubbles: true, clientX: mb.left + mb.width / 2, clientY: mb.top + mb.height / 2}));
      mtip = tip.hidden ? "" : tip.textContent;
      tip.hidden = true;
      if (mtip.indexOf("modeled") < 0 || mtip.indexOf("measured on rank") < 0) errors.push("a measured op's tooltip: " + mtip);
    } else {
      errors.push("no measured op drawn");
    }
    measuredCheck = {hooks_compared: nseg, worst_px: worst, work: svg.querySelectorAll("rect.tw").length, tip: mtip};
  } catch (e) {
    errors.push("measured rows: " + String(e && e.stack || e));
  }
  function covered() {
    var bx = svg.querySelectorAll("rect.op").length, mg = 0, ex = 0;
    svg.querySelectorAll("rect.agg").forEach(function (el) { mg += +el.dataset.n; });
    R.forEach(function (rk) { ex += rk.nops; });
    MR.forEach(function (row) { ex += row.nops; });
    return [bx + mg, ex, bx, mg];
  }
  var cv = covered(), boxes = cv[2], merged = cv[3], expected = cv[1];
  var ok = drawn && errors.length === 0 && boxes + merged === expected && !!document.getElementById("peak-mark");
  var st = document.getElementById("fpviz-selftest");
  var tEnd = window.performance ? performance.now() : 0;
  /* #bench: time 20 redraws zooming into the middle (what a wheel turn costs) */
  var benchMs = null;
  if (/bench/.test(window.location.hash || "") && drawn) {
    var b0 = performance.now(), c = (v0 + v1) / 2;
    for (var z = 0; z < 20; z++) { setView(c - (v1 - v0) * 0.4, c + (v1 - v0) * 0.4); render(); }
    benchMs = (performance.now() - b0) / 20;
    setView(full0, full1);
    render();
  }
  st.textContent = JSON.stringify({status: ok ? "ok" : "error", errors: errors, boxes: boxes, merged: merged,
                                   covered: boxes + merged, expected: expected, ranks: R.length, width: width, tips: tips,
                                   measured: MR.length, measured_check: measuredCheck,
                                   /* ms from navigation start: page parsed and script started, drawn */
                                   script_start_ms: Math.round(tStart), setup_ms: Math.round(tDraw - tStart),
                                   draw_ms: Math.round(tEnd - tDraw), ready_ms: Math.round(tEnd),
                                   redraw_ms: benchMs === null ? null : Math.round(benchMs * 10) / 10});
  st.setAttribute("data-status", ok ? "ok" : "error");
})();
