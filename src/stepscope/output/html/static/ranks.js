// stepscope report, a job of several processes: the processes table, and its steps rank by rank as a heat map
// (each cell: the step's wall time on that rank, shaded by its share of the slowest rank's in the step; the
// straggler of a held-up step outlined), a click on a cell: that rank's step in the flame graph.
// Part of report.js: stepscope.output.html.html joins the SCRIPT_PARTS in order inside one function (one shared scope).
  // ---- processes and ranks (summary.processes, summary.ranks: view model version 1)
  const PROCS = SM.processes || [], RK = SM.ranks;
  const clip = (t, n) => t.length > n ? t.slice(0, n - 1) + "…" : t;
  if (PROCS.length) {
    $("processes-section").hidden = false;
    table($("processes"), ["process", "parent", "started", "program", "status", "wall", "spans", "samples"],
      PROCS.map((p) => `<tr><td>${esc(p.label)}</td><td>${p.ppid ?? "-"}</td><td>${esc(p.how)}</td><td class="txt" title="${esc(p.command.join(" "))}">${esc(clip(p.command.slice(1).join(" "), 80))}</td>` +
        `<td>${esc(p.status)}${p.exit_code ? ` (exit ${p.exit_code})` : ""}</td><td>${fmtNs(p.wall_ns)}</td><td>${p.span_count}</td><td>${p.sample_count}</td></tr>`));
  }
  if (RK) {
    $("ranks-section").hidden = false;
    $("ranks-title").textContent = `${RK.name} · wall time per rank, shaded by its share of the slowest rank's in the step · click a cell: that rank's step in the flame graph`;
    const held = new Set(RK.held);
    const cell = (s, j) => {
      const w = RK.wall[s][j];
      if (w == null) return "<td>-</td>";
      const mx = Math.max(...RK.wall[s].filter((v) => v != null));
      const share = mx > 0 ? w / mx : 0, strag = held.has(s) && RK.straggler[s] === RK.ranks[j];
      const bg = `rgba(214, 39, 40, ${(0.08 + 0.5 * share * (held.has(s) ? 1 : 0.35)).toFixed(2)})`;
      return `<td class="rank-cell clickable${strag ? " straggler" : ""}" data-s="${s}" data-j="${j}" style="background:${bg}" ` +
        `title="rank ${RK.ranks[j]}, step ${s}: wall ${fmtNs(w)}, ran ${fmtNs(RK.busy[s][j])}, waited ${fmtNs(RK.waited[s][j])}, in collectives ${fmtNs(RK.collective[s][j])}">${fmtNs(w)}${strag ? " *" : ""}</td>`;
    };
    const rows = RK.wall.map((_, s) => `<tr${held.has(s) ? ' class="held"' : ""}><td>${s}</td>${RK.ranks.map((_, j) => cell(s, j)).join("")}<td>${held.has(s) ? fmtNs(RK.lead_ns[s]) : ""}</td></tr>`);
    table($("ranks"), ["step", ...RK.ranks.map((r) => `rank ${r}`), "lead"], rows, "ranks");
    let note = "No step was held up by one rank.";
    if (RK.job_straggler != null) {
      const mine = RK.held.filter((s) => RK.straggler[s] === RK.job_straggler);
      const lead = mine.reduce((a, s) => a + RK.lead_ns[s], 0);
      note = `Straggler: rank ${RK.job_straggler} held up ${mine.length} of ${RK.wall.length} steps (${mine.join(", ")}): it ran ${fmtNs(lead)} longer than the other ranks' median.`;
      if (RK.cause.length) note += ` Cause (self time over the other ranks', per held-up step): ${RK.cause.slice(0, 3).map(([n, ns]) => `${short(n, 3)} +${fmtNs(ns)}`).join(", ")}.`;
      for (const [r, ns] of Object.entries(RK.waited_for)) note += ` Rank ${r} waited ${fmtNs(ns)} in those steps.`;
    }
    $("ranks-note").textContent = note;
    document.querySelectorAll("#ranks td.rank-cell").forEach((td) => td.addEventListener("click", () => {
      const s = +td.dataset.s, j = +td.dataset.j, t0 = RK.start_us[s][j], t1 = RK.end_us[s][j];
      const label = `rank ${RK.ranks[j]} step ${s}`;
      selectWindow({ t0, t1, busy: true, thread: threadIndex.get(RK.thread[s][j]) }, label, `${label}: ${fmt(t1 - t0)}, ${fmt(t0)} – ${fmt(t1)}`);
    }));
  }
