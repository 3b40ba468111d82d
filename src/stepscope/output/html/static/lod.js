// stepscope report, a large run's waterfall (D.aggregated): density rows for the spans not shown one by one and,
// on served pages, the spans of the zoomed window fetched from /api/runs/ID/spans (level of detail).
// Part of report.js: stepscope.output.html.html joins the SCRIPT_PARTS in order inside one function (one shared scope).
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
