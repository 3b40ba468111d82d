// stepscope report, the first screen: the run line, the verdict (what is slow and why, in words), the phase note,
// the step table and the slow repeats with their causes and differential flame graph.
// Part of report.js: stepscope.output.html.html joins the SCRIPT_PARTS in order inside one function (one shared scope).
  // explain's advice (a line for the terminal: lowercase, no full stop) as a sentence after the verdict's own
  function sentence(s) {
    s = String(s).trim();
    return s ? s[0].toUpperCase() + s.slice(1) + (/[.!?]$/.test(s) ? "" : ".") : s;
  }

  // ---- run header
  $("runinfo").textContent =
    (D.phases && D.phases.capture ? "capture of " : "") +
    `${R.command.join(" ")}  ·  ${D.phases && D.phases.capture ? "window" : "wall"} ${fmt(R.wall_us)}  ·  ${R.status}${R.exit_code ? " (exit " + R.exit_code + ")" : ""}` +
    (R.status === "incomplete" || R.status === "lost" ? ` (${R.error})` : "") + `  ·  ` +
    `${D.summary.span_count ? D.summary.span_count.toLocaleString("en") + " spans" : "no function traced"}${AGG ? " (" + NS.toLocaleString("en") + " shown one by one)" : ""}  ·  ${P.total_samples} samples at ${R.hz} Hz${P.downsampled > 1 ? " (shown 1 in " + P.downsampled + ")" : ""}` +
    (R.start_wall_ms ? `  ·  ${new Date(R.start_wall_ms).toISOString().replace("T", " ").slice(0, 19)}` : "") +
    (R.env && R.env.torch ? `  ·  torch ${R.env.torch}` : "") +
    (R.env && R.env.source === "sentry" ? `  ·  from ${R.env.sdk || "a Sentry SDK"}` : "") +
    (D.summary.sampling ? `  ·  ${D.summary.sampling}` : "");

  // ---- the verdict: what is slow and why, in words, first
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
    } else if (E.advice) html += " " + esc(sentence(E.advice));
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

  // ---- the step table (diffusion steps, or the repeats of the most repeated span): click a row: its window
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
      ST.rows.map((r, k) => `<tr class="clickable${r.slow ? " slow" : ""}" data-k="${k}">${calls > 1 ? `<td>${esc((ST.call_labels || {})[r.call] ?? r.call)}</td>` : ""}<td>${r.step}${r.slow ? '<span class="tag">slow</span>' : r.warmup ? '<span class="tag warm" title="the first step, slow too: set apart as a warm-up">warm-up</span>' : r.waited ? `<span class="tag warm" title="slow only by its wait for a CPU (${(r.cpu_wait_ns / 1e6).toFixed(1)} ms: other processes or threads held the CPUs): set apart">cpu wait</span>` : ""}</td>` +
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
      const cl = (ST.call_labels || {})[r.call];
      const label = isStep ? `step ${r.step}${calls > 1 || PAGE !== "explain" ? (cl ? " of " + cl : " of call " + r.call) : ""}` : `repeat ${r.step}`;
      selectWindow({ t0: r.start_us, t1: r.end_us, thread: threadIndex.get(r.thread_id) }, label,
        `${label}: ${fmtNs(r.wall_ns)} (${r.ratio.toFixed(2)} x median), untraced ${fmtNs(r.untraced_ns)}, ${fmt(r.start_us)} – ${fmt(r.end_us)}`);
    }));
  } else $("steps-section").hidden = true;

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
    for (const [x, w, d, n] of diffRects) {
      g.fillStyle = n.color;  // output/html/difftree.py's diff_color, as on the compare page
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
      (E.entry ? ` The extra time enters at ${E.entry.function}.` : "") + (E.advice ? " " + sentence(E.advice) : "") +
      (E.memory_note ? " Memory: " + E.memory_note + "." : "");
    const reps = E.repeats.filter((r) => r.group !== "other");
    table($("explain-repeats"), ["repeat", "duration", "× median", "group"],
      reps.map((r, k) => `<tr class="clickable${r.group === "slow" ? " slow" : ""}" data-k="${k}"><td>${esc(r.label)}</td><td${r.group === "slow" ? ' class="slowcell"' : ""}>${fmtNs(r.duration_ns)}</td><td>${(r.duration_ns / E.median_ns).toFixed(2)}</td><td>${r.group}</td></tr>`));
    document.querySelectorAll("#explain-repeats tr.clickable").forEach((tr) => tr.addEventListener("click", () => {
      const r = reps[+tr.dataset.k]; setHash("repeat=" + tr.dataset.k);
      selectWindow({ t0: r.start_us, t1: r.end_us, thread: r.thread }, `${r.label} (${r.group})`, `${r.label} (${r.group}): ${fmtNs(r.duration_ns)}`);
    }));
    if (E.causes.length) table($("explain-causes"), ["what makes the difference", "slow", "fast", "extra", "of gap"],
      E.causes.map((c) => `<tr><td title="${esc(c.file)}${c.line ? ":" + c.line : " (" + esc(c.line_note || "no line") + ")"}">${esc(short(c.function, 3))}</td><td>${fmtNs(c.slow_ns)}</td><td>${fmtNs(c.fast_ns)}</td><td>+${fmtNs(c.delta_ns)}</td><td>${(100 * c.share_of_gap).toFixed(0)}%</td></tr>`));
  } else $("explain-none").hidden = false;
  (function fixNote() {  // stepscope try: the fixes that apply to what the run recorded (analysis/fixhints.py)
    const F = D.fixes, n = $("fix-note");
    if (!n || !F || !F.hints || !F.hints.length) return;
    n.textContent = "Fixes that apply to this run: " + F.hints.map((h) => `${h.fix} (${h.why})`).join("; ") + "." + (F.command ? " Measure them on the program as it is: " : "");
    if (F.command) { const c = document.createElement("code"); c.textContent = F.command; n.appendChild(c); }
    n.hidden = false;
  })();
