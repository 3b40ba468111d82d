// stepscope report, the device's tables (what `stepscope device` shows, from the same device view: device/view.py):
// idle gaps (a GPU's) and host syncs by Python line; idle per stream, top host ops and kernels, per-span host vs
// device time against the probe's peak, the torch.compile report, the sync sites, and a PyTorch/XLA trace's
// compilations, executions and transfers per step and span.
// Part of report.js: stepscope.output.html.html joins the SCRIPT_PARTS in order inside one function (one shared scope).
  // ---- device: idle gaps (a GPU's) and host syncs grouped by Python line (the lanes are in the waterfall)
  if (DV) {
    $("device-section").hidden = false;
    const hasKineto = DV.kineto !== false;  // (a view model written before the field: it had a Kineto trace)
    const hasDevice = DV.lanes.some((l) => /(^| · )GPU /.test(l.label));  // (a job: "rank N (pid P) · GPU d stream s")
    const nStreams = DV.lanes.filter((l) => /(^| · )GPU /.test(l.label)).length;  // (no deviceProperties: say what is known)
    $("device-title").textContent = DV.device ? String(DV.device.name || DV.device)
      : hasDevice ? `GPU kernels on ${nStreams} stream${nStreams === 1 ? "" : "s"}, device unnamed` : "";
    if (!hasKineto) {
      $("device-gaps-wrap").hidden = true; $("device-syncs-wrap").hidden = true;
    } else if (!hasDevice) {
      $("device-gaps-wrap").hidden = true;
      const cpu = $("device-cpu"); cpu.hidden = false;
      cpu.textContent = "No device timeline on CPU: this run recorded the host's torch ops only (no GPU stream ran), so there are no device idle gaps. The host syncs below are where the program would wait for a GPU.";
    } else {
      table($("device-gaps"), ["stream", "at", "idle", "category", "host op", "span", "next on device (launched in)"],
        DV.gaps.map((g) => `<tr><td>${esc(g.lane)}</td><td>${fmt(g.start)}</td><td>${fmt(g.dur)}</td><td>${esc(g.category)}</td><td>${esc(g.host_op || "")}</td><td>${esc(short(g.span || ""))}</td><td class="txt">${esc(g.next || "")}${g.launched_in ? ` <small>(${esc(g.launched_in)})</small>` : ""}</td></tr>`));
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
    deviceTables(DV);
  } else $("device-none").hidden = false;

  function deviceTables(dv) {
    const base = (f) => String(f).split("/").pop();
    const pct = (a, b) => `${(100 * a / Math.max(b, 1)).toFixed(0)}%`;
    // a share of the peak: whole percent from 1%, one decimal below, "<0.1%" (as the terminal's device.share)
    const share = (x) => x == null ? "-" : (p => p >= 1 || p === 0 ? `${p.toFixed(0)}%` : p >= 0.1 ? `${p.toFixed(1)}%` : "<0.1%")(100 * x);
    const ratio = (a, b) => `${fmtNs(a)} (${pct(a, b)})`;
    const nsCount = (n, ns) => `${n} (${fmtNs(ns)})`;
    const txt = (s) => `<td class="txt">${esc(s == null || s === "" ? "-" : s)}</td>`;
    const show = (id, html) => { const el = $(id); el.innerHTML = html; el.hidden = false; return el; };
    const titled = (el, title, head, rows) => { const box = document.createElement("div"); el.appendChild(box);
      table(box, head, rows); box.insertAdjacentHTML("afterbegin", `<h3>${title}</h3>`); };
    // idle per stream (HTA's categories), then the top host ops and kernels
    if ((dv.streams || []).length) titled($("device-streams"), "Idle time per stream <small>HTA's categories</small>", ["device", "stream", "activities", "span", "busy", "idle", "host wait", "kernel wait", "other"],
      dv.streams.map((s) => `<tr><td>${s.device}</td><td>${s.stream}</td><td>${s.activities}</td><td>${fmtNs(s.span_ns)}</td><td>${fmtNs(s.busy_ns)}</td><td>${ratio(s.idle_ns, s.span_ns)}</td><td>${ratio(s.host_wait_ns, s.idle_ns)}</td><td>${ratio(s.kernel_wait_ns, s.idle_ns)}</td><td>${ratio(s.other_ns, s.idle_ns)}</td></tr>`));
    const opRows = (items) => items.slice(0, 15).map((o) => `<tr><td class="txt" title="${esc(o.name)}">${esc(o.label || o.name)}</td><td>${o.count}</td><td>${fmtNs(o.total_ns)}</td><td>${fmtNs(o.self_ns)}</td></tr>`);
    if ((dv.top_ops || []).length || (dv.top_kernels || []).length) {
      const el = show("device-ops", "");
      for (const [title, items] of [["Top host ops by self time", dv.top_ops || []], ["Top kernels by time", dv.top_kernels || []]])
        if (items.length) titled(el, title, ["name", "calls", "total", "self"], opRows(items));
    }
    // per span: host time vs host ops vs device, FLOP/s and the share of the probe's peak
    const pk = dv.peak;
    if (pk && pk.peak_flops) {
      const peaks = pk.peaks || { [pk.dtype]: pk.peak_flops };
      $("device-peak").textContent = `measured matmul peak (${pk.name}): ` + Object.entries(peaks).map(([d, p]) => `${d} ${p >= 1e12 ? `${(p / 1e12).toFixed(1)} TFLOP/s` : `${(p / 1e9).toFixed(1)} GFLOP/s`}`).join(", ") + " (each span's share: of the peak of its ops' dtype)";
    }
    if ((dv.spans || []).length) {
      $("device-spans-wrap").hidden = false;
      table($("device-spans"), ["span", "calls", "in trace", "host (span)", "in host ops", "on device", "GFLOP", "GFLOP/s", "of peak", "top kernels / ops"],
        dv.spans.slice(0, 30).map((s) => `<tr><td title="${esc(s.name)}">${esc(short(s.name))}</td><td>${s.count}</td><td>${s.recorded}</td><td>${fmtNs(s.recorded_ns)}</td><td>${fmtNs(s.op_ns)}</td><td>${fmtNs(s.device_ns)}</td><td>${(s.flops / 1e9).toFixed(2)}</td><td>${(s.achieved_flops_s / 1e9).toFixed(1)}</td><td>${share(s.of_peak)}${s.device_of_peak ? ` (${share(s.device_of_peak)} on device)` : ""}</td>${txt(((s.top_kernels || []).length ? s.top_kernels : s.top_ops || []).slice(0, 3).map(([n, ns, label]) => `${label || n} ${fmtNs(ns)}`).join(", "))}</tr>`));
    }
    // torch.compile: graph breaks and recompilations with their line
    const cr = dv.compile;
    if (cr) {
      const gb = cr.graph_breaks || [], rc = cr.recompiles || [];
      const el = show("device-compile", `<h2>torch.compile <small>${gb.reduce((a, g) => a + g.count, 0)} graph breaks at ${gb.length} places, ${rc.reduce((a, r) => a + r.count, 0)} recompilations</small></h2>`);
      for (const [title, items] of [["Graph breaks", gb], ["Recompilations", rc]])
        if (items.length) titled(el, title, ["where", "count", "reason"], items.map((g) => `<tr><td title="${esc(g.file)}:${g.line}">${esc(base(g.file) + ":" + g.line + (g.function ? " " + g.function : ""))}</td><td>${g.count}</td>${txt(g.reason)}</tr>`));
    }
    // the sync sites: where a GPU would make the host wait (from the run's sync spans, with or without a trace)
    if ((dv.sync_sites || []).length) {
      $("device-sites-wrap").hidden = false;
      table($("device-sites"), ["kind", "line", "function", "calls", "time", "inside"],
        dv.sync_sites.slice(0, 30).map((s) => `<tr><td>${esc(s.kind)}</td>${txt(s.where)}${txt(s.function)}<td>${s.count}</td><td>${fmtNs(s.total_ns)}</td>${txt(s.inside.slice(0, 2).map((n) => short(n)).join(", "))}</tr>`));
    }
    if (dv.xla) xlaTables(dv.xla, { txt, show, titled, nsCount, pct });
  }

  // a PyTorch/XLA trace (device.xla.XlaSummary): totals, per step, transfers with their line, per span, lanes and
  // idle gaps, the torch_xla metrics per step
  function xlaTables(x, h) {
    const t = x.total, { txt, titled, nsCount, pct } = h;
    const el = h.show("device-xla", `<h2>XLA trace <small>${esc(x.path)} · ${x.hosts} host file${x.hosts !== 1 ? "s" : ""} · ${x.events} events · span ${fmtNs(x.span_ns)}</small></h2>` +
      `<div class="note">graph compilations: ${nsCount(t.compiles, t.compile_ns)} of ${x.graphs} graphs, ${x.recompiles} recompilations after a call's first step; graph executions: ${nsCount(t.executions, t.execute_ns)}, ${t.reads} cut by a tensor read; transfers: ${t.from_device} from device (${fmtNs(t.from_device_ns)}), ${t.to_device} to device (${fmtNs(t.to_device_ns)})</div>` +
      (x.metrics_error ? `<div class="note">${esc(x.metrics_error)}</div>` : "") +
      Object.entries(x.unmirrored || {}).map(([n, why]) => `<div class="note">unmirrored: ${esc(short(n))}: ${esc(why)}</div>`).join(""));
    const stepsText = (s) => !s.length ? "-" : s.slice(0, 6).join(", ") + (s.length > 6 ? ` +${s.length - 6}` : "");
    if (x.steps.length) titled(el, `Per step <small>${esc(x.step_source)}</small>`, ["step", "graphs run", "cut by reads", "compiles", "recompiles", "compile", "execute", "from device", "to device", "host between", "wall"],
      x.steps.slice(0, 200).map((s) => { const f = s.figures, w = s.end_ns > s.start_ns;
        return `<tr><td>${esc(s.label)}</td><td>${f.executions}</td><td>${f.reads}</td><td>${f.compiles}</td><td>${s.recompiles}</td><td>${fmtNs(f.compile_ns)}</td><td>${fmtNs(f.execute_ns)}</td><td>${nsCount(f.from_device, f.from_device_ns)}</td><td>${nsCount(f.to_device, f.to_device_ns)}</td><td>${w ? fmtNs(f.host_ns) : "-"}</td><td>${w ? fmtNs(f.wall_ns) : "-"}</td></tr>`; }));
    if (x.transfers.length) titled(el, "Transfers and the Python line that caused them", ["direction", "kind", "line", "function", "count", "transfer", "wait", "steps", "inside"],
      x.transfers.map((s) => `<tr><td>${esc(s.direction)}</td>${txt(s.kind)}${txt(s.where)}${txt(s.function)}<td>${s.count}</td><td>${fmtNs(s.cost_ns)}</td><td>${s.wait_ns ? fmtNs(s.wait_ns) : "-"}</td>${txt(stepsText(s.steps))}${txt(s.inside.slice(0, 2).map((n) => short(n)).join(", "))}</tr>`));
    else el.insertAdjacentHTML("beforeend", '<div class="note">No transfers between host and device.</div>');
    if (x.spans.length) titled(el, "Per span", ["span", "calls", "wall", "host", "compiles", "compile", "graphs run", "cut by reads", "from device", "to device"],
      x.spans.slice(0, 30).map((s) => { const f = s.figures;
        return `<tr><td title="${esc(s.name)}">${esc(short(s.name))}</td><td>${s.calls}</td><td>${fmtNs(f.wall_ns)}</td><td>${fmtNs(f.host_ns)}</td><td>${f.compiles}</td><td>${fmtNs(f.compile_ns)}</td><td>${f.executions}</td><td>${f.reads}</td><td>${nsCount(f.from_device, f.from_device_ns)}</td><td>${nsCount(f.to_device, f.to_device_ns)}</td></tr>`; }));
    if (x.lanes.length) {
      titled(el, "Device lanes", ["lane", "activities", "span", "busy", "idle"],
        x.lanes.map((l) => `<tr><td>${esc(l.lane)}</td><td>${l.activities}</td><td>${fmtNs(l.span_ns)}</td><td>${fmtNs(l.busy_ns)}</td><td>${fmtNs(l.idle_ns)} (${pct(l.idle_ns, l.span_ns)})</td></tr>`));
      if (x.gaps.length) titled(el, "Largest device idle gaps and the host span running", ["gap", "lane", "step", "host span"],
        x.gaps.map((g) => `<tr><td>${fmtNs(g.end_ns - g.start_ns)}</td>${txt(g.lane)}${txt(g.step)}${txt(g.span ? short(g.span) : "")}</tr>`));
    }
    // the torch_xla counters' changes per step: the main ones, the aten:: ones (ops run on the CPU), the times
    const MAIN = ["UncachedCompile", "CachedCompile", "ExecuteComputation", "MarkStep"];
    const TIMES = ["CompileTime", "ExecuteTime", "TransferFromDeviceTime", "TransferToDeviceTime"];
    const mtext = (m) => [...MAIN.filter((k) => m[k]).map((k) => `${k} ${Math.trunc(m[k])}`),
      ...Object.entries(m).filter(([k, v]) => k.startsWith("aten::") && v).map(([k, v]) => `${k} ${Math.trunc(v)}`),
      ...TIMES.filter((k) => m[k + ".count"]).map((k) => `${k} ${Math.trunc(m[k + ".count"])} (${fmtNs(m[k])})`)].join(", ") || "-";
    const withMetrics = x.steps.filter((s) => s.metrics && Object.keys(s.metrics).length);
    if (withMetrics.length) titled(el, "torch_xla metrics per step <small>torch_xla.debug.metrics</small>", ["step", "counters and times"],
      withMetrics.slice(0, 200).map((s) => `<tr><td>${esc(s.label)}</td>${txt(mtext(s.metrics))}</tr>`));
  }
