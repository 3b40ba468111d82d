// stepscope report, the device's tables: idle gaps (a GPU's) and host syncs grouped by Python line.
// Part of report.js: stepscope.report.html joins the SCRIPT_PARTS in order inside one function (one shared scope).
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
