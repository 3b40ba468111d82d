// stepscope report, core: the view model (docs/report-view-model.md) and its version check, the aliases of its
// parts, the phases, and the helpers every part uses (formatting, escaping, colours, tooltip, canvas sizing, tables).
// Part of report.js: stepscope.output.html.html joins the SCRIPT_PARTS in order inside one function (one shared scope).
  const VIEW_VERSION = 1;  // the view model this script reads (output/html/view.py VIEW_VERSION)
  const D = (function load() { try { return JSON.parse(document.getElementById("stepscope-data").textContent); } catch (e) { return null; } })();
  if (!D || D.version !== VIEW_VERSION) {  // another stepscope wrote the data: one line that says so, not a broken page
    const box = document.getElementById("view-error");
    for (const s of document.querySelectorAll("body > section")) s.hidden = true;
    box.textContent = `Cannot show this report: its data is view model version ${D && D.version != null ? D.version : "(none)"}, the page's script reads version ${VIEW_VERSION} (write it again with \`stepscope report\`).`;
    box.hidden = false;
    return;
  }
  const S = D.spans, P = D.profile, NAMES = D.names;
  const NS = S.id.length, NP = P.t.length, NN = P.parent.length;
  // a large run: the spans shown one by one are some of them (D.aggregated says which), the rest is density
  const AGG = D.aggregated, DEN = D.density;
  const ROW = 16, DPR = window.devicePixelRatio || 1, LABEL_W = 190;
  const tip = document.getElementById("tooltip");
  const PAGE = document.body.dataset.page;
  const $ = (id) => document.getElementById(id);

  const fmt = (us) => us >= 1e6 ? (us / 1e6).toFixed(2) + " s" : us >= 1e3 ? (us / 1e3).toFixed(1) + " ms" : us.toFixed(0) + " us";
  const fmtNs = (ns) => ns == null ? "-" : fmt(ns / 1e3);
  const fmtB = (b) => b == null ? "-" : b >= 1073741824 ? (b / 1073741824).toFixed(2) + " GiB" : b >= 1048576 ? (b / 1048576).toFixed(1) + " MiB" : b >= 1024 ? (b / 1024).toFixed(1) + " KiB" : Math.round(b) + " B";
  const fmtMiB = (m) => m == null ? "-" : fmtB(m * 1048576);
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
  // flame-graph colours by kind (D.kinds: your code, diffusers/transformers, torch, other libraries, stdlib,
  // start-up, thread); the lightness varies a little by name so that neighbours stay apart
  const KIND_HSL = [[28, 85, 60], [275, 45, 70], [205, 62, 64], [140, 40, 60], [45, 18, 74], [0, 0, 82], [220, 15, 88]];
  const KINDS = D.kinds || [];
  function kindColor(kind, name, faded) {
    const [h, s, l] = KIND_HSL[kind] || KIND_HSL[3];
    const dl = (hue(name) % 9) - 4;
    return faded ? `hsla(${h},${s}%,${Math.min(l + 12, 95)}%,0.35)` : `hsl(${h},${s}%,${l + dl}%)`;
  }
  function showTip(ev, text) { tip.textContent = text; tip.hidden = false; tip.style.left = Math.min(ev.clientX + 12, window.innerWidth - 420) + "px"; tip.style.top = (ev.clientY + 14) + "px"; }
  function hideTip() { tip.hidden = true; }
  // Canvas widths are read once per layout (after the tables are built, before the first draw, and on
  // resize): reading clientWidth after a canvas's height changed forces the whole page to be laid out again.
  const widths = new Map();
  function canvasWidth(cv) { let w = widths.get(cv); if (!w) { w = cv.clientWidth; if (w) widths.set(cv, w); } return w; }
  function sizeCanvas(cv, cssH) { const w = canvasWidth(cv); if (cv.style.height !== cssH + "px") cv.style.height = cssH + "px"; cv.width = Math.round(w * DPR); cv.height = Math.round(cssH * DPR); const g = cv.getContext("2d"); g.setTransform(DPR, 0, 0, DPR, 0, 0); return [g, w]; }
  function visible(el) { return !!(el && el.offsetParent !== null); }

  const R = D.run;

  // ---- phases: start-up (imports, model building) / traced work / shutdown
  const PH = D.phases && D.phases.split ? D.phases : null;
  let spanEnd = R.wall_us;
  for (let i = 0; i < NS; i++) spanEnd = Math.max(spanEnd, S.start[i] + S.dur[i]);
  if (NP) spanEnd = Math.max(spanEnd, P.t[NP - 1]);
  const WORK = PH ? { t0: PH.work_t0, t1: PH.work_t1 } : null;
  // what the work starts at ("the first traced call", or a well-known entry point's first sample), and its name
  const WORK_FROM = (D.phases && D.phases.work_from) || "the first traced call";
  const WORK_NAME = D.phases && D.phases.entry ? "work" : "traced work";
  // a run with no work window: its imports are still start-up, left out of the flame graph and top functions
  const IMPORTS_APART = !PH && D.phases && D.phases.startup_sampled_us > 0;
  // a window of `stepscope capture`: no start-up or shutdown, the program ran before and goes on after; the time
  // before the work is the app idle or serving (analysis.phases)
  const CAPTURE = !!(D.phases && D.phases.capture);
  const BEFORE = CAPTURE ? `before ${WORK_FROM}` : "start-up";
  const BEFORE_WHAT = CAPTURE ? "the app idle or serving" : `imports, model building: before ${WORK_FROM}`;
  const AFTER = CAPTURE ? `after the ${WORK_NAME}` : "shutdown";
  const cap1 = (t) => t[0].toUpperCase() + t.slice(1);

  const E = D.explain, SM = D.summary, ST = SM.steps;
  const DV = D.device, ML = D.memory;
  function lowerBound(arr, v) { let lo = 0, hi = arr.length; while (lo < hi) { const m = (lo + hi) >> 1; if (arr[m] < v) lo = m + 1; else hi = m; } return lo; }
  function table(el, head, rowsHtml, cls) { el.innerHTML = `<table${cls ? ` class="${cls}"` : ""}><thead><tr>${head.map((h) => `<th>${esc(h)}</th>`).join("")}</tr></thead><tbody>${rowsHtml.join("")}</tbody></table>`; }
