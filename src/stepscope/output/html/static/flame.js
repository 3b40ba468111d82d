// stepscope report, the flame graph of any window from the profile's prefix tree: wall or CPU time, the idle
// toggle, search, zoom, the legend, the collapsed start-up block, the reset button and the sandwich view.
// Part of report.js: stepscope.output.html.html joins the SCRIPT_PARTS in order inside one function (one shared scope).
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
  $("fg-reset").textContent = DEFAULT_TITLE;
  $("fg-reset").addEventListener("click", () => {
    selected = -1; selWindow = null; setHash(""); drawWaterfall();
    if (startBtn.dataset.open === "1") { startBtn.dataset.open = "0"; startBtn.textContent = startupLabel(false); }
    setFlame(defaultWin(), DEFAULT_TITLE);
  });
