// weightgraft explore: the slower analyses of the current graft, beside the clicks of app.js (whose
// globals it reads: info, view, state, map, post, promptBody, cellsForApi, el, showError, renderGrid).
// The exact effect map (every cell grafted alone, for real), the logit lens, and the graft over
// many dataset prompts. Each asks the server once; a newer request of the same kind replaces an
// older one (the server stops the older exact map between passes).
"use strict";

const analysisAsked = { exact: 0, lens: 0, many: 0 };
const LEAVE_ONE_OUT_SHOWN = 20;  // the leave-one-out list's first lines; "show all" shows the rest

function analysisStatus(kind, text) { $(`${kind}-status`).textContent = text; }

async function exactMap() {
  const mine = ++analysisAsked.exact, epoch = promptEpoch;
  analysisStatus("exact", "running every cell…");
  try {
    const data = await post("/api/exact", { prompt: promptBody(), donor: state.donor, cells: cellsForApi(state.cells), heads: state.heads,
      experts: state.experts });
    if (mine !== analysisAsked.exact || epoch !== promptEpoch) return;
    map = { ...data, method: "exact", sum: data.values.flat().reduce((a, b) => a + b, 0) };
    renderGrid();
    renderExactInfo(data);
    analysisStatus("exact", `${data.rows} rows in ${data.seconds.toFixed(1)} s`);
  } catch (err) {
    if (mine === analysisAsked.exact) { analysisStatus("exact", ""); if (!/replaced by a newer/.test(err.message)) showError(err.message); }
  }
}

function renderExactInfo(data) {
  const box = $("exact-info");
  const scale = mapScale(map).clip;
  const f = data.first_order;
  const bar = el("span", { class: "scale", title: "the colour of a cell's effect" });
  const parts = [
    el("span", { text: `−${scale.toPrecision(3)} ` }), bar, el("span", { text: ` +${scale.toPrecision(3)}` }),
    el("span", { text: ` (change of the target's log-probability, ${data.donor} grafted in that cell alone; unshaded: known to be 0 without a pass; ${scaleText(map)})` }),
  ];
  const agreement = f.cells ? `First-order map (${f.method}) against it over ${f.cells} cells: largest error ${f.max_abs_error.toPrecision(3)},
    mean ${f.mean_abs_error.toPrecision(3)}, correlation ${f.correlation === null ? "–" : f.correlation.toFixed(3)}.` : "";
  const rows = [el("p", {}, ...parts), el("p", { text: agreement })];
  if (data.leave_one_out) {
    const cols = info.columns, cells = data.leave_one_out.cells;  // the largest |effect| first (the server sorts)
    const item = (c) => el("li", { text: `${view.tokens[c.position]} · ${columnName({ ...cols[c.column], head: c.head, expert: c.expert })} (${c.donor}): ${c.effect >= 0 ? "+" : ""}${c.effect.toFixed(4)}` });
    const list = el("ul", { id: "leave-one-out" }, ...cells.slice(0, LEAVE_ONE_OUT_SHOWN).map(item));
    const more = cells.length > LEAVE_ONE_OUT_SHOWN ? el("button", { id: "leave-one-out-all", text: `show all ${cells.length}`,
      onclick: () => { list.replaceChildren(...cells.map(item)); more.remove(); } }) : null;
    const shown = more ? `the ${LEAVE_ONE_OUT_SHOWN} largest of ${cells.length}` : `${cells.length} cells`;
    rows.push(el("p", { text: `Leave one out of the current graft (log p ${data.leave_one_out.current_logprob.toFixed(4)}): what each cell adds given the others; ${shown}, largest |effect| first` }),
      list, more);
  }
  box.replaceChildren(...rows);
}

