// stepscope report, the waterfall: its layout (a label gutter, per thread one row per depth, the device lanes, the
// memory lane), drawing, hit tests and tooltips, zoom, pan and double-click. Large runs' density and detail: lod.js.
// Part of report.js: stepscope.output.html.html joins the SCRIPT_PARTS in order inside one function (one shared scope).
  // ---- waterfall layout: a label gutter, per thread a header row, then one row per depth
  const threadDepth = new Array(D.threads.length).fill(-1);
  for (let i = 0; i < NS; i++) threadDepth[S.thread[i]] = Math.max(threadDepth[S.thread[i]], S.depth[i]);
  if (DEN) for (const q of DEN.rows) threadDepth[q.thread] = Math.max(threadDepth[q.thread], q.depth);
  const laneTop = []; let y = 18;
  for (let t = 0; t < D.threads.length; t++) { laneTop.push(y); if (threadDepth[t] >= 0) y += ROW * (threadDepth[t] + 2); }
  // device lanes (torch ops, streams, syncs) under the span lanes, on the same time axis
  const devLanes = DV ? DV.lanes.map((l) => Object.assign({}, l)) : [];
  if (DV && DV.syncs.length) devLanes.push({ label: "host syncs", syncs: true, start: [], dur: [] });
  for (const l of devLanes) { l.top = y + 14; y += ROW + 18; }
  // the node lane: a node-graph app's node executions (spans of op "node": --app comfyui), one bar each, by node type
  const NODE_SPANS = []; for (let i = 0; i < NS; i++) if (S.op && S.op[i] === "node") NODE_SPANS.push(i);
  let nodeTop = -1;
  if (NODE_SPANS.length) { nodeTop = y + 14; y += ROW + 18; }
  function nodeAt(ev) {
    const r = wf.getBoundingClientRect(), yy = ev.clientY - r.top;
    if (nodeTop < 0 || ev.clientX - r.left < LABEL_W || yy < nodeTop - 2 || yy > nodeTop + ROW) return -1;
    const t = tAt(ev), tol = 2 / (r.width - LABEL_W) * (view.t1 - view.t0);
    for (let j = NODE_SPANS.length - 1; j >= 0; j--) { const i = NODE_SPANS[j]; if (S.start[i] - tol <= t && t <= S.start[i] + S.dur[i] + tol) return i; }
    return -1;
  }
  // the memory lane (RSS; CUDA allocated and reserved when recorded) under everything, same time axis
  const MEM_H = 64;
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
  // a span's error: its type, and the message the program's SDK sent with it (an OTLP span's exception.message)
  function errorText(i) {
    const m = S.attrs[i] && S.attrs[i]["exception.message"];
    return m ? `${S.error[i]}: ${m}` : S.error[i];
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
    if (nodeTop >= 0) {
      for (const i of NODE_SPANS) {
        const x0 = X(S.start[i]), w = Math.max(S.dur[i] * scale, 0.5);
        if (x0 + w < LABEL_W || x0 > W) continue;
        const a = S.attrs[i] || {}, nm = NAMES[S.name[i]];
        g.fillStyle = a["node.cached"] ? "#cfd8dc" : color(a["node.type"] || nm);
        g.fillRect(Math.max(x0, LABEL_W), nodeTop, w, ROW - 2);
        if (i === selected) { g.strokeStyle = "#111"; g.lineWidth = 2; g.strokeRect(Math.max(x0, LABEL_W), nodeTop, w, ROW - 2); }
        if (w > 40) {
          g.save(); g.beginPath(); g.rect(Math.max(x0, LABEL_W), nodeTop, w, ROW); g.clip();
          g.fillStyle = "#111"; g.fillText(nm + " " + fmt(S.dur[i]), Math.max(x0, LABEL_W) + 3, nodeTop + 11); g.restore();
        }
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
    if (nodeTop >= 0) { g.fillStyle = "#334"; g.font = "bold 11px system-ui"; clipText("nodes", 4, nodeTop + 11, LABEL_W - 6); }
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
    if (gq) return `idle gap ${fmt(gq.dur)} (${gq.category})\nhost op: ${gq.host_op || "-"}\nspan: ${gq.span || "-"}${gq.next ? `\nnext: ${gq.next}${gq.launched_in ? ` (launched in ${gq.launched_in})` : ""}` : ""}`;
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
    if (drag && !drag.moved && ev.target === wf) { const i = spanAt(ev); const n = i >= 0 ? i : nodeAt(ev); if (n >= 0) selectSpan(n); }
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
    const i0 = spanAt(ev), i = i0 >= 0 ? i0 : nodeAt(ev);
    if (i < 0) {
      const q = detailAt(ev);
      if (q) { wf.style.cursor = "default"; showTip(ev, q); return; }
      hideTip(); wf.style.cursor = "default"; return;
    }
    wf.style.cursor = "pointer";
    let txt = `${NAMES[S.name[i]]}\n${fmt(S.dur[i])}  (starts at ${fmt(S.start[i])})`;
    if (S.error[i]) txt += `\nerror: ${errorText(i)}`;
    if (S.attrs[i]) for (const [k, v] of Object.entries(S.attrs[i])) if (!k.startsWith("memory.") && k !== "stepscope.open" && k !== "stepscope.cut" && k !== "exception.message") txt += `\n${k} = ${v}`;
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
