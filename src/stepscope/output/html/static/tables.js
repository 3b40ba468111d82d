// stepscope report, the tables below the graphs: span statistics, top functions, memory (the out-of-memory record,
// stages, spans). The device's tables are device.js.
// Part of report.js: stepscope.output.html.html joins the SCRIPT_PARTS in order inside one function (one shared scope).
  // ---- spans and top functions
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

  // ---- a node-graph app's nodes and prompts (summary.nodes: analysis/nodes.py; --app comfyui)
  const ND = SM.nodes;
  if (ND && ND.nodes.length) {
    $("nodes-section").hidden = false;
    table($("nodes"), ["node", "runs", "cached", "total", "mean", "p50", "p95", "std", "share"],
      ND.nodes.map((n, k) => `<tr class="clickable" data-k="${k}"><td>${esc(n.name)}</td><td>${n.count}</td><td>${n.cached}</td><td>${fmtNs(n.total_ns)}</td><td>${fmtNs(n.mean_ns)}</td><td>${fmtNs(n.p50_ns)}</td><td>${fmtNs(n.p95_ns)}</td><td>${fmtNs(n.std_ns)}</td><td>${(100 * n.share).toFixed(1)}%</td></tr>`));
    document.querySelectorAll("#nodes tr.clickable").forEach((tr) => tr.addEventListener("click", () => {
      const name = ND.nodes[+tr.dataset.k].name;
      let best = -1;
      for (let i = 0; i < NS; i++) if (NAMES[S.name[i]] === name && (best < 0 || S.dur[i] > S.dur[best])) best = i;
      if (best >= 0) selectSpan(best);
    }));
    table($("prompts"), ["prompt", "wall", "ran", "cached", "in nodes", "slowest node"],
      ND.prompts.map((r, k) => `<tr class="clickable" data-k="${k}"><td>${r.index}${r.prompt_id ? ` <small>${esc(r.prompt_id.slice(0, 8))}</small>` : ""}</td><td>${fmtNs(r.wall_ns)}</td><td>${r.ran}</td><td>${r.cached}</td><td>${fmtNs(r.node_ns)}</td><td class="txt">${esc(r.slowest)} ${r.slowest ? fmtNs(r.slowest_ns) : ""}</td></tr>`));
    document.querySelectorAll("#prompts tr.clickable").forEach((tr) => tr.addEventListener("click", () => {
      const r = ND.prompts[+tr.dataset.k];
      selectWindow({ t0: r.start_us, t1: r.start_us + r.wall_ns / 1e3 }, `prompt ${r.index}`, `prompt ${r.index}: ${fmtNs(r.wall_ns)}`);
    }));
  }
