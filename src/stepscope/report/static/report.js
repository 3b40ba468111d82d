// stepscope report: what is slow first (verdict, steps), then the waterfall with its span tree and the
// flame graph of any window (traced work by default, start-up one click away), from the embedded view model.
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("stepscope-data").textContent);
  const S = D.spans, P = D.profile, NAMES = D.names;
  const NS = S.id.length, NP = P.t.length, NN = P.parent.length;
  // a large run: the spans shown one by one are some of them (D.aggregated says which), the rest is density
  const AGG = D.aggregated, DEN = D.density;
  const ROW = 16, DPR = window.devicePixelRatio || 1, LABEL_W = 190;
  const tip = document.getElementById("tooltip");
  const PAGE = document.body.dataset.page;
  const $ = (id) => document.getElementById(id);

  const fmt = (us) => us >= 1e6 ? (us / 1e6).toFixed(2) + " s" : us >= 1e3 ? (us / 1e3).toFixed(1) + " ms" : us.toFixed(0) + " us";
  const fmtNs = (ns) => ns == null ? "-" : fmt(ns / 1e3);
  const fmtB = (b) => b == null ? "-" : b >= 1073741824 ? (b / 1073741824).toFixed(2) + " GiB" : b >= 1048576 ? (b / 1048576).toFixed(1) + " MiB" : b >= 1024 ? (b / 1024).toFixed(1) + " KiB" : Math.round(b) + " B";
  const fmtMiB = (m) => m == null ? "-" : fmtB(m * 1048576);
  const short = (n, k) => { const p = String(n).split("."); return p.length > (k || 2) ? p.slice(-(k || 2)).join(".") : n; };
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
  function hue(name) { let h = 0; for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) | 0; return ((h % 360) + 360) % 360; }
  const colorCache = new Map();
  function color(name, light) {
    const k = name + (light ? "1" : "0");
    let c = colorCache.get(k);
    if (!c) { c = `hsl(${hue(name)},${light ? 45 : 60}%,${light ? 80 : 64}%)`; colorCache.set(k, c); }
    return c;
  }
  // flame-graph colours by kind (D.kinds: your code, diffusers/transformers, torch, other libraries, stdlib,
  // start-up, thread); the lightness varies a little by name so that neighbours stay apart
  const KIND_HSL = [[28, 85, 60], [275, 45, 70], [205, 62, 64], [140, 40, 60], [45, 18, 74], [0, 0, 82], [220, 15, 88]];
  const KINDS = D.kinds || [];
  function kindColor(kind, name, faded) {
    const [h, s, l] = KIND_HSL[kind] || KIND_HSL[3];
    const dl = (hue(name) % 9) - 4;
    return faded ? `hsla(${h},${s}%,${Math.min(l + 12, 95)}%,0.35)` : `hsl(${h},${s}%,${l + dl}%)`;
  }
  function showTip(ev, text) { tip.textContent = text; tip.hidden = false; tip.style.left = Math.min(ev.clientX + 12, window.innerWidth - 420) + "px"; tip.style.top = (ev.clientY + 14) + "px"; }
  function hideTip() { tip.hidden = true; }
  // Canvas widths are read once per layout (after the tables are built, before the first draw, and on
  // resize): reading clientWidth after a canvas's height changed forces the whole page to be laid out again.
  const widths = new Map();
  function canvasWidth(cv) { let w = widths.get(cv); if (!w) { w = cv.clientWidth; if (w) widths.set(cv, w); } return w; }
  function sizeCanvas(cv, cssH) { const w = canvasWidth(cv); if (cv.style.height !== cssH + "px") cv.style.height = cssH + "px"; cv.width = Math.round(w * DPR); cv.height = Math.round(cssH * DPR); const g = cv.getContext("2d"); g.setTransform(DPR, 0, 0, DPR, 0, 0); return [g, w]; }
  function visible(el) { return !!(el && el.offsetParent !== null); }

  // ---- run header
  const R = D.run;
  $("runinfo").textContent =
    (D.phases && D.phases.capture ? "capture of " : "") +
    `${R.command.join(" ")}  ·  ${D.phases && D.phases.capture ? "window" : "wall"} ${fmt(R.wall_us)}  ·  ${R.status}${R.exit_code ? " (exit " + R.exit_code + ")" : ""}` +
    (R.status === "incomplete" || R.status === "lost" ? ` (${R.error})` : "") + `  ·  ` +
    `${AGG ? AGG.total.toLocaleString("en") + " spans (" + NS.toLocaleString("en") + " shown one by one)" : NS + " spans"}  ·  ${P.total_samples} samples at ${R.hz} Hz${P.downsampled > 1 ? " (shown 1 in " + P.downsampled + ")" : ""}` +
    (R.start_wall_ms ? `  ·  ${new Date(R.start_wall_ms).toISOString().replace("T", " ").slice(0, 19)}` : "") +
    (R.env && R.env.torch ? `  ·  torch ${R.env.torch}` : "") +
    (R.env && R.env.source === "sentry" ? `  ·  from ${R.env.sdk || "a Sentry SDK"}` : "");

  // ---- phases: start-up (imports, model building) / traced work / shutdown
  const PH = D.phases && D.phases.split ? D.phases : null;
  let spanEnd = R.wall_us;
  for (let i = 0; i < NS; i++) spanEnd = Math.max(spanEnd, S.start[i] + S.dur[i]);
  if (NP) spanEnd = Math.max(spanEnd, P.t[NP - 1]);
  const WORK = PH ? { t0: PH.work_t0, t1: PH.work_t1 } : null;
  // what the work starts at ("the first traced call", or a well-known entry point's first sample), and its name
  const WORK_FROM = (D.phases && D.phases.work_from) || "the first traced call";
  const WORK_NAME = D.phases && D.phases.entry ? "work" : "traced work";
  // a run with no work window: its imports are still start-up, left out of the flame graph and top functions
  const IMPORTS_APART = !PH && D.phases && D.phases.startup_sampled_us > 0;
  // a window of `stepscope capture`: no start-up or shutdown, the program ran before and goes on after; the time
  // before the work is the app idle or serving (analysis.phases)
  const CAPTURE = !!(D.phases && D.phases.capture);
  const BEFORE = CAPTURE ? `before ${WORK_FROM}` : "start-up";
  const BEFORE_WHAT = CAPTURE ? "the app idle or serving" : `imports, model building: before ${WORK_FROM}`;
  const AFTER = CAPTURE ? `after the ${WORK_NAME}` : "shutdown";
  const cap1 = (t) => t[0].toUpperCase() + t.slice(1);

  // ---- the verdict: what is slow and why, in words, first
  const E = D.explain, SM = D.summary, ST = SM.steps;
  const arrow = " \u203a ";
  function shapeWords(shape) { return shape && shape.startsWith("every ") ? `every ${shape.split(" ")[1]}th` : shape === "first" ? "the first only" : shape || ""; }
  (function verdict() {
    const v = $("verdict");
    const unitWord = ST && ST.kind === "diffusion.step" ? "denoising steps" : ST ? `calls of ${short(ST.span_name)}` : "repeats";
    const rule = (E && E.rule) || (ST && ST.rule) || "";
    $("rule").textContent = rule ? "Rule (the one used on this page): " + rule : "";
    if (!ST && !E) { v.textContent = NS > 1 ? "No repeated traced function to compare (trace a function that repeats: a step, a request)." : "No function traced: the flame graph below shows where the time went; `stepscope suggest` names functions to trace."; v.classList.add("calm"); return; }
    if (ST && ST.noisy && (!E || !E.repeats.some((r) => r.group === "slow"))) {
      v.innerHTML = `<b>Too noisy to call.</b> The ${esc(unitWord)} vary too much among themselves to tell slow ones from noise; no row is marked slow.`;
      v.classList.add("noisy"); return;
    }
    const slow = E ? E.repeats.filter((r) => r.group === "slow") : [];
    if (!slow.length) { v.innerHTML = `No slow ${esc(unitWord)}: every one is within the rule.`; v.classList.add("calm"); return; }
    const labels = slow.map((r) => r.label.replace(/^step /, "")).slice(0, 12).join(", ");
    let html = `<b>${E.slow_total != null ? E.slow_total : slow.length} of ${E.repeats_total || E.repeats.length} ${esc(unitWord)} are slow</b>` +
      (E.shape && E.shape !== "irregular" ? ` (${esc(shapeWords(E.shape))}): ` : ": ") +
      `${E.unit === "step" ? "steps " : ""}${esc(labels)}; ${fmtNs(E.slow_mean_ns)} against ${fmtNs(E.fast_mean_ns)}, +${fmtNs(E.gap_ns)} each.`;
    if (E.path && E.path.length) html += ` The extra time runs in <span class="path">${E.path.map((n) => esc(short(n, 3))).join(arrow)}</span>.`;
    if (E.causes && E.causes.length) {
      const c = E.causes[0];
      html += ` <b>${esc(short(c.function, 3))}</b> alone is ${(100 * c.share_of_gap).toFixed(0)}% of the gap.`;
    } else if (E.advice) html += " " + esc(E.advice);
    if (E.memory_note) html += ` <b>Memory:</b> ${esc(E.memory_note)}.`;
    const untr = ST ? ST.rows.filter((r) => r.slow && r.fill && r.fill.length) : [];
    if (untr.length) {
      const f = untr[0].fill[0];
      html += ` In the step table, the slow steps' time is <i>untraced</i> (no traced function holds it); the samples put it in ${esc(short(f.function, 3))}${f.via ? " via " + esc(short(f.via, 2)) : ""}.`;
    }
    v.innerHTML = html;
  })();
  if (PH && PH.startup_us > 0) {
    const n = $("phase-note");
    n.hidden = false;
    n.textContent = `${cap1(BEFORE)} ${fmt(PH.startup_us)} (${BEFORE_WHAT}) and ${AFTER} ${fmt(PH.shutdown_us)} are kept apart: the waterfall, flame graph and top functions open on the ${WORK_NAME} (${fmt(PH.work_us)}).`;
  } else if (IMPORTS_APART) {
    const n = $("phase-note");
    n.hidden = false;
    n.textContent = `Imports (${fmt(D.phases.startup_sampled_us)} sampled) are ${CAPTURE ? "set apart" : "start-up"}: the flame graph and top functions leave them out.`;
  }
  if (D.summary.cut_spans) {  // spans still running when a capture window ended (session.cut_spans)
    const n = $("phase-note"), k = D.summary.cut_spans;
    n.hidden = false;
    n.textContent = (n.textContent ? n.textContent + " " : "") + `${k} span${k === 1 ? " was" : "s were"} still running when the window ended: cut at its end.`;
  }

  // ---- waterfall layout: a label gutter, per thread a header row, then one row per depth
  const threadDepth = new Array(D.threads.length).fill(-1);
  for (let i = 0; i < NS; i++) threadDepth[S.thread[i]] = Math.max(threadDepth[S.thread[i]], S.depth[i]);
  if (DEN) for (const q of DEN.rows) threadDepth[q.thread] = Math.max(threadDepth[q.thread], q.depth);
  const laneTop = []; let y = 18;
  for (let t = 0; t < D.threads.length; t++) { laneTop.push(y); if (threadDepth[t] >= 0) y += ROW * (threadDepth[t] + 2); }
  // device lanes (torch ops, streams, syncs) under the span lanes, on the same time axis
  const DV = D.device;
  const devLanes = DV ? DV.lanes.map((l) => Object.assign({}, l)) : [];
  if (DV && DV.syncs.length) devLanes.push({ label: "host syncs", syncs: true, start: [], dur: [] });
  for (const l of devLanes) { l.top = y + 14; y += ROW + 18; }
  // the memory lane (RSS; CUDA allocated and reserved when recorded) under everything, same time axis
  const ML = D.memory, MEM_H = 64;
  // the lane's scale: from its lowest to its highest reading (memory moves by tens of MiB over hundreds held)
  let memTop = -1, memMax = -Infinity, memMin = Infinity;
  if (ML && ML.t.length) {
    memTop = y + 16; y += MEM_H + 22;
    for (const k of ["rss", "cuda", "reserved"]) if (ML[k]) for (const v of ML[k]) if (v != null) { if (v > memMax) memMax = v; if (v < memMin) memMin = v; }
    if (!(memMax > memMin)) { memMin = Math.max(0, memMin - 1); memMax = memMin + 2; }
  }
  const wfHeight = Math.max(y + 4, 60);
  const MEM_SERIES = [["rss", "#00897b", "RSS"], ["reserved", "#ce93d8", "CUDA reserved"], ["cuda", "#6a1b9a", "CUDA allocated"]];
  const memPeriodUs = ML && ML.t.length > 1 ? (ML.t[ML.t.length - 1] - ML.t[0]) / (ML.t.length - 1) : 1e4;
  // memory of a window (us), as analysis/memory.py reads it: only readings inside the window are its own (a
  // sample after the end was taken in whatever ran next): peak, first and last inside; the entry is the last
  // reading at or before t0 within 2.5 periods, never above the first inside, else the first inside; no reading
  // inside: no figure. A downsampled lane's point is the highest of its bucket (up to the next point): only
  // buckets that end inside the window count.
  function memWindow(t0, t1, key) {
    const col = ML && ML[key]; if (!col) return null;
    const lo = lowerBound(ML.t, t0);
    let hi = lowerBound(ML.t, t1 + 1e-9);
    if ((ML.every || 1) > 1) hi = Math.max(lo, hi - 1);
    let peak = null, first = null, n = 0;
    for (let j = lo; j < hi; j++) if (col[j] != null) { n++; if (first == null) first = col[j]; if (peak == null || col[j] > peak) peak = col[j]; }
    let j0 = lo < ML.t.length && ML.t[lo] === t0 ? lo : lo - 1;
    while (j0 >= 0 && col[j0] == null && t0 - ML.t[j0] <= 2.5 * memPeriodUs) j0--;
    const before = j0 >= 0 && col[j0] != null && t0 - ML.t[j0] <= 2.5 * memPeriodUs ? col[j0] : null;
    const entry = first == null ? null : before != null ? Math.min(before, first) : first;
    return { entry, peak, n, growth: peak != null && entry != null ? Math.max(peak - entry, 0) : null };
  }
  function memText(i) {
    const a = S.attrs[i] || {};
    const key = ML && ML.cuda ? "cuda" : "rss", w = memWindow(S.start[i], S.start[i] + S.dur[i], key);
    const exactIn = a["memory." + key + "_in"], exactOut = a["memory." + key + "_out"], exactPeak = a["memory." + key + "_peak"];
    if (!w && exactIn == null) return "";
    const what = key === "cuda" ? "CUDA allocated" : "RSS";
    const entry = exactIn != null ? fmtB(exactIn) : w && w.entry != null ? fmtMiB(w.entry) + "~" : "-";
    let peakB = w && w.peak != null ? w.peak * 1048576 : null;
    for (const v of [exactIn, exactOut, exactPeak]) if (v != null && (peakB == null || v > peakB)) peakB = v;
    const peakExact = exactPeak != null && peakB === exactPeak && (key === "rss" || a["memory.cuda_peak_exact"]);
    const peak = peakB != null ? fmtB(peakB) + (peakExact ? "" : "~") : (w && !w.n ? "no memory sample inside (shorter than the sampling period)" : "-");
    const base = exactIn != null ? exactIn : w && w.entry != null ? w.entry * 1048576 : null;
    const growth = peakB != null && base != null ? ` (+${fmtB(Math.max(peakB - base, 0))})` : "";
    return `memory (${what}): ${entry} at entry, peak ${peak}${growth}` + (exactOut != null ? `, ${fmtB(exactOut)} at exit` : "");
  }
  // row labels: the name holding the most time in each (thread, depth) row, "+N" other names
  const rowNames = new Map();
  for (let i = 0; i < NS; i++) {
    const k = S.thread[i] * 1000 + S.depth[i];
    let m = rowNames.get(k); if (!m) rowNames.set(k, m = new Map());
    m.set(S.name[i], (m.get(S.name[i]) || 0) + S.dur[i]);
  }
  if (DEN) for (const q of DEN.rows) {
    const k = q.thread * 1000 + q.depth;
    let m = rowNames.get(k); if (!m) rowNames.set(k, m = new Map());
    m.set(q.name, (m.get(q.name) || 0) + q.busy.reduce((a, b) => a + b, 0));
  }
  const rowLabel = new Map();
  for (const [k, m] of rowNames) {
    let best = -1, bt = -1; for (const [n, t] of m) if (t > bt) { bt = t; best = n; }
    rowLabel.set(k, short(NAMES[best]) + (m.size > 1 ? ` +${m.size - 1}` : ""));
  }
  // open on the traced work (start-up before the first traced call is one double-click away)
  let f0 = Infinity, f1 = -Infinity;
  for (let i = 0; i < NS; i++) if (S.op[i] !== "transaction") { f0 = Math.min(f0, S.start[i]); f1 = Math.max(f1, S.start[i] + S.dur[i]); }
  if (WORK) { f0 = WORK.t0; f1 = WORK.t1; }
  const pad = (f1 - f0) * 0.02;
  const home = f1 > f0 ? { t0: Math.max(0, f0 - pad), t1: f1 + pad } : { t0: 0, t1: spanEnd || 1 };
  const view = { t0: home.t0, t1: home.t1 };
  let selected = -1, selWindow = null;
  const wf = $("waterfall");
  const rows = new Map();
  for (let i = 0; i < NS; i++) { const k = S.thread[i] * 1000 + S.depth[i]; if (!rows.has(k)) rows.set(k, []); rows.get(k).push(i); }

  // time labels with enough digits that neighbouring ticks differ
  function tickLabel(t, tick) {
    const unit = view.t1 >= 1e6 ? 1e6 : view.t1 >= 1e3 ? 1e3 : 1, name = unit === 1e6 ? " s" : unit === 1e3 ? " ms" : " us";
    const dec = Math.max(0, Math.min(6, Math.ceil(-Math.log10(tick / unit) + 1e-9)));
    return (t / unit).toFixed(dec) + name;
  }
  function viewCaption() {
    if (selected >= 0 || selWindow) return;
    const atHome = Math.abs(view.t0 - home.t0) < 1 && Math.abs(view.t1 - home.t1) < 1;
    const whole = view.t0 <= 0 && view.t1 >= spanEnd - 1;
    const range = `${fmt(Math.max(view.t0, 0))} – ${fmt(view.t1)}`;
    $("selection").textContent = whole ? `Whole run: 0 – ${fmt(spanEnd)}` :
      atHome && WORK ? `${WORK_NAME[0].toUpperCase() + WORK_NAME.slice(1)}: ${fmt(WORK.t0)} – ${fmt(WORK.t1)} (${CAPTURE ? "idle or serving" : "start-up"} ${fmt(PH.startup_us)} before it; double-click: whole run)` :
      atHome ? `Traced spans: ${range} (double-click: whole run)` : `Showing ${range} of the run (double-click: traced work)`;
  }
  function drawWaterfall() {
    const [g, W] = sizeCanvas(wf, wfHeight);
    g.clearRect(0, 0, W, wfHeight);
    const BW = W - LABEL_W, scale = BW / (view.t1 - view.t0), X = (t) => LABEL_W + (t - view.t0) * scale;
    // time axis
    g.fillStyle = "#667"; g.font = "10px ui-monospace, monospace";
    const span = view.t1 - view.t0, step = Math.pow(10, Math.floor(Math.log10(span / 6)));
    const tick = span / step > 30 ? step * 5 : span / step > 12 ? step * 2 : step;
    for (let t = Math.ceil(view.t0 / tick) * tick; t < view.t1; t += tick) {
      const x = X(t); g.fillRect(x, 12, 1, wfHeight); g.fillText(tickLabel(t, tick), x + 2, 10);
    }
    if (WORK && view.t0 < WORK.t0) {  // start-up shaded
      const x1 = Math.min(X(WORK.t0), W);
      g.fillStyle = "rgba(120,130,150,0.12)"; g.fillRect(LABEL_W, 12, Math.max(x1 - LABEL_W, 0), wfHeight);
      if (x1 - LABEL_W > 60) { g.fillStyle = "#667"; g.font = "11px system-ui"; g.fillText(CAPTURE ? "idle or serving" : "start-up", LABEL_W + 4, 24); }
    }
    if (selWindow) {
      g.fillStyle = "rgba(255,193,7,0.18)"; g.fillRect(X(selWindow.t0), 12, Math.max((selWindow.t1 - selWindow.t0) * scale, 2), wfHeight);
    }
    g.font = "11px system-ui";
    drawDensity(g, W, X, scale);
    let lastX = new Map();
    for (let i = 0; i < NS; i++) {
      const s = S.start[i], e = s + S.dur[i];
      if (e < view.t0 || s > view.t1) continue;
      let x0 = X(s), w = Math.max(S.dur[i] * scale, 1);
      if (x0 < LABEL_W) { w -= LABEL_W - x0; x0 = LABEL_W; if (w <= 0) continue; }
      const yy = laneTop[S.thread[i]] + ROW * (S.depth[i] + 1);
      const key = S.thread[i] * 1000 + S.depth[i];
      if (w < 2) { const lx = lastX.get(key); if (lx !== undefined && Math.floor(lx) === Math.floor(x0)) continue; lastX.set(key, x0); }
      const name = NAMES[S.name[i]];
      g.fillStyle = S.error[i] ? "#e57373" : color(name, false);
      g.fillRect(x0, yy, w, ROW - 2);
      if (w > 40) {
        g.save(); g.beginPath(); g.rect(x0, yy, w, ROW); g.clip();
        g.fillStyle = "#111"; const st = S.attrs[i] && S.attrs[i]["diffusion.step"] !== undefined ? ` #${S.attrs[i]["diffusion.step"]}` : "";
        g.fillText(short(name) + st + " " + fmt(S.dur[i]), x0 + 3, yy + 11); g.restore();
      }
    }
    drawDetail(g, X, scale);
    for (const l of devLanes) {
      if (l.syncs) {
        for (const q of DV.syncs) {
          const x = X(q.t);
          if (x < LABEL_W - 4 || x > W + 4) continue;
          g.fillStyle = "#c62828"; g.beginPath(); g.moveTo(x, l.top); g.lineTo(x - 4, l.top + ROW - 2); g.lineTo(x + 4, l.top + ROW - 2); g.fill();
        }
        continue;
      }
      g.fillStyle = "#5c6bc0";
      for (let k = 0; k < l.start.length; k++) {
        const x0 = X(l.start[k]), w = Math.max(l.dur[k] * scale, 0.5);
        if (x0 + w < LABEL_W || x0 > W) continue;
        g.fillRect(Math.max(x0, LABEL_W), l.top, w, ROW - 2);
      }
      g.fillStyle = "rgba(229,57,53,0.35)";
      for (const q of DV.gaps) if (q.lane === l.label) {
        const x0 = X(q.start), w = Math.max(q.dur * scale, 1);
        if (x0 + w >= LABEL_W && x0 <= W) g.fillRect(Math.max(x0, LABEL_W), l.top - 2, w, ROW + 2);
      }
    }
    if (memTop >= 0) {
      g.fillStyle = "#f6f8fa"; g.fillRect(LABEL_W, memTop, W - LABEL_W, MEM_H);
      g.fillStyle = "#d6dbe3"; g.fillRect(LABEL_W, memTop + MEM_H, W - LABEL_W, 1);
      const lo = Math.max(lowerBound(ML.t, view.t0) - 1, 0), hi = Math.min(lowerBound(ML.t, view.t1) + 1, ML.t.length);
      // the scale follows the samples in view (zoom in: the lane shows what moved there)
      let vMin = Infinity, vMax = -Infinity;
      for (const [key] of MEM_SERIES) { const vals = ML[key]; if (vals) for (let j = lo; j < hi; j++) { const v = vals[j]; if (v != null) { if (v < vMin) vMin = v; if (v > vMax) vMax = v; } } }
      if (vMax > -Infinity) { memMin = vMin; memMax = vMax > vMin ? vMax : vMin + 1; }
      const Y = (v) => memTop + MEM_H - 2 - ((v - memMin) / (memMax - memMin)) * (MEM_H - 6);
      for (const [key, col] of MEM_SERIES) {
        const vals = ML[key]; if (!vals) continue;
        g.strokeStyle = col; g.lineWidth = key === "rss" || key === "cuda" ? 1.5 : 1; g.beginPath();
        let pen = false, lastX = -1;
        for (let j = lo; j < hi; j++) {
          const v = vals[j]; if (v == null) { pen = false; continue; }
          const x = Math.max(LABEL_W, Math.min(W, X(ML.t[j])));
          if (pen && x - lastX < 0.5 && j < hi - 1) continue;  // one point per half pixel (the max is kept by the view)
          if (!pen) { g.moveTo(x, Y(v)); pen = true; } else g.lineTo(x, Y(v));
          lastX = x;
        }
        g.stroke();
      }
    }
    if (selected >= 0) {
      const x0 = X(S.start[selected]), w = Math.max(S.dur[selected] * scale, 2);
      const yy = laneTop[S.thread[selected]] + ROW * (S.depth[selected] + 1);
      g.strokeStyle = "#000"; g.lineWidth = 2; g.strokeRect(Math.max(x0, LABEL_W), yy, w, ROW - 2);
    }
    // the label gutter: every row named
    g.fillStyle = "#f3f5f8"; g.fillRect(0, 0, LABEL_W - 2, wfHeight);
    g.fillStyle = "#d6dbe3"; g.fillRect(LABEL_W - 2, 0, 1, wfHeight);
    const clipText = (text, x, yy, maxW) => { g.save(); g.beginPath(); g.rect(0, yy - 12, maxW, ROW); g.clip(); g.fillText(text, x, yy); g.restore(); };
    for (let t = 0; t < D.threads.length; t++) {
      if (threadDepth[t] < 0) continue;
      g.fillStyle = "#334"; g.font = "bold 11px system-ui"; clipText("thread " + D.threads[t].name, 4, laneTop[t] + 12, LABEL_W - 6);
      g.font = "11px system-ui"; g.fillStyle = "#445";
      for (let d = 0; d <= threadDepth[t]; d++) {
        const lab = rowLabel.get(t * 1000 + d);
        if (lab) clipText(lab, 10 + Math.min(d, 6) * 4, laneTop[t] + ROW * (d + 1) + 11, LABEL_W - 6);
      }
    }
    for (const l of devLanes) { g.fillStyle = "#334"; g.font = "bold 11px system-ui"; clipText(l.label, 4, l.top + 11, LABEL_W - 6); }
    if (memTop >= 0) {
      g.fillStyle = "#334"; g.font = "bold 11px system-ui"; clipText("memory", 4, memTop + 11, LABEL_W - 6);
      g.font = "11px system-ui"; let ly = memTop + 25;
      for (const [key, col, label] of MEM_SERIES) if (ML[key]) { g.fillStyle = col; g.fillRect(8, ly - 8, 10, 3); g.fillStyle = "#445"; clipText(label, 22, ly - 3, LABEL_W - 6); ly += 13; }
      g.fillStyle = "#667"; clipText(`${fmtMiB(memMin)} – ${fmtMiB(memMax)}`, 8, memTop + MEM_H + 1, LABEL_W - 6);
    }
    viewCaption();
    aggNote();
    fetchDetail();
  }
  // ---- a large run: density rows for the spans not shown one by one, and (served pages) the spans of the
  // zoomed window fetched from the server: level of detail, as Perfetto does for large traces
  let detail = null, detailTimer = null, detailSeq = 0;
  const LOD_URL = PAGE !== "report" && AGG ? "/api/runs/" + encodeURIComponent(R.id) + "/spans" : null;
  const threadOf = new Map(D.threads.map((t, i) => [t.id, i]));
  function detailCovers() { return detail && detail.complete && detail.t0 <= view.t0 && detail.t1 >= view.t1; }
  function drawDensity(g, W, X, scale) {
    if (!DEN) return;
    const covered = detailCovers();
    for (const q of DEN.rows) {
      const yy = laneTop[q.thread] + ROW * (q.depth + 1), base = color(NAMES[q.name], false);
      for (let k = 0; k < q.bin.length; k++) {
        const b0 = q.bin[k] * DEN.bin_us, b1 = b0 + DEN.bin_us;
        if (b1 < view.t0 || b0 > view.t1) continue;
        if (covered && b0 >= detail.t0 && b1 <= detail.t1) continue;
        const x0 = Math.max(X(b0), LABEL_W), w = Math.max(X(b1) - x0, 1);
        g.globalAlpha = Math.min(1, 0.25 + 0.75 * q.busy[k] / DEN.bin_us);
        g.fillStyle = base; g.fillRect(x0, yy + 3, w, ROW - 8);
      }
    }
    g.globalAlpha = 1;
  }
  function drawDetail(g, X, scale) {
    if (!detailCovers()) return;
    const Q = detail.spans;
    for (let i = 0; i < Q.id.length; i++) {
      const s = Q.start[i], e = s + Q.dur[i];
      if (e < view.t0 || s > view.t1) continue;
      let x0 = X(s), w = Math.max(Q.dur[i] * scale, 1);
      if (x0 < LABEL_W) { w -= LABEL_W - x0; x0 = LABEL_W; if (w <= 0) continue; }
      const yy = laneTop[Q.thread[i]] + ROW * (Q.depth[i] + 1);
      const name = NAMES[Q.name[i]];
      g.fillStyle = Q.error[i] ? "#e57373" : color(name, false);
      g.fillRect(x0, yy, w, ROW - 2);
      if (w > 40) { g.save(); g.beginPath(); g.rect(x0, yy, w, ROW); g.clip(); g.fillStyle = "#111"; g.fillText(short(name) + " " + fmt(Q.dur[i]), x0 + 3, yy + 11); g.restore(); }
    }
  }
  function aggNote() {
    const el = $("agg-note"); if (!el) return;
    if (!AGG) { el.hidden = true; return; }
    el.hidden = false;
    let txt = AGG.note[0].toUpperCase() + AGG.note.slice(1) + ".";
    if (detailCovers()) txt += ` This window (${fmt(detail.t0)} – ${fmt(detail.t1)}): all ${detail.count.toLocaleString("en")} spans, fetched from the server.`;
    else if (detail && !detail.complete && detail.t0 <= view.t0 && detail.t1 >= view.t1) txt += ` This window holds ${detail.count.toLocaleString("en")} spans: zoom in further to see each one.`;
    else if (LOD_URL) txt += " Zoom in: the spans of the window are fetched from the server.";
    else txt += " `stepscope serve` shows every span of a zoomed window; `stepscope export` writes them all.";
    el.textContent = txt;
  }
  function fetchDetail() {
    if (!AGG || !LOD_URL) return;
    const whole = view.t1 - view.t0 >= (spanEnd || 1) * 0.999;
    if (whole || detailCovers()) { aggNote(); return; }
    clearTimeout(detailTimer);
    detailTimer = setTimeout(() => {
      const seq = ++detailSeq, w = view.t1 - view.t0, t0 = Math.max(0, view.t0 - w * 0.25), t1 = view.t1 + w * 0.25;
      fetch(`${LOD_URL}?t0=${t0.toFixed(1)}&t1=${t1.toFixed(1)}`).then((r) => r.ok ? r.json() : null).then((q) => {
        if (!q || seq !== detailSeq) return;
        const map = q.names.map((nm) => { let k = NAMES.indexOf(nm); if (k < 0) { NAMES.push(nm); k = NAMES.length - 1; } return k; });
        q.spans.name = q.spans.name.map((c) => map[c]);
        q.spans.thread = q.spans.thread.map((tid) => threadOf.has(tid) ? threadOf.get(tid) : 0);
        detail = q; drawWaterfall();
      }).catch(() => {});
    }, 120);
  }
  function tAt(ev) { const r = wf.getBoundingClientRect(); return view.t0 + (ev.clientX - r.left - LABEL_W) / (r.width - LABEL_W) * (view.t1 - view.t0); }
  function spanAt(ev) {
    const r = wf.getBoundingClientRect(), x = ev.clientX - r.left, yy = ev.clientY - r.top;
    if (x < LABEL_W) return -1;
    const t = tAt(ev), tol = 2 / (r.width - LABEL_W) * (view.t1 - view.t0);
    for (let th = 0; th < D.threads.length; th++) {
      const d = Math.floor((yy - laneTop[th]) / ROW) - 1;
      if (d < 0 || d > threadDepth[th]) continue;
      const list = rows.get(th * 1000 + d) || [];
      for (let j = list.length - 1; j >= 0; j--) { const i = list[j]; if (S.start[i] - tol <= t && t <= S.start[i] + S.dur[i] + tol) return i; }
    }
    return -1;
  }
  function detailAt(ev) {
    if (!detailCovers()) return null;
    const r = wf.getBoundingClientRect(), yy = ev.clientY - r.top, t = tAt(ev), Q = detail.spans;
    const tol = 2 / (r.width - LABEL_W) * (view.t1 - view.t0);
    for (let i = Q.id.length - 1; i >= 0; i--) {
      const top = laneTop[Q.thread[i]] + ROW * (Q.depth[i] + 1);
      if (yy >= top && yy < top + ROW && Q.start[i] - tol <= t && t <= Q.start[i] + Q.dur[i] + tol)
        return `${NAMES[Q.name[i]]}\n${fmt(Q.dur[i])}  (starts at ${fmt(Q.start[i])})`;
    }
    return null;
  }
  function memoryAt(ev) {
    if (memTop < 0) return null;
    const r = wf.getBoundingClientRect(), x = ev.clientX - r.left, yy = ev.clientY - r.top;
    if (x < LABEL_W || yy < memTop || yy > memTop + MEM_H) return null;
    const t = tAt(ev); let j = lowerBound(ML.t, t);
    if (j >= ML.t.length || (j > 0 && t - ML.t[j - 1] < ML.t[j] - t)) j--;
    if (j < 0) return null;
    let txt = `memory at ${fmt(ML.t[j])}` + (ML.every > 1 ? ` (highest of ${ML.every} samples)` : "");
    for (const [key, , label] of MEM_SERIES) if (ML[key] && ML[key][j] != null) txt += `\n${label} ${fmtMiB(ML[key][j])}`;
    return txt;
  }
  function deviceAt(ev) {
    const mq = memoryAt(ev); if (mq) return mq;
    if (!devLanes.length) return null;
    const r = wf.getBoundingClientRect(), x = ev.clientX - r.left, yy = ev.clientY - r.top;
    const scale = (r.width - LABEL_W) / (view.t1 - view.t0), t = tAt(ev);
    const l = devLanes.find((l) => yy >= l.top - 2 && yy <= l.top + ROW);
    if (!l) return null;
    if (l.syncs) {
      const q = DV.syncs.find((q) => Math.abs(LABEL_W + (q.t - view.t0) * scale - x) <= 5);
      return q ? `${q.kind}  ${fmt(q.cost)}\n${q.python || "(no Python line)"}\n${q.span ? "in " + q.span : ""}` : null;
    }
    const gq = DV.gaps.find((q) => q.lane === l.label && q.start <= t && t <= q.start + q.dur);
    if (gq) return `idle gap ${fmt(gq.dur)} (${gq.category})\nhost op: ${gq.host_op || "-"}\nspan: ${gq.span || "-"}`;
    return `${l.label}`;
  }
  let drag = null;
  wf.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const r = wf.getBoundingClientRect(), f = Math.max(0, (ev.clientX - r.left - LABEL_W) / (r.width - LABEL_W)), at = view.t0 + f * (view.t1 - view.t0);
    const k = Math.exp(ev.deltaY * 0.002), w = Math.max((view.t1 - view.t0) * k, 1);
    view.t0 = at - f * w; view.t1 = view.t0 + w; drawWaterfall();
  }, { passive: false });
  wf.addEventListener("mousedown", (ev) => { drag = { x: ev.clientX, t0: view.t0, t1: view.t1, moved: false }; });
  window.addEventListener("mouseup", (ev) => {
    if (drag && !drag.moved && ev.target === wf) { const i = spanAt(ev); if (i >= 0) selectSpan(i); }
    drag = null;
  });
  wf.addEventListener("mousemove", (ev) => {
    if (drag) {
      const dx = ev.clientX - drag.x; if (Math.abs(dx) > 3) drag.moved = true;
      if (drag.moved) { const dt = dx / (wf.clientWidth - LABEL_W) * (drag.t1 - drag.t0); view.t0 = drag.t0 - dt; view.t1 = drag.t1 - dt; drawWaterfall(); }
      return;
    }
    const dq = deviceAt(ev);
    if (dq) { wf.style.cursor = "default"; showTip(ev, dq); return; }
    const i = spanAt(ev);
    if (i < 0) {
      const q = detailAt(ev);
      if (q) { wf.style.cursor = "default"; showTip(ev, q); return; }
      hideTip(); wf.style.cursor = "default"; return;
    }
    wf.style.cursor = "pointer";
    let txt = `${NAMES[S.name[i]]}\n${fmt(S.dur[i])}  (starts at ${fmt(S.start[i])})`;
    if (S.error[i]) txt += `\nerror: ${S.error[i]}`;
    if (S.attrs[i]) for (const [k, v] of Object.entries(S.attrs[i])) if (!k.startsWith("memory.") && k !== "stepscope.open" && k !== "stepscope.cut") txt += `\n${k} = ${v}`;
    if (S.attrs[i] && S.attrs[i]["stepscope.open"]) txt += "\nstill open when the process ended (killed inside it)";
    if (S.attrs[i] && S.attrs[i]["stepscope.cut"]) txt += "\nstill running when the capture window ended: cut at its end";
    const mt = memText(i); if (mt) txt += "\n" + mt;
    showTip(ev, txt);
  });
  wf.addEventListener("mouseleave", hideTip);
  wf.addEventListener("dblclick", () => {  // toggle: traced work <-> whole run
    const atHome = Math.abs(view.t0 - home.t0) < 1 && Math.abs(view.t1 - home.t1) < 1;
    if (atHome) { view.t0 = 0; view.t1 = spanEnd || 1; } else { view.t0 = home.t0; view.t1 = home.t1; }
    drawWaterfall();
  });

  // ---- the span tree beside the bars: indented by nesting, duration and share, searchable
  const TREE_MAX = 2000;
  const treeEl = $("spantree");
  const shareBase = R.wall_us || spanEnd || 1;
  function buildTree(q) {
    const needle = (q || "").toLowerCase();
    const out = [];
    let n = 0, shown = 0;
    for (let i = 0; i < NS; i++) {
      const name = NAMES[S.name[i]];
      if (needle && !name.toLowerCase().includes(needle)) continue;
      n++;
      if (shown >= TREE_MAX) continue;
      shown++;
      const st = S.attrs[i] && S.attrs[i]["diffusion.step"] !== undefined ? ` #${S.attrs[i]["diffusion.step"]}` : "";
      out.push(`<div class="row${i === selected ? " sel" : ""}" role="treeitem" data-i="${i}" title="${esc(name)}" style="padding-left:${6 + 12 * Math.min(S.depth[i], 30)}px">` +
        `<span class="nm"><span>${esc(short(name, 2))}${st}</span></span><span class="du">${fmt(S.dur[i])}</span><span class="sh">${(100 * S.dur[i] / shareBase).toFixed(1)}%</span></div>`);
    }
    if (n > shown) out.push(`<div class="more">${n - shown} more spans: search to narrow</div>`);
    if (!n) out.push(`<div class="more">${needle ? "no span matches" : "no spans"}</div>`);
    treeEl.innerHTML = out.join("");
  }
  treeEl.addEventListener("click", (ev) => {
    const row = ev.target.closest(".row"); if (!row) return;
    const i = +row.dataset.i;
    const d = S.dur[i], m = Math.max(d * 0.15, 1);
    view.t0 = S.start[i] - m; view.t1 = S.start[i] + d + m;
    selectSpan(i);
  });
  $("span-search").addEventListener("input", (ev) => buildTree(ev.target.value));

  // ---- flame graph from the prefix tree
  const kids = Array.from({ length: NN }, () => []);
  const tops = [];
  for (let i = 0; i < NN; i++) (P.parent[i] < 0 ? tops : kids[P.parent[i]]).push(i);
  const fg = $("flamegraph");
  let fgTotals = null, fgSelf = null, fgFocus = -1, fgRects = [], fgTotalAll = 0, fgSearch = "", fgWin = null;
  // The one place node weights come from, us per sample: wall time, or the CPU time the thread used (running
  // apart from idle: sleeping, waiting on I/O, a lock or the device), as py-spy's --idle toggles
  let fgMode = "wall";
  let fgIdle = false;  // include the samples of waiting threads (py-spy's --idle): off, as the top tables
  const sampleWeight = (j) => fgMode === "cpu" ? P.cw[j] : P.w[j];

  function lowerBound(arr, v) { let lo = 0, hi = arr.length; while (lo < hi) { const m = (lo + hi) >> 1; if (arr[m] < v) lo = m + 1; else hi = m; } return lo; }
  function computeTree(win) {
    const tot = new Float64Array(NN), self = new Float64Array(NN);
    let lo = 0, hi = NP, n = 0;
    if (win) { lo = lowerBound(P.t, win.t0); hi = lowerBound(P.t, win.t1); }
    for (let j = lo; j < hi; j++) {
      if (win && win.thread !== undefined && P.thread[j] !== win.thread) continue;
      if ((!win || win.busy) && !fgIdle && P.idle[j]) continue;  // the run-wide graphs leave out waiting threads
      if (win && win.phase !== undefined && P.phase && P.phase[j] !== win.phase) continue;
      self[P.node[j]] += sampleWeight(j); n++;
    }
    tot.set(self);
    for (let i = NN - 1; i >= 0; i--) if (P.parent[i] >= 0) tot[P.parent[i]] += tot[i];
    return [tot, self, n];
  }
  const DEFAULT_TITLE = WORK ? "traced work" : "whole run";
  const defaultWin = () => WORK ? { t0: WORK.t0, t1: WORK.t1, busy: true, phase: 1 }
    : IMPORTS_APART ? { t0: -Infinity, t1: Infinity, busy: true, phase: 1 } : null;
  function setFlame(win, title) {
    const [tot, self, n] = computeTree(win);
    fgTotals = tot; fgSelf = self; fgFocus = -1; fgWin = win;
    fgTotalAll = tops.reduce((a, i) => a + tot[i], 0);
    $("fg-title").textContent = title;
    const note = $("fg-note");
    if (n === 0) note.textContent = "No samples in this window" + (win ? ` (${fmt(win.t1 - win.t0)} at ${R.hz} Hz is under one sampling period; record with a higher --hz)` : ".");
    else note.textContent = `${n} samples, ${fmt(fgTotalAll)} ${fgMode === "cpu" ? "of CPU time (idle left out)" : "of wall time"} sampled.`;
    drawFlame();
    if (!$("sandwich").hidden && swFunc >= 0) sandwich(swFunc);
  }
  function matches(n) { return fgSearch && P.funcs[P.func[n]][0].toLowerCase().includes(fgSearch); }
  function drawFlame() {
    fgRects = [];
    let maxDepth = 0;
    const focusPath = [];
    for (let i = fgFocus; i >= 0; i = P.parent[i]) focusPath.unshift(i);
    const rootTotal = fgFocus >= 0 ? fgTotals[fgFocus] : fgTotalAll;
    function layout(node, x, w, depth) {
      if (w < 0.3 || fgTotals[node] <= 0) return;
      fgRects.push([x, w, depth, node]); maxDepth = Math.max(maxDepth, depth);
      let cx = x;
      const ch = kids[node].filter((c) => fgTotals[c] > 0).sort((a, b) => fgTotals[b] - fgTotals[a]);
      for (const c of ch) { const cw = w * fgTotals[c] / fgTotals[node]; layout(c, cx, cw, depth + 1); cx += cw; }
    }
    const W = canvasWidth(fg);
    if (rootTotal > 0) {
      if (fgFocus >= 0) {
        focusPath.forEach((n, d) => { fgRects.push([0, W, d, n, true]); });
        fgRects.pop();
        layout(fgFocus, 0, W, focusPath.length - 1);
      } else {
        let cx = 0;
        for (const t of tops.filter((c) => fgTotals[c] > 0).sort((a, b) => fgTotals[b] - fgTotals[a])) { const w = W * fgTotals[t] / rootTotal; layout(t, cx, w, 0); cx += w; }
      }
    }
    const H = Math.max((maxDepth + 2) * ROW, 60);
    const [g] = sizeCanvas(fg, H);
    g.clearRect(0, 0, W, H); g.font = "11px system-ui";
    let hitTime = 0, hits = 0;
    for (const [x, w, d, n, anc] of fgRects) {
      const f = P.funcs[P.func[n]];
      const hit = matches(n);
      if (hit) { hits++; let p = P.parent[n], outer = true; while (p >= 0) { if (matches(p)) { outer = false; break; } p = P.parent[p]; } if (outer) hitTime += fgTotals[n]; }
      g.fillStyle = anc ? "#ccd" : kindColor(f[3], f[0], fgSearch && !hit);
      g.fillRect(x, d * ROW, Math.max(w - 0.5, 0.5), ROW - 1);
      if (hit) { g.strokeStyle = "#c2185b"; g.lineWidth = 2; g.strokeRect(x + 1, d * ROW + 1, Math.max(w - 2.5, 0.5), ROW - 3); }
      if (w > 30) { g.save(); g.beginPath(); g.rect(x, d * ROW, w, ROW); g.clip(); g.fillStyle = fgSearch && !hit ? "#889" : "#111"; g.fillText(short(f[0], 3), x + 3, d * ROW + 11); g.restore(); }
    }
    if (fgSearch) $("fg-note").textContent = `${hits} frames match "${fgSearch}": ${fmt(hitTime)} (${(100 * hitTime / (rootTotal || 1)).toFixed(1)}% of this graph).`;
  }
  function frameAt(ev) {
    const r = fg.getBoundingClientRect(), x = ev.clientX - r.left, d = Math.floor((ev.clientY - r.top) / ROW);
    for (let k = fgRects.length - 1; k >= 0; k--) { const q = fgRects[k]; if (q[2] === d && x >= q[0] && x <= q[0] + q[1]) return q; }
    return null;
  }
  fg.addEventListener("mousemove", (ev) => {
    const q = frameAt(ev);
    if (!q) { hideTip(); return; }
    const n = q[3], f = P.funcs[P.func[n]];
    const base = fgTotalAll || 1;
    showTip(ev, `${f[0]}\n${f[1] ? f[1].split("/").slice(-2).join("/") + ":" + f[2] + "\n" : ""}${KINDS[f[3]] || ""}\ntotal ${fmt(fgTotals[n])} (${(100 * fgTotals[n] / base).toFixed(1)}%)  self ${fmt(fgSelf[n])}\nshift-click: callers and callees`);
  });
  fg.addEventListener("mouseleave", hideTip);
  fg.addEventListener("click", (ev) => {
    const q = frameAt(ev); if (!q) return;
    if (ev.shiftKey && !q[4]) { sandwich(P.func[q[3]]); return; }
    fgFocus = q[4] ? P.parent[q[3]] : q[3]; if (q[4] && fgFocus < 0) fgFocus = -1; drawFlame();
  });
  if (P.cw) {
    $("fg-mode").hidden = false;
    for (const r of document.querySelectorAll('input[name="fg-mode"]'))
      r.addEventListener("change", () => { fgMode = r.value; setFlame(fgWin, $("fg-title").textContent); });
    const idleBox = $("fg-idle");
    if (idleBox) idleBox.addEventListener("change", () => { fgIdle = idleBox.checked; setFlame(fgWin, $("fg-title").textContent); });
  }
  $("fg-search").addEventListener("input", (ev) => { fgSearch = ev.target.value.trim().toLowerCase(); if (!fgSearch) setFlame(fgWin, $("fg-title").textContent); else drawFlame(); });
  // legend: what the colours mean
  $("fg-legend").innerHTML = KINDS.filter((k) => k !== "thread").map((k) => `<span><i style="background:${kindColor(KINDS.indexOf(k), "", false)}"></i>${esc(k)}</span>`).join("");
  // start-up: one collapsed, labelled block with its total, one click away
  const startBtn = $("fg-startup");
  function startupLabel(open) {
    const named = (PH.startup_top || []).filter((f) => !/<module>|^importlib\.|_bootstrap|^runpy\.|^stepscope\./.test(f.name));
    const top = named.length ? " · in " + named.slice(0, 3).map((f) => short(f.name, 2)).join(", ") : "";
    if (CAPTURE) return open ? `\u25be ${BEFORE} ${fmt(PH.startup_us)} shown (the app idle or serving) · click: back to the ${WORK_NAME}`
      : `\u25b8 ${BEFORE} ${fmt(PH.startup_us)} (the app idle or serving, and imports after it; ${fmt(PH.startup_sampled_us)} sampled)${top} · not in this graph: click to open`;
    return open ? `\u25be start-up ${fmt(PH.startup_us)} shown (imports, model building) · click: back to the ${WORK_NAME}`
      : `\u25b8 start-up ${fmt(PH.startup_us)} (imports and model building before ${WORK_FROM}, and imports after it; ${fmt(PH.startup_sampled_us)} sampled)${top} · not in this graph: click to open`;
  }
  if (PH && PH.startup_us > 0) {
    startBtn.hidden = false; startBtn.textContent = startupLabel(false);
    startBtn.addEventListener("click", () => {
      const open = startBtn.dataset.open !== "1";
      startBtn.dataset.open = open ? "1" : "0"; startBtn.textContent = startupLabel(open);
      if (open) setFlame({ t0: -Infinity, t1: Infinity, busy: true, phase: 0 }, BEFORE); else setFlame(defaultWin(), DEFAULT_TITLE);
    });
  }

  // ---- sandwich: callers and callees of one function, merged over its calls in the current window
  let swFunc = -1;
  function sandwich(fid) {
    swFunc = fid;
    const occ = [];  // outermost nodes of fid (recursion counted once)
    for (let i = 0; i < NN; i++) if (P.func[i] === fid && fgTotals[i] > 0) {
      let p = P.parent[i], outer = true; while (p >= 0) { if (P.func[p] === fid) { outer = false; break; } p = P.parent[p]; }
      if (outer) occ.push(i);
    }
    const total = occ.reduce((a, i) => a + fgTotals[i], 0) || 1;
    const callers = { t: 0, k: new Map() }, callees = { t: 0, k: new Map() };
    for (const i of occ) {
      let node = callers; node.t += fgTotals[i];
      for (let p = P.parent[i]; p >= 0; p = P.parent[p]) { const f = P.func[p]; let c = node.k.get(f); if (!c) node.k.set(f, c = { t: 0, k: new Map() }); c.t += fgTotals[i]; node = c; }
      (function down(n, into) { into.t += 0; for (const c of kids[n]) { if (fgTotals[c] <= 0) continue; const f = P.func[c]; let e = into.k.get(f); if (!e) into.k.set(f, e = { t: 0, k: new Map() }); e.t += fgTotals[c]; down(c, e); } })(i, callees);
      callees.t += fgTotals[i];
    }
    function render(tree, el) {
      const out = [];
      (function walk(node, depth) {
        const ch = [...node.k.entries()].sort((a, b) => b[1].t - a[1].t);
        for (const [f, c] of ch) {
          if (c.t < total * 0.01 || out.length > 400) continue;
          out.push(`<div style="padding-left:${depth * 14}px"><span class="t">${fmt(c.t)}</span>${esc(short(P.funcs[f][0], 3))}</div>`);
          if (depth < 14) walk(c, depth + 1);
        }
      })(tree, 0);
      el.innerHTML = `<div class="tree-list"><div><span class="t">${fmt(total)}</span><b>${esc(short(P.funcs[fid][0], 3))}</b></div>${out.join("") || '<div class="note">none</div>'}</div>`;
    }
    render(callers, $("sw-callers")); render(callees, $("sw-callees"));
    $("sw-name").textContent = P.funcs[fid][0];
    $("sandwich").hidden = false;
  }
  $("sw-close").addEventListener("click", () => { $("sandwich").hidden = true; swFunc = -1; });

  function selectSpan(i) {
    selected = i; selWindow = null; drawWaterfall();
    const name = NAMES[S.name[i]];
    let txt = `${name}  ${fmt(S.dur[i])}  at ${fmt(S.start[i])}  thread ${D.threads[S.thread[i]].name}`;
    if (S.attrs[i]) txt += "  " + Object.entries(S.attrs[i]).filter(([k]) => !k.startsWith("memory.") && k !== "stepscope.open" && k !== "stepscope.cut").map(([k, v]) => `${k}=${v}`).join(" ");
    if (S.error[i]) txt += `  error: ${S.error[i]}`;
    const mt = memText(i); if (mt) txt += "  · " + mt;
    $("selection").textContent = txt;
    for (const el of treeEl.querySelectorAll(".row.sel")) el.classList.remove("sel");
    const row = treeEl.querySelector(`.row[data-i="${i}"]`); if (row) row.classList.add("sel");
    setHash("span=" + S.id[i]);
    setFlame({ t0: S.start[i], t1: S.start[i] + S.dur[i], thread: S.thread[i] }, `span ${short(name)}${S.attrs[i] && S.attrs[i]["diffusion.step"] !== undefined ? " (step " + S.attrs[i]["diffusion.step"] + ")" : ""}`);
  }
  // a step or repeat: the window in the waterfall, the selection line, its flame graph, scrolled to
  function selectWindow(win, title, caption) {
    selected = -1; selWindow = win;
    for (const el of treeEl.querySelectorAll(".row.sel")) el.classList.remove("sel");
    if (win.t0 < view.t0 || win.t1 > view.t1) { const m = (win.t1 - win.t0) * 0.5; view.t0 = win.t0 - m; view.t1 = win.t1 + m; }
    drawWaterfall();
    $("selection").textContent = caption;
    setFlame(win, title);
    const sec = $("flame-section");
    if (visible(sec)) sec.scrollIntoView({ block: "start" });
  }
  // shareable state: the selection lives in the URL's fragment (#span=ID, #step=K, #repeat=K)
  function setHash(h) { try { history.replaceState(null, "", h ? "#" + h : location.pathname + location.search); } catch (e) { /* file:// in some browsers */ } }
  $("fg-reset").textContent = DEFAULT_TITLE;
  $("fg-reset").addEventListener("click", () => {
    selected = -1; selWindow = null; setHash(""); drawWaterfall();
    if (startBtn.dataset.open === "1") { startBtn.dataset.open = "0"; startBtn.textContent = startupLabel(false); }
    setFlame(defaultWin(), DEFAULT_TITLE);
  });

  // ---- tables
  function table(el, head, rowsHtml, cls) { el.innerHTML = `<table${cls ? ` class="${cls}"` : ""}><thead><tr>${head.map((h) => `<th>${esc(h)}</th>`).join("")}</tr></thead><tbody>${rowsHtml.join("")}</tbody></table>`; }
  const threadIndex = new Map(D.threads.map((t, i) => [t.id, i]));
  const colLabel = (c) => { const p = c.split("."); return p.length >= 2 && ["forward", "__call__"].includes(p[p.length - 1]) && /^[A-Z]/.test(p[p.length - 2]) ? p[p.length - 2] : short(c); };
  if (ST && ST.rows.length) {
    const cols = ST.columns.slice(0, 6), isStep = ST.kind === "diffusion.step";
    const calls = new Set(ST.rows.map((r) => r.call)).size;
    const anyFill = ST.rows.some((r) => r.fill && r.fill.length);
    $("steps-title").textContent = isStep ? "Steps (diffusion.step) · click a step: its flame graph" : `Repeats of ${short(ST.span_name)} · click a row: its flame graph`;
    const cell = (r, key, text) => `<td${r.slow && r.slow_cells.includes(key) ? ' class="slowcell"' : ""}>${text}</td>`;
    const hasMem = ST.rows.some((r) => r.memory);
    const memCell = (r) => !hasMem ? "" : `<td title="${r.memory ? esc(`entry ${fmtB(r.memory.entry)}, exit ${fmtB(r.memory.exit)}, +${fmtB(r.memory.growth)} on top of the entry; ${r.memory.samples} samples` + (r.memory.note ? "; " + r.memory.note : "")) : ""}">${r.memory && r.memory.peak != null ? fmtB(r.memory.peak) + (r.memory.exact_peak ? "" : "~") : "-"}</td>`;
    const head = [...(calls > 1 ? ["call"] : []), isStep ? "step" : "repeat", "wall", "× median", "untraced", ...(hasMem ? ["mem peak"] : []), ...cols.map(colLabel), ...(anyFill ? ["untraced time sampled in"] : [])];
    table($("steps"), head,
      ST.rows.map((r, k) => `<tr class="clickable${r.slow ? " slow" : ""}" data-k="${k}">${calls > 1 ? `<td>${r.call}</td>` : ""}<td>${r.step}${r.slow ? '<span class="tag">slow</span>' : r.warmup ? '<span class="tag warm" title="the first step, slow too: set apart as a warm-up">warm-up</span>' : ""}</td>` +
        cell(r, "wall", fmtNs(r.wall_ns)) + `<td${r.slow ? ' class="slowcell"' : ""}>${r.ratio.toFixed(2)}</td>` + cell(r, "untraced", fmtNs(r.untraced_ns)) + memCell(r) +
        cols.map((c) => cell(r, c, fmtNs(r.by_name[c]))).join("") +
        (anyFill ? `<td class="fill">${(r.fill || []).map((f) => `${esc(short(f.function, 3))} ${fmtNs(f.self_ns)}${f.via ? " <small>via " + esc(short(f.via, 2)) + "</small>" : ""}`).join("<br>")}</td>` : "") + "</tr>"));
    const ths = $("steps").querySelectorAll("th");
    cols.forEach((c, k) => { ths[(calls > 1 ? 1 : 0) + 4 + (hasMem ? 1 : 0) + k].title = c; });
    if (hasMem) ths[(calls > 1 ? 1 : 0) + 4].title = "the highest memory inside the step (CUDA allocated when recorded, else RSS); ~: sampled";
    ths[(calls > 1 ? 1 : 0) + 3].title = "wall minus the outermost traced spans inside the step: callbacks, previews, glue that nothing traced names";
    $("steps").insertAdjacentHTML("beforeend", `<div class="note">${ST.noisy ? esc(ST.rule) : `${ST.slow_count != null ? ST.slow_count : ST.rows.filter((r) => r.slow).length} slow of ${ST.total_rows || ST.rows.length} by the rule above; slow cells in red (each cell is slow among its column).` +
      (ST.total_rows > ST.rows.length ? ` Shown: ${ST.rows.length} rows, the first ${Math.min(200, ST.rows.length)} and then the slowest slow ones.` : "")}</div>`);
    document.querySelectorAll("#steps tr.clickable").forEach((tr) => tr.addEventListener("click", () => {
      const r = ST.rows[+tr.dataset.k];
      setHash("step=" + tr.dataset.k);
      const label = isStep ? `step ${r.step}${calls > 1 || PAGE !== "explain" ? " of call " + r.call : ""}` : `repeat ${r.step}`;
      selectWindow({ t0: r.start_us, t1: r.end_us, thread: threadIndex.get(r.thread_id) }, label,
        `${label}: ${fmtNs(r.wall_ns)} (${r.ratio.toFixed(2)} x median), untraced ${fmtNs(r.untraced_ns)}, ${fmt(r.start_us)} – ${fmt(r.end_us)}`);
    }));
  } else $("steps-section").hidden = true;
  table($("spanstats"), ["name", "count", "total", "mean", "p50", "p95", "max", "share"],
    SM.spans.map((s) => `<tr><td title="${esc(s.name)}">${esc(short(s.name))}${s.errors ? ` <b style="color:#b00020">(${s.errors} errors)</b>` : ""}</td><td>${s.count}</td><td>${fmtNs(s.total_ns)}</td><td>${fmtNs(s.mean_ns)}</td><td>${fmtNs(s.p50_ns)}</td><td>${fmtNs(s.p95_ns)}</td><td>${fmtNs(s.max_ns)}</td><td>${(100 * s.share).toFixed(1)}%</td></tr>`));
  const fnRow = (f, ns, share) => `<tr><td title="${esc(f.file)}:${f.line}">${esc(short(f.name, 3))}</td><td>${fmtNs(ns)}</td><td>${(100 * share).toFixed(1)}%</td></tr>`;
  table($("topself"), ["function (self time)", "self", "share"], SM.top_self.slice(0, 15).map((f) => fnRow(f, f.self_ns, f.self_share)));
  table($("toptotal"), ["function (total time)", "total", "share"], SM.top_total.slice(0, 15).map((f) => fnRow(f, f.total_ns, f.total_share)));
  $("top-scope").textContent = PH ? `${WORK_NAME} only (${BEFORE} ${fmt(PH.startup_us)} apart)` : IMPORTS_APART ? "imports apart" : "";

  // ---- memory: the out-of-memory record first, then memory by stage and by span
  const MS = SM.memory;
  if (MS && MS.oom) {
    const o = MS.oom, box = $("oom"), m = o.memory || {};
    const where = o.span ? ` in <b>${esc(short(o.span, 3))}</b>` + (o.open ? " (still open when the process died)" : "") : "";
    const step = o.step != null ? `, step ${esc(o.step)}` : o.after_step != null ? `, after step ${esc(o.after_step)}` : "";
    const head = o.how === "killed" ? `<b>Killed by SIGKILL</b>${/OOM killer/.test(o.error || "") ? " (the kernel's OOM killer)" : " (out of memory?)"}`
      : `<b>Out of memory</b>: ${esc(o.error || "")}`;
    const mem = [["rss", "RSS"], ["rss_peak", "peak RSS"], ["cuda_allocated", "CUDA allocated"], ["cuda_reserved", "CUDA reserved"], ["cuda_peak", "CUDA peak"]]
      .filter(([k]) => m[k] != null).map(([k, l]) => `${l} ${fmtB(m[k])}`).join(", ");
    box.innerHTML = `${head}${where}${step}.` + (o.message ? ` <span class="msg">${esc(o.message)}</span>` : "") +
      (mem ? `<br>Memory at the time: ${esc(mem)}${m.sampled_at_us != null ? " (the last memory sample, at " + esc(fmt(m.sampled_at_us)) + ")" : ""}.` : "") +
      (o.snapshot ? "" : o.how === "error" ? " <small>(on CUDA, <code>--memory-history</code> keeps the allocator's snapshot: the largest live blocks and the Python stacks that allocated them)</small>" : "");
    box.hidden = false;
    if (o.span_id != null) {
      const i = S.id.indexOf(o.span_id);
      if (i >= 0) {
        box.insertAdjacentHTML("beforeend", ` <a href="#span=${o.span_id}" id="oom-span">show the span</a>`);
        $("oom-span").addEventListener("click", (ev) => { ev.preventDefault(); selectSpan(i); const w = $("waterfall-section"); if (visible(w)) w.scrollIntoView({ block: "start" }); });
      }
    }
    const sn = o.snapshot;
    if (sn && sn.largest && sn.largest.length) {
      $("oom-blocks").innerHTML = `<h3>Largest live blocks at the out-of-memory error <small>(${sn.active_blocks} live blocks, ${esc(fmtB(sn.active_bytes))}; reserved ${esc(fmtB(sn.reserved_bytes))})</small></h3>`;
      const el = document.createElement("div"); $("oom-blocks").appendChild(el);
      table(el, ["size", "allocated at (Python stack, innermost first)", "stream"],
        sn.largest.map((b) => `<tr><td>${esc(fmtB(b.size))}</td><td class="txt">${(b.frames || []).slice(0, 6).map((f) => esc(f)).join("<br>") || "(no Python stack)"}</td><td>${esc(b.stream ?? "")}</td></tr>`));
    }
  }
  if (MS && (MS.stages.length || MS.spans.length || MS.oom)) {
    $("memory-section").hidden = false;
    const parts = [];
    if (MS.peak_rss != null) parts.push(`peak RSS ${fmtB(MS.peak_rss)}`);
    if (MS.peak_cuda != null) parts.push(`CUDA peak allocated ${fmtB(MS.peak_cuda)}`);
    if (MS.peak_reserved != null) parts.push(`CUDA reserved ${fmtB(MS.peak_reserved)}`);
    const L = MS.largest, lw = L ? (L.cuda && L.cuda.peak != null ? L.cuda : L.rss) : null;
    $("memory-note").textContent = parts.join(", ") + ` · ${MS.samples} samples, every ${fmtNs(MS.period_ns)}` +
      (L ? ` · the largest stage of memory is ${L.label}: peak ${fmtB(lw.peak)}${lw.exact_peak ? "" : "~"}, +${fmtB(lw.growth)} on top of ${fmtB(lw.entry)} at its start.` : "");
    const useCuda = MS.stages.some((g) => g.cuda && g.cuda.peak != null);
    const fig = (w, k) => w && w[k] != null ? (k === "growth" ? "+" : "") + fmtB(w[k]) + ((k === "entry" ? w.exact_entry : k === "exit" ? w.exact_exit : w.exact_peak) ? "" : "~") : "-";
    if (MS.stages.length) {
      table($("memory-stages"), ["stage (" + (useCuda ? "CUDA allocated" : "RSS") + ")", "entry", "peak", "growth", "exit", "note"],
        MS.stages.map((g, k) => { const w = useCuda && g.cuda ? g.cuda : g.rss;
          return `<tr class="clickable${L && g.start_ns === L.start_ns && g.label === L.label ? " largest" : ""}" data-k="${k}"><td>${esc(g.label)}</td><td>${fig(w, "entry")}</td><td>${fig(w, "peak")}</td><td>${fig(w, "growth")}</td><td>${fig(w, "exit")}</td><td class="txt">${esc(w.note || "")}</td></tr>`; }));
      document.querySelectorAll("#memory-stages tr.clickable").forEach((tr) => tr.addEventListener("click", () => {
        const g = MS.stages[+tr.dataset.k];
        selectWindow({ t0: g.start_us, t1: g.end_us }, g.label, `${g.label}: ${fmt(g.end_us - g.start_us)}, ${fmt(g.start_us)} – ${fmt(g.end_us)}`);
      }));
    }
    if (MS.spans.length) table($("memory-spans"), ["span (the call that grew most)", "calls", "growth", "peak", "too short"],
      MS.spans.map((r) => `<tr><td title="${esc(r.name)}">${esc(short(r.name))}</td><td>${r.calls}</td><td>${r.growth != null ? "+" + fmtB(r.growth) + (r.exact ? "" : "~") : "-"}</td><td>${fmtB(r.peak)}${r.peak != null && !r.exact ? "~" : ""}</td><td>${r.unsampled || ""}</td></tr>`));
  }

  // ---- explain: slow repeats, causes, differential flame graph
  let diffRects = [];
  const dg = $("diffgraph");
  function drawDiff() {
    if (!E || !E.tree || !visible(dg)) return;
    diffRects = [];
    let maxDepth = 0;
    const W = canvasWidth(dg), root = E.tree, scale = root.slow > 0 ? W / root.slow : 0;
    (function lay(n, x, d) {
      const w = n.slow * scale;
      if (w < 0.3) return;
      diffRects.push([x, w, d, n]); maxDepth = Math.max(maxDepth, d);
      let cx = x;
      for (const c of n.children) { lay(c, cx, d + 1); cx += c.slow * scale; }
    })(root, 0, 0);
    const H = Math.max((maxDepth + 2) * ROW, 60);
    const [g] = sizeCanvas(dg, H);
    g.clearRect(0, 0, W, H); g.font = "11px system-ui";
    const gap = Math.max(Math.abs(E.gap_ns / 1e3), 1);
    for (const [x, w, d, n] of diffRects) {
      const k = Math.max(-1, Math.min(1, (n.slow - n.fast) / gap));
      g.fillStyle = k >= 0 ? `hsl(0,${Math.round(20 + 70 * k)}%,${Math.round(85 - 30 * k)}%)` : `hsl(215,${Math.round(20 - 70 * k)}%,${Math.round(85 + 30 * k)}%)`;
      g.fillRect(x, d * ROW, Math.max(w - 0.5, 0.5), ROW - 1);
      if (w > 30) { g.save(); g.beginPath(); g.rect(x, d * ROW, w, ROW); g.clip(); g.fillStyle = "#111"; g.fillText(short(n.name, 3), x + 3, d * ROW + 11); g.restore(); }
    }
  }
  dg.addEventListener("mousemove", (ev) => {
    const r = dg.getBoundingClientRect(), x = ev.clientX - r.left, d = Math.floor((ev.clientY - r.top) / ROW);
    const q = diffRects.find((q) => q[2] === d && x >= q[0] && x <= q[0] + q[1]);
    if (!q) { hideTip(); return; }
    const n = q[3], delta = n.slow - n.fast;
    showTip(ev, `${n.name}\nslow ${fmt(n.slow)}  fast ${fmt(n.fast)}  per repeat\n${delta >= 0 ? "+" : "-"}${fmt(Math.abs(delta))}`);
  });
  dg.addEventListener("mouseleave", hideTip);
  if (E && E.repeats.some((r) => r.group === "slow")) {
    $("explain-section").hidden = false;
    $("diff-wrap").hidden = !E.tree;  // no tree: too few samples (the advice says so)
    $("explain-unit").textContent = E.unit === "step" ? "denoising steps" : short(E.unit);
    const slowN = E.slow_total != null ? E.slow_total : E.repeats.filter((r) => r.group === "slow").length;
    $("explain-summary").textContent =
      `${slowN} of ${E.repeats_total || E.repeats.length} slow (${E.shape}); slow mean ${fmtNs(E.slow_mean_ns)} vs fast mean ${fmtNs(E.fast_mean_ns)}: gap ${fmtNs(E.gap_ns)} per repeat.` +
      (E.entry ? ` The extra time enters at ${E.entry.function}.` : "") + (E.advice ? " " + E.advice : "") +
      (E.memory_note ? " Memory: " + E.memory_note + "." : "");
    const reps = E.repeats.filter((r) => r.group !== "other");
    table($("explain-repeats"), ["repeat", "duration", "× median", "group"],
      reps.map((r, k) => `<tr class="clickable${r.group === "slow" ? " slow" : ""}" data-k="${k}"><td>${esc(r.label)}</td><td${r.group === "slow" ? ' class="slowcell"' : ""}>${fmtNs(r.duration_ns)}</td><td>${(r.duration_ns / E.median_ns).toFixed(2)}</td><td>${r.group}</td></tr>`));
    document.querySelectorAll("#explain-repeats tr.clickable").forEach((tr) => tr.addEventListener("click", () => {
      const r = reps[+tr.dataset.k]; setHash("repeat=" + tr.dataset.k);
      selectWindow({ t0: r.start_us, t1: r.end_us, thread: r.thread }, `${r.label} (${r.group})`, `${r.label} (${r.group}): ${fmtNs(r.duration_ns)}`);
    }));
    if (E.causes.length) table($("explain-causes"), ["what makes the difference", "slow", "fast", "extra", "of gap"],
      E.causes.map((c) => `<tr><td title="${esc(c.file)}:${c.line}">${esc(short(c.function, 3))}</td><td>${fmtNs(c.slow_ns)}</td><td>${fmtNs(c.fast_ns)}</td><td>+${fmtNs(c.delta_ns)}</td><td>${(100 * c.share_of_gap).toFixed(0)}%</td></tr>`));
  } else $("explain-none").hidden = false;

  // ---- device: idle gaps (a GPU's) and host syncs grouped by Python line (the lanes are in the waterfall)
  if (DV) {
    $("device-section").hidden = false;
    const hasDevice = DV.lanes.some((l) => l.label.startsWith("GPU"));
    $("device-title").textContent = DV.device ? String(DV.device.name || DV.device) : "";
    if (!hasDevice) {
      $("device-gaps-wrap").hidden = true;
      const cpu = $("device-cpu"); cpu.hidden = false;
      cpu.textContent = "No device timeline on CPU: this run recorded the host's torch ops only (no GPU stream ran), so there are no device idle gaps. The host syncs below are where the program would wait for a GPU.";
    } else {
      table($("device-gaps"), ["stream", "at", "idle", "category", "host op", "span"],
        DV.gaps.map((g) => `<tr><td>${esc(g.lane)}</td><td>${fmt(g.start)}</td><td>${fmt(g.dur)}</td><td>${esc(g.category)}</td><td>${esc(g.host_op || "")}</td><td>${esc(short(g.span || ""))}</td></tr>`));
    }
    const groups = new Map();
    for (const q of DV.syncs) {
      const key = q.python || "(no Python line)";
      let g = groups.get(key); if (!g) groups.set(key, g = { key, n: 0, total: 0, max: 0, kinds: new Set(), spans: new Set(), ev: [] });
      g.n++; g.total += q.cost; g.max = Math.max(g.max, q.cost); g.kinds.add(q.kind); if (q.span) g.spans.add(short(q.span)); g.ev.push(q);
    }
    const gl = [...groups.values()].sort((a, b) => b.total - a.total);
    const rowsHtml = [];
    gl.forEach((g, k) => {
      rowsHtml.push(`<tr class="group clickable" data-g="${k}"><td>${esc(g.key)}</td><td>${esc([...g.kinds].join(", "))}</td><td>${g.n}</td><td>${fmt(g.total)}</td><td>${fmt(g.max)}</td><td class="txt">${esc([...g.spans].slice(0, 3).join(", "))}</td></tr>`);
      g.ev.slice().sort((a, b) => b.cost - a.cost).slice(0, 50).forEach((q) => rowsHtml.push(`<tr class="sub" data-of="${k}" hidden><td>at ${fmt(q.t)}</td><td>${esc(q.kind)}</td><td></td><td>${fmt(q.cost)}</td><td></td><td class="txt">${esc(short(q.span || ""))}</td></tr>`));
    });
    table($("device-syncs"), ["Python line", "sync", "count", "total", "max", "in span"], rowsHtml);
    if (!gl.length) $("device-syncs").innerHTML = '<div class="note">No host syncs recorded.</div>';
    $("device-syncs").addEventListener("click", (ev) => {
      const tr = ev.target.closest("tr.group"); if (!tr) return;
      const open = !tr.classList.contains("open"); tr.classList.toggle("open", open);
      for (const s of $("device-syncs").querySelectorAll(`tr.sub[data-of="${tr.dataset.g}"]`)) s.hidden = !open;
    });
  } else $("device-none").hidden = false;

  treeEl.style.maxHeight = Math.max(wfHeight - 30, 200) + "px";
  buildTree("");
  function measure() { for (const cv of [wf, fg, dg]) canvasWidth(cv); }  // all reads before any write: one layout
  measure();
  drawWaterfall();
  setFlame(defaultWin(), DEFAULT_TITLE);
  drawDiff();
  (function restore() {  // open where a shared URL points
    const m = /^#(span|step|repeat)=(-?\d+)$/.exec(location.hash);
    if (!m) return;
    const k = +m[2];
    if (m[1] === "span") { const i = S.id.indexOf(k); if (i >= 0) selectSpan(i); }
    else { const tr = document.querySelector(`#${m[1] === "step" ? "steps" : "explain-repeats"} tr.clickable[data-k="${k}"]`); if (tr) tr.click(); }
  })();
  window.addEventListener("resize", () => { widths.clear(); measure(); drawWaterfall(); drawFlame(); drawDiff(); });
  // for tests and scripting: where span i is drawn (CSS px, relative to the viewport)
  function spanRect(i) {
    const r = wf.getBoundingClientRect(), scale = (r.width - LABEL_W) / (view.t1 - view.t0);
    const x0 = LABEL_W + (S.start[i] - view.t0) * scale;
    return { x: r.left + Math.max(x0, LABEL_W), y: r.top + laneTop[S.thread[i]] + ROW * (S.depth[i] + 1), w: Math.max(S.dur[i] * scale, 1), h: ROW - 2 };
  }
  function findSpan(suffix, k) { let n = 0; for (let i = 0; i < NS; i++) if (NAMES[S.name[i]].endsWith(suffix) && n++ === (k || 0)) return i; return -1; }
  function flameFrames() { return fgRects.filter((q) => !q[4]).map((q) => P.funcs[P.func[q[3]]][0]); }
  function searchFrames(q) { const el = $("fg-search"); el.value = q; el.dispatchEvent(new Event("input")); return $("fg-note").textContent; }
  function sandwichOf(name) { const fid = P.funcs.findIndex((f) => f[0] === name || f[0].endsWith("." + name)); if (fid >= 0) sandwich(fid); return fid; }
  window.stepscopeReport = { selectSpan, setFlame, spanRect, findSpan, spanCount: NS, frameCount: () => fgRects.length,
                             flameTitle: () => $("fg-title").textContent, diffCount: () => diffRects.length, flameFrames, searchFrames,
                             sandwich: sandwichOf, view: () => ({ t0: view.t0, t1: view.t1 }),
                             frameTotal: (name) => fgRects.reduce((m, q) => !q[4] && P.funcs[P.func[q[3]]][0].endsWith(name) ? Math.max(m, fgTotals[q[3]]) : m, 0),
                             tickLabels: () => { const span = view.t1 - view.t0, step = Math.pow(10, Math.floor(Math.log10(span / 6))); const tick = span / step > 30 ? step * 5 : span / step > 12 ? step * 2 : step; const out = []; for (let t = Math.ceil(view.t0 / tick) * tick; t < view.t1; t += tick) out.push(tickLabel(t, tick)); return out; },
                             setView: (t0, t1) => { view.t0 = t0; view.t1 = t1; drawWaterfall(); },
                             deviceLanes: () => devLanes.map((l) => l.label),
                             memoryLane: () => (memTop >= 0 ? { top: memTop, height: MEM_H, min: memMin, max: memMax, series: MEM_SERIES.filter(([k]) => ML[k]).map(([, , l]) => l) } : null),
                             memoryAt: (t) => { const r = wf.getBoundingClientRect(); return memoryAt({ clientX: r.left + LABEL_W + (t - view.t0) * (r.width - LABEL_W) / (view.t1 - view.t0), clientY: r.top + memTop + MEM_H / 2 }); },
                             spanMemory: (i) => memText(i),
                             syncRect: (k) => { const l = devLanes.find((l) => l.syncs), r = wf.getBoundingClientRect();
                               return { x: r.left + LABEL_W + (DV.syncs[k].t - view.t0) * (r.width - LABEL_W) / (view.t1 - view.t0), y: r.top + l.top + ROW / 2 }; },
                             tooltip: () => (tip.hidden ? "" : tip.textContent),
                             aggregated: () => AGG ? AGG.note : "", detail: () => detail ? { t0: detail.t0, t1: detail.t1, count: detail.count, complete: detail.complete, shown: detailCovers() } : null,
                             readyMs: performance.now() };  // page start -> first waterfall and flame graph drawn
})();
