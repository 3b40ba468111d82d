// stepscope report: waterfall of spans + flame graph of any window, from the embedded view model.
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("stepscope-data").textContent);
  const S = D.spans, P = D.profile, NAMES = D.names;
  const NS = S.id.length, NP = P.t.length, NN = P.parent.length;
  const ROW = 16, DPR = window.devicePixelRatio || 1;
  const tip = document.getElementById("tooltip");

  const fmt = (us) => us >= 1e6 ? (us / 1e6).toFixed(2) + " s" : us >= 1e3 ? (us / 1e3).toFixed(1) + " ms" : us.toFixed(0) + " us";
  const fmtNs = (ns) => ns == null ? "-" : fmt(ns / 1e3);
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
  function showTip(ev, text) { tip.textContent = text; tip.hidden = false; tip.style.left = Math.min(ev.clientX + 12, window.innerWidth - 420) + "px"; tip.style.top = (ev.clientY + 14) + "px"; }
  function hideTip() { tip.hidden = true; }
  // Canvas widths are read once per layout (after the tables are built, before the first draw, and on
  // resize): reading clientWidth after a canvas's height changed forces the whole page (10k-row
  // tables) to be laid out again, 3 times per load.
  const widths = new Map();
  function canvasWidth(cv) { let w = widths.get(cv); if (!w) { w = cv.clientWidth; if (w) widths.set(cv, w); } return w; }
  function sizeCanvas(cv, cssH) { const w = canvasWidth(cv); if (cv.style.height !== cssH + "px") cv.style.height = cssH + "px"; cv.width = Math.round(w * DPR); cv.height = Math.round(cssH * DPR); const g = cv.getContext("2d"); g.setTransform(DPR, 0, 0, DPR, 0, 0); return [g, w]; }

  // ---- run header
  const R = D.run;
  document.getElementById("runinfo").textContent =
    `${R.command.join(" ")}  ·  wall ${fmt(R.wall_us)}  ·  ${R.status}${R.exit_code ? " (exit " + R.exit_code + ")" : ""}` +
    (R.status === "incomplete" || R.status === "lost" ? ` (${R.error})` : "") + `  ·  ` +
    `${NS} spans  ·  ${P.total_samples} samples at ${R.hz} Hz${P.downsampled > 1 ? " (shown 1 in " + P.downsampled + ")" : ""}` +
    (R.start_wall_ms ? `  ·  ${new Date(R.start_wall_ms).toISOString().replace("T", " ").slice(0, 19)}` : "") +
    (R.env && R.env.torch ? `  ·  torch ${R.env.torch}` : "") +
    (R.env && R.env.source === "sentry" ? `  ·  from ${R.env.sdk || "a Sentry SDK"}` : "");

  // ---- waterfall layout: per thread a header row, then one row per depth
  const threadDepth = new Array(D.threads.length).fill(-1);
  for (let i = 0; i < NS; i++) threadDepth[S.thread[i]] = Math.max(threadDepth[S.thread[i]], S.depth[i]);
  const laneTop = []; let y = 18;
  for (let t = 0; t < D.threads.length; t++) { laneTop.push(y); if (threadDepth[t] >= 0) y += ROW * (threadDepth[t] + 2); }
  // device lanes (torch ops, streams, syncs) under the span lanes, on the same time axis
  const DV = D.device;
  const devLanes = DV ? DV.lanes.map((l) => Object.assign({}, l)) : [];
  if (DV && DV.syncs.length) devLanes.push({ label: "host syncs", syncs: true, start: [], dur: [] });
  for (const l of devLanes) { l.top = y + 14; y += ROW + 18; }
  const wfHeight = Math.max(y + 4, 60);
  let spanEnd = R.wall_us;
  for (let i = 0; i < NS; i++) spanEnd = Math.max(spanEnd, S.start[i] + S.dur[i]);
  if (NP) spanEnd = Math.max(spanEnd, P.t[NP - 1]);
  // open on the traced work (imports and set-up before the first traced call are one double-click away)
  let f0 = Infinity, f1 = -Infinity;
  for (let i = 0; i < NS; i++) if (S.op[i] !== "transaction") { f0 = Math.min(f0, S.start[i]); f1 = Math.max(f1, S.start[i] + S.dur[i]); }
  const pad = (f1 - f0) * 0.02;
  const home = f1 > f0 ? { t0: Math.max(0, f0 - pad), t1: f1 + pad } : { t0: 0, t1: spanEnd || 1 };
  const view = { t0: home.t0, t1: home.t1 };
  let selected = -1;
  const wf = document.getElementById("waterfall");
  // rows for hit testing: key thread*1000+depth -> span indices
  const rows = new Map();
  for (let i = 0; i < NS; i++) { const k = S.thread[i] * 1000 + S.depth[i]; if (!rows.has(k)) rows.set(k, []); rows.get(k).push(i); }

  function drawWaterfall() {
    const [g, W] = sizeCanvas(wf, wfHeight);
    g.clearRect(0, 0, W, wfHeight);
    const scale = W / (view.t1 - view.t0);
    // time axis
    g.fillStyle = "#667"; g.font = "10px ui-monospace, monospace";
    const span = view.t1 - view.t0, step = Math.pow(10, Math.floor(Math.log10(span / 6)));
    const tick = span / step > 30 ? step * 5 : span / step > 12 ? step * 2 : step;
    for (let t = Math.ceil(view.t0 / tick) * tick; t < view.t1; t += tick) {
      const x = (t - view.t0) * scale; g.fillRect(x, 12, 1, wfHeight); g.fillText(fmt(t), x + 2, 10);
    }
    g.fillStyle = "rgba(255,255,255,0.85)"; g.fillRect(0, 12, W, 0);
    for (let t = 0; t < D.threads.length; t++) {
      if (threadDepth[t] < 0) continue;
      g.fillStyle = "#334"; g.font = "bold 11px system-ui"; g.fillText("thread " + D.threads[t].name, 4, laneTop[t] + 12);
    }
    g.font = "11px system-ui";
    let lastX = new Map();
    for (let i = 0; i < NS; i++) {
      const s = S.start[i], e = s + S.dur[i];
      if (e < view.t0 || s > view.t1) continue;
      const x0 = (s - view.t0) * scale, w = Math.max(S.dur[i] * scale, 1);
      const yy = laneTop[S.thread[i]] + ROW * (S.depth[i] + 1);
      const key = S.thread[i] * 1000 + S.depth[i];
      if (w < 2) { const lx = lastX.get(key); if (lx !== undefined && Math.floor(lx) === Math.floor(x0)) continue; lastX.set(key, x0); }
      const name = NAMES[S.name[i]];
      g.fillStyle = S.error[i] ? "#e57373" : color(name, false);
      g.fillRect(x0, yy, w, ROW - 2);
      if (w > 40) {
        g.save(); g.beginPath(); g.rect(x0, yy, w, ROW); g.clip();
        g.fillStyle = "#111"; const st = S.attrs[i] && S.attrs[i]["diffusion.step"] !== undefined ? ` #${S.attrs[i]["diffusion.step"]}` : "";
        g.fillText(short(name) + st + " " + fmt(S.dur[i]), Math.max(x0, 0) + 3, yy + 11); g.restore();
      }
    }
    for (const l of devLanes) {
      g.fillStyle = "#334"; g.font = "bold 11px system-ui"; g.fillText(l.label, 4, l.top - 3);
      if (l.syncs) {
        for (const q of DV.syncs) {
          const x = (q.t - view.t0) * scale;
          if (x < -4 || x > W + 4) continue;
          g.fillStyle = "#c62828"; g.beginPath(); g.moveTo(x, l.top); g.lineTo(x - 4, l.top + ROW - 2); g.lineTo(x + 4, l.top + ROW - 2); g.fill();
        }
        continue;
      }
      g.fillStyle = "#5c6bc0";
      for (let k = 0; k < l.start.length; k++) {
        const x0 = (l.start[k] - view.t0) * scale, w = Math.max(l.dur[k] * scale, 0.5);
        if (x0 + w < 0 || x0 > W) continue;
        g.fillRect(x0, l.top, w, ROW - 2);
      }
      g.fillStyle = "rgba(229,57,53,0.35)";
      for (const q of DV.gaps) if (q.lane === l.label) {
        const x0 = (q.start - view.t0) * scale, w = Math.max(q.dur * scale, 1);
        if (x0 + w >= 0 && x0 <= W) g.fillRect(x0, l.top - 2, w, ROW + 2);
      }
    }
    if (selected >= 0) {
      const x0 = (S.start[selected] - view.t0) * scale, w = Math.max(S.dur[selected] * scale, 2);
      const yy = laneTop[S.thread[selected]] + ROW * (S.depth[selected] + 1);
      g.strokeStyle = "#000"; g.lineWidth = 2; g.strokeRect(x0, yy, w, ROW - 2);
    }
  }
  function spanAt(ev) {
    const r = wf.getBoundingClientRect(), x = ev.clientX - r.left, yy = ev.clientY - r.top;
    const t = view.t0 + x / r.width * (view.t1 - view.t0), tol = 2 / r.width * (view.t1 - view.t0);
    for (let th = 0; th < D.threads.length; th++) {
      const d = Math.floor((yy - laneTop[th]) / ROW) - 1;
      if (d < 0 || d > threadDepth[th]) continue;
      const list = rows.get(th * 1000 + d) || [];
      for (let j = list.length - 1; j >= 0; j--) { const i = list[j]; if (S.start[i] - tol <= t && t <= S.start[i] + S.dur[i] + tol) return i; }
    }
    return -1;
  }
  function deviceAt(ev) {
    if (!devLanes.length) return null;
    const r = wf.getBoundingClientRect(), x = ev.clientX - r.left, yy = ev.clientY - r.top;
    const scale = r.width / (view.t1 - view.t0), t = view.t0 + x / scale;
    const l = devLanes.find((l) => yy >= l.top - 2 && yy <= l.top + ROW);
    if (!l) return null;
    if (l.syncs) {
      const q = DV.syncs.find((q) => Math.abs((q.t - view.t0) * scale - x) <= 5);
      return q ? `${q.kind}  ${fmt(q.cost)}\n${q.python || "(no Python line)"}\n${q.span ? "in " + q.span : ""}` : null;
    }
    const gq = DV.gaps.find((q) => q.lane === l.label && q.start <= t && t <= q.start + q.dur);
    if (gq) return `idle gap ${fmt(gq.dur)} (${gq.category})\nhost op: ${gq.host_op || "-"}\nspan: ${gq.span || "-"}`;
    return `${l.label}`;
  }
  let drag = null;
  wf.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const r = wf.getBoundingClientRect(), f = (ev.clientX - r.left) / r.width, at = view.t0 + f * (view.t1 - view.t0);
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
      if (drag.moved) { const dt = dx / wf.clientWidth * (drag.t1 - drag.t0); view.t0 = drag.t0 - dt; view.t1 = drag.t1 - dt; drawWaterfall(); }
      return;
    }
    const dq = deviceAt(ev);
    if (dq) { wf.style.cursor = "default"; showTip(ev, dq); return; }
    const i = spanAt(ev);
    if (i < 0) { hideTip(); wf.style.cursor = "default"; return; }
    wf.style.cursor = "pointer";
    let txt = `${NAMES[S.name[i]]}\n${fmt(S.dur[i])}  (starts at ${fmt(S.start[i])})`;
    if (S.error[i]) txt += `\nerror: ${S.error[i]}`;
    if (S.attrs[i]) for (const [k, v] of Object.entries(S.attrs[i])) txt += `\n${k} = ${v}`;
    showTip(ev, txt);
  });
  wf.addEventListener("mouseleave", hideTip);
  wf.addEventListener("dblclick", () => {  // toggle: traced work <-> whole run
    const atHome = Math.abs(view.t0 - home.t0) < 1 && Math.abs(view.t1 - home.t1) < 1;
    if (atHome) { view.t0 = 0; view.t1 = spanEnd || 1; } else { view.t0 = home.t0; view.t1 = home.t1; }
    drawWaterfall();
  });

  // ---- flame graph from the prefix tree
  const kids = Array.from({ length: NN }, () => []);
  const tops = [];
  for (let i = 0; i < NN; i++) (P.parent[i] < 0 ? tops : kids[P.parent[i]]).push(i);
  const fg = document.getElementById("flamegraph");
  let fgTotals = null, fgSelf = null, fgFocus = -1, fgRects = [], fgTotalAll = 0;

  function lowerBound(arr, v) { let lo = 0, hi = arr.length; while (lo < hi) { const m = (lo + hi) >> 1; if (arr[m] < v) lo = m + 1; else hi = m; } return lo; }
  function computeTree(win) {
    const tot = new Float64Array(NN), self = new Float64Array(NN);
    let lo = 0, hi = NP, n = 0;
    if (win) { lo = lowerBound(P.t, win.t0); hi = lowerBound(P.t, win.t1); }
    for (let j = lo; j < hi; j++) {
      if (win && win.thread !== undefined && P.thread[j] !== win.thread) continue;
      if (!win && P.idle[j]) continue;  // the whole-run graph leaves out idle threads' waits
      self[P.node[j]] += P.w[j]; n++;
    }
    tot.set(self);
    for (let i = NN - 1; i >= 0; i--) if (P.parent[i] >= 0) tot[P.parent[i]] += tot[i];
    return [tot, self, n];
  }
  function setFlame(win, title) {
    const [tot, self, n] = computeTree(win);
    fgTotals = tot; fgSelf = self; fgFocus = -1;
    fgTotalAll = tops.reduce((a, i) => a + tot[i], 0);
    document.getElementById("fg-title").textContent = title;
    const note = document.getElementById("fg-note");
    if (n === 0) note.textContent = "No samples in this window" + (win ? ` (${fmt(win.t1 - win.t0)} at ${R.hz} Hz is under one sampling period; record with a higher --hz)` : ".");
    else note.textContent = `${n} samples, ${fmt(fgTotalAll)} sampled. Click a frame to zoom, click the top bar to zoom out.`;
    drawFlame();
  }
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
    for (const [x, w, d, n, anc] of fgRects) {
      const f = P.funcs[P.func[n]];
      g.fillStyle = anc ? "#ccd" : color(f[0], false);
      g.fillRect(x, d * ROW, Math.max(w - 0.5, 0.5), ROW - 1);
      if (w > 30) { g.save(); g.beginPath(); g.rect(x, d * ROW, w, ROW); g.clip(); g.fillStyle = "#111"; g.fillText(short(f[0], 3), x + 3, d * ROW + 11); g.restore(); }
    }
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
    showTip(ev, `${f[0]}\n${f[1] ? f[1].split("/").slice(-2).join("/") + ":" + f[2] + "\n" : ""}total ${fmt(fgTotals[n])} (${(100 * fgTotals[n] / base).toFixed(1)}%)  self ${fmt(fgSelf[n])}`);
  });
  fg.addEventListener("mouseleave", hideTip);
  fg.addEventListener("click", (ev) => { const q = frameAt(ev); if (!q) return; fgFocus = q[4] ? P.parent[q[3]] : q[3]; if (q[4] && fgFocus < 0) fgFocus = -1; drawFlame(); });

  function selectSpan(i) {
    selected = i; drawWaterfall();
    const name = NAMES[S.name[i]];
    let txt = `${name}  ${fmt(S.dur[i])}  at ${fmt(S.start[i])}  thread ${D.threads[S.thread[i]].name}`;
    if (S.attrs[i]) txt += "  " + Object.entries(S.attrs[i]).map(([k, v]) => `${k}=${v}`).join(" ");
    if (S.error[i]) txt += `  error: ${S.error[i]}`;
    document.getElementById("selection").textContent = txt;
    setHash("span=" + S.id[i]);
    setFlame({ t0: S.start[i], t1: S.start[i] + S.dur[i], thread: S.thread[i] }, `span ${short(name)}${S.attrs[i] && S.attrs[i]["diffusion.step"] !== undefined ? " (step " + S.attrs[i]["diffusion.step"] + ")" : ""}`);
  }
  // shareable state: the selection lives in the URL's fragment (#span=ID, #step=K, #repeat=K)
  function setHash(h) { try { history.replaceState(null, "", h ? "#" + h : location.pathname + location.search); } catch (e) { /* file:// in some browsers */ } }
  document.getElementById("fg-reset").addEventListener("click", () => { selected = -1; setHash(""); drawWaterfall(); document.getElementById("selection").textContent = "Whole run"; setFlame(null, "whole run"); });

  // ---- tables
  function table(el, head, rowsHtml) { el.innerHTML = `<table><thead><tr>${head.map((h) => `<th>${esc(h)}</th>`).join("")}</tr></thead><tbody>${rowsHtml.join("")}</tbody></table>`; }
  const SM = D.summary;
  const threadIndex = new Map(D.threads.map((t, i) => [t.id, i]));
  if (SM.steps && SM.steps.rows.length) {
    const st = SM.steps, cols = st.columns.slice(0, 6);
    document.getElementById("steps-title").textContent = st.kind === "diffusion.step" ? "Steps (diffusion.step) · click a step: its flame graph" : `Repeats of ${short(st.span_name)} · click a row: its flame graph`;
    table(document.getElementById("steps"), ["call", "step", "wall", "× median", ...cols.map((c) => short(c))],
      st.rows.map((r, k) => `<tr class="clickable${r.slow ? " slow" : ""}" data-k="${k}"><td>${r.call}</td><td>${r.step}</td><td>${fmtNs(r.wall_ns)}</td><td>${r.ratio.toFixed(2)}${r.slow ? " slow" : ""}</td>${cols.map((c) => `<td>${fmtNs(r.by_name[c])}</td>`).join("")}</tr>`));
    document.getElementById("steps").insertAdjacentHTML("beforeend", `<div class="note">${esc(st.rule)}</div>`);
    document.querySelectorAll("#steps tr.clickable").forEach((tr) => tr.addEventListener("click", () => {
      const r = st.rows[+tr.dataset.k];
      setHash("step=" + tr.dataset.k);
      setFlame({ t0: r.start_us, t1: r.end_us, thread: threadIndex.get(r.thread_id) }, `step ${r.step}${st.kind === "diffusion.step" ? " of call " + r.call : ""}`);
    }));
  } else document.getElementById("steps-section").hidden = true;
  table(document.getElementById("spanstats"), ["name", "count", "total", "mean", "p50", "p95", "max", "share"],
    SM.spans.map((s) => `<tr><td title="${esc(s.name)}">${esc(short(s.name))}${s.errors ? ` <b style="color:#b00020">(${s.errors} errors)</b>` : ""}</td><td>${s.count}</td><td>${fmtNs(s.total_ns)}</td><td>${fmtNs(s.mean_ns)}</td><td>${fmtNs(s.p50_ns)}</td><td>${fmtNs(s.p95_ns)}</td><td>${fmtNs(s.max_ns)}</td><td>${(100 * s.share).toFixed(1)}%</td></tr>`));
  const fnRow = (f, ns, share) => `<tr><td title="${esc(f.file)}:${f.line}">${esc(short(f.name, 3))}</td><td>${fmtNs(ns)}</td><td>${(100 * share).toFixed(1)}%</td></tr>`;
  table(document.getElementById("topself"), ["function (self time)", "self", "share"], SM.top_self.slice(0, 15).map((f) => fnRow(f, f.self_ns, f.self_share)));
  table(document.getElementById("toptotal"), ["function (total time)", "total", "share"], SM.top_total.slice(0, 15).map((f) => fnRow(f, f.total_ns, f.total_share)));

  // ---- explain: slow repeats, causes, differential flame graph
  const E = D.explain;
  let diffRects = [];
  const dg = document.getElementById("diffgraph");
  function drawDiff() {
    if (!E || !E.tree) return;
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
    document.getElementById("explain-section").hidden = false;
    document.getElementById("diff-wrap").hidden = !E.tree;  // no tree: too few samples (the advice says so)
    document.getElementById("explain-unit").textContent = E.unit === "step" ? "denoising steps" : short(E.unit);
    const slowN = E.repeats.filter((r) => r.group === "slow").length;
    document.getElementById("explain-summary").textContent =
      `${slowN} of ${E.repeats.length} slow (${E.shape}); slow mean ${fmtNs(E.slow_mean_ns)} vs fast mean ${fmtNs(E.fast_mean_ns)}: gap ${fmtNs(E.gap_ns)} per repeat. ${E.rule}.` +
      (E.entry ? ` The extra time enters at ${E.entry.function}.` : "") + (E.advice ? " " + E.advice : "");
    const reps = E.repeats.filter((r) => r.group !== "other");
    table(document.getElementById("explain-repeats"), ["repeat", "duration", "× median", "group"],
      reps.map((r, k) => `<tr class="clickable${r.group === "slow" ? " slow" : ""}" data-k="${k}"><td>${esc(r.label)}</td><td>${fmtNs(r.duration_ns)}</td><td>${(r.duration_ns / E.median_ns).toFixed(2)}</td><td>${r.group}</td></tr>`));
    document.querySelectorAll("#explain-repeats tr.clickable").forEach((tr) => tr.addEventListener("click", () => {
      const r = reps[+tr.dataset.k]; setHash("repeat=" + tr.dataset.k); setFlame({ t0: r.start_us, t1: r.end_us, thread: r.thread }, `${r.label} (${r.group})`);
    }));
    if (E.causes.length) table(document.getElementById("explain-causes"), ["what makes the difference", "slow", "fast", "extra", "of gap"],
      E.causes.map((c) => `<tr><td title="${esc(c.file)}:${c.line}">${esc(short(c.function, 3))}</td><td>${fmtNs(c.slow_ns)}</td><td>${fmtNs(c.fast_ns)}</td><td>+${fmtNs(c.delta_ns)}</td><td>${(100 * c.share_of_gap).toFixed(0)}%</td></tr>`));
  } else document.getElementById("explain-none").hidden = false;

  // ---- device: idle gaps and host syncs as tables (the lanes are in the waterfall)
  if (DV) {
    document.getElementById("device-section").hidden = false;
    document.getElementById("device-title").textContent = DV.device ? String(DV.device.name || DV.device) : "";
    table(document.getElementById("device-gaps"), ["stream", "at", "idle", "category", "host op", "span"],
      DV.gaps.map((g) => `<tr><td>${esc(g.lane)}</td><td>${fmt(g.start)}</td><td>${fmt(g.dur)}</td><td>${esc(g.category)}</td><td>${esc(g.host_op || "")}</td><td>${esc(short(g.span || ""))}</td></tr>`));
    const syncs = DV.syncs.slice().sort((a, b) => b.cost - a.cost).slice(0, 50);
    table(document.getElementById("device-syncs"), ["sync", "at", "cost", "Python line", "span"],
      syncs.map((q) => `<tr><td>${esc(q.kind)}</td><td>${fmt(q.t)}</td><td>${fmt(q.cost)}</td><td>${esc(q.python || "")}</td><td>${esc(short(q.span || ""))}</td></tr>`));
  } else document.getElementById("device-none").hidden = false;

  function measure() { for (const cv of [wf, fg, dg]) canvasWidth(cv); }  // all reads before any write: one layout
  measure();
  drawWaterfall();
  setFlame(null, "whole run");
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
    const r = wf.getBoundingClientRect(), scale = r.width / (view.t1 - view.t0);
    const x0 = (S.start[i] - view.t0) * scale;
    return { x: r.left + x0, y: r.top + laneTop[S.thread[i]] + ROW * (S.depth[i] + 1), w: Math.max(S.dur[i] * scale, 1), h: ROW - 2 };
  }
  function findSpan(suffix, k) { let n = 0; for (let i = 0; i < NS; i++) if (NAMES[S.name[i]].endsWith(suffix) && n++ === (k || 0)) return i; return -1; }
  window.stepscopeReport = { selectSpan, setFlame, spanRect, findSpan, spanCount: NS, frameCount: () => fgRects.length,
                             flameTitle: () => document.getElementById("fg-title").textContent, diffCount: () => diffRects.length,
                             deviceLanes: () => devLanes.map((l) => l.label),
                             syncRect: (k) => { const l = devLanes.find((l) => l.syncs), r = wf.getBoundingClientRect();
                               return { x: r.left + (DV.syncs[k].t - view.t0) * r.width / (view.t1 - view.t0), y: r.top + l.top + ROW / 2 }; },
                             tooltip: () => (tip.hidden ? "" : tip.textContent),
                             readyMs: performance.now() };  // page start -> first waterfall and flame graph drawn
})();