const LENS_COLOURS = ["#444", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#d62728"];
async function logitLens() {
  const mine = ++analysisAsked.lens, epoch = promptEpoch;
  analysisStatus("lens", "…");
  try {
    const data = await post("/api/lens", { prompt: promptBody(), cells: cellsForApi(state.cells) });
    if (mine !== analysisAsked.lens || epoch !== promptEpoch) return;
    drawLens(data);
    analysisStatus("lens", "");
  } catch (err) { if (mine === analysisAsked.lens) { analysisStatus("lens", ""); showError(err.message); } }
}

function drawLens(data) {
  const ns = "http://www.w3.org/2000/svg", w = 560, h = 220, pad = 36, right = 76;  // room on the right for the names
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`); svg.setAttribute("id", "lens-plot"); svg.setAttribute("role", "img");
  const all = data.lines.flatMap((l) => l.logprob);
  const low = Math.min(...all), high = Math.max(0, ...all), n = data.layers;
  const x = (i) => pad + (n === 1 ? 0 : (i * (w - pad - right)) / (n - 1));
  const y = (v) => h - pad - ((v - low) / (high - low || 1)) * (h - 2 * pad);
  const add = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node); return node;
  };
  add("line", { x1: pad, y1: h - pad, x2: w - right, y2: h - pad, stroke: "#999" });
  add("line", { x1: pad, y1: pad, x2: pad, y2: h - pad, stroke: "#999" });
  add("text", { x: pad, y: h - 8, "font-size": 11 }, "block 0");
  add("text", { x: w - right - 40, y: h - 8, "font-size": 11 }, `block ${n - 1}`);
  add("text", { x: 2, y: pad - 8, "font-size": 11 }, `log p(target) ${high.toFixed(1)}`);
  add("text", { x: 2, y: h - pad + 14, "font-size": 11 }, low.toFixed(1));
  data.lines.forEach((line, k) => {
    const colour = LENS_COLOURS[k % LENS_COLOURS.length];
    const points = line.logprob.map((v, i) => `${x(i)},${y(v)}`).join(" ");
    add("polyline", { points, fill: "none", stroke: colour, "stroke-width": 2, "data-name": line.name });
    add("text", { x: w - right + 4, y: y(line.logprob[n - 1]) + 4 * (k - 1), "font-size": 10, fill: colour }, line.name);
  });
  const table = el("table", { id: "lens-table" },
    el("tr", {}, el("th", { text: "" }), el("th", { text: "rank after each block" }), el("th", { text: "output: rank, log p" })),
    ...data.lines.map((l) => el("tr", {}, el("th", { text: l.name }), el("td", { text: l.rank.join(" ") }),
      el("td", { text: `${l.output_rank}, ${l.output_logprob.toFixed(3)}` }))));
  $("lens").replaceChildren(svg, table, el("p", { class: "hint", text: `Read through ${data.readout} at the scoring position.` }));
}

async function manyPrompts() {
  const mine = ++analysisAsked.many, epoch = promptEpoch;
  analysisStatus("many", "scoring…");
  try {
    const template = $("many-template").value || null;
    const data = await post("/api/many", { prompt: promptBody(), cells: cellsForApi(state.cells),
      count: Number($("many-count").value), template });
    if (mine !== analysisAsked.many || epoch !== promptEpoch) return;
    renderMany(data);
    analysisStatus("many", "");
  } catch (err) { if (mine === analysisAsked.many) { analysisStatus("many", ""); showError(err.message); } }
}

function renderMany(data) {
  const fmt = (v) => (v === null || v === undefined || Number.isNaN(v) ? "–" : v.toFixed(3));
  const head = el("tr", {}, el("th", { text: "" }), ...data.columns.map((c) => el("th", { text: c.name })));
  const top = el("tr", {}, el("th", { text: "top-5" }), ...data.columns.map((c) => el("td", { text: `${fmt(c.top5)} [${fmt(c.low)}, ${fmt(c.high)}]` })));
  const rows = [head, top];
  const graft = data.columns[data.columns.length - 1];
  for (const [donor, r] of Object.entries(graft.recovery || {})) {
    rows.push(el("tr", {}, el("th", { text: `recovery of ${donor}'s gain` }),
      ...data.columns.map((c) => el("td", { text: c === graft ? (r.value === null ? `– (${r.reason})` : `${fmt(r.value)} [${fmt(r.low)}, ${fmt(r.high)}]`) : "" }))));
  }
  const skipped = Object.entries(data.skipped).map(([why, n]) => `${n} skipped (${why})`).join("; ");
  const what = `${data.prompts} prompts of ${data.facts || 0} facts` + (data.template ? `, template ${data.template}` : "")
    + `; graft positions as roles: ${data.positions.length ? data.positions.join(", ") : "nothing grafted"}; ${data.interval || ""}`;
  $("many").replaceChildren(el("table", { id: "many-table" }, ...rows), el("p", { class: "hint", text: what + (skipped ? `. ${skipped}` : "") }));
}

function startAnalysis() {
  $("exact").onclick = exactMap;
  $("lens-button").onclick = logitLens;
  $("many-button").onclick = manyPrompts;
  const templates = [...new Set(info.prompts.map((p) => p.template))].sort();
  $("many-template").append(...templates.map((t) => el("option", { value: t, text: t })));
}

(function waitForInfo() {   // app.js fetches /api/info first
  if (typeof info !== "undefined" && info) startAnalysis(); else setTimeout(waitForInfo, 20);
})();
