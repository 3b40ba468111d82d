// stepscope report, the span tree beside the waterfall, the selection (a span, or a step's or repeat's window) and
// the URL state: the selection lives in the fragment (#span=ID, #step=K, #repeat=K), restored on load.
// Part of report.js: stepscope.output.html.html joins the SCRIPT_PARTS in order inside one function (one shared scope).
  // ---- the span tree beside the bars: indented by nesting, duration and share, searchable
  const TREE_MAX = 2000;
  const treeEl = $("spantree");
  const shareBase = R.wall_us || spanEnd || 1;
  function buildTree(q) {
    const needle = (q || "").toLowerCase();
    const out = [];
    let n = 0, shown = 0;
    for (let i = 0; i < NS; i++) {
      const name = NAMES[S.name[i]];
      if (needle && !name.toLowerCase().includes(needle)) continue;
      n++;
      if (shown >= TREE_MAX) continue;
      shown++;
      const st = S.attrs[i] && S.attrs[i]["diffusion.step"] !== undefined ? ` #${S.attrs[i]["diffusion.step"]}` : "";
      out.push(`<div class="row${i === selected ? " sel" : ""}" role="treeitem" data-i="${i}" title="${esc(name)}" style="padding-left:${6 + 12 * Math.min(S.depth[i], 30)}px">` +
        `<span class="nm"><span>${esc(short(name, 2))}${st}</span></span><span class="du">${fmt(S.dur[i])}</span><span class="sh">${(100 * S.dur[i] / shareBase).toFixed(1)}%</span></div>`);
    }
    if (n > shown) out.push(`<div class="more">${n - shown} more spans: search to narrow</div>`);
    if (!n) out.push(`<div class="more">${needle ? "no span matches" : "no spans"}</div>`);
    treeEl.innerHTML = out.join("");
  }
  treeEl.addEventListener("click", (ev) => {
    const row = ev.target.closest(".row"); if (!row) return;
    const i = +row.dataset.i;
    const d = S.dur[i], m = Math.max(d * 0.15, 1);
    view.t0 = S.start[i] - m; view.t1 = S.start[i] + d + m;
    selectSpan(i);
  });
  $("span-search").addEventListener("input", (ev) => buildTree(ev.target.value));

  function selectSpan(i) {
    selected = i; selWindow = null; drawWaterfall();
    const name = NAMES[S.name[i]];
    let txt = `${name}  ${fmt(S.dur[i])}  at ${fmt(S.start[i])}  thread ${D.threads[S.thread[i]].name}`;
    if (S.attrs[i]) txt += "  " + Object.entries(S.attrs[i]).filter(([k]) => !k.startsWith("memory.") && k !== "stepscope.open" && k !== "stepscope.cut" && k !== "exception.message").map(([k, v]) => `${k}=${v}`).join(" ");
    if (S.error[i]) txt += `  error: ${errorText(i)}`;
    const mt = memText(i); if (mt) txt += "  · " + mt;
    $("selection").textContent = txt;
    for (const el of treeEl.querySelectorAll(".row.sel")) el.classList.remove("sel");
    const row = treeEl.querySelector(`.row[data-i="${i}"]`); if (row) row.classList.add("sel");
    setHash("span=" + S.id[i]);
    setFlame({ t0: S.start[i], t1: S.start[i] + S.dur[i], thread: S.thread[i] }, `span ${short(name)}${S.attrs[i] && S.attrs[i]["diffusion.step"] !== undefined ? " (step " + S.attrs[i]["diffusion.step"] + ")" : ""}`);
  }
  // a step or repeat: the window in the waterfall, the selection line, its flame graph, scrolled to
  function selectWindow(win, title, caption) {
    selected = -1; selWindow = win;
    for (const el of treeEl.querySelectorAll(".row.sel")) el.classList.remove("sel");
    if (win.t0 < view.t0 || win.t1 > view.t1) { const m = (win.t1 - win.t0) * 0.5; view.t0 = win.t0 - m; view.t1 = win.t1 + m; }
    drawWaterfall();
    $("selection").textContent = caption;
    setFlame(win, title);
    const sec = $("flame-section");
    if (visible(sec)) sec.scrollIntoView({ block: "start" });
  }
  // shareable state: the selection lives in the URL's fragment (#span=ID, #step=K, #repeat=K)
  function setHash(h) { try { history.replaceState(null, "", h ? "#" + h : location.pathname + location.search); } catch (e) { /* file:// in some browsers */ } }
  function restoreHash() {  // open where a shared URL points
    const m = /^#(span|step|repeat)=(-?\d+)$/.exec(location.hash);
    if (!m) return;
    const k = +m[2];
    if (m[1] === "span") { const i = S.id.indexOf(k); if (i >= 0) selectSpan(i); }
    else { const tr = document.querySelector(`#${m[1] === "step" ? "steps" : "explain-repeats"} tr.clickable[data-k="${k}"]`); if (tr) tr.click(); }
  }
