// stepscope report, start: the first draw, the URL state restored, redraws on resize, and window.stepscopeReport
// (for tests and scripting).
// Part of report.js: stepscope.output.html.html joins the SCRIPT_PARTS in order inside one function (one shared scope).
  treeEl.style.maxHeight = Math.max(wfHeight - 30, 200) + "px";
  buildTree("");
  function measure() { for (const cv of [wf, fg, dg]) canvasWidth(cv); }  // all reads before any write: one layout
  measure();
  drawWaterfall();
  setFlame(defaultWin(), DEFAULT_TITLE);
  drawDiff();
  restoreHash();
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
