// weightgraft explore: the page. Plain JS, no build step. The page holds the whole state (prompt,
// target, grafted cells, donor, top-k), keeps it in the address (#...), and asks the server for
// predictions after every change. Text from the server is always set with textContent.
"use strict";

const $ = (id) => document.getElementById(id);
let info = null;          // /api/info: grid columns, groups, bands, component sets, donors, prompts
let view = null;          // the last /api/predict answer: tokens, roles, selections, predictions
let map = null;           // the attribution map shown over the grid, or null
let state = null;         // {text, target, id, donor, k, cells: {"group|layer|pos": donor}, pins: [{label, cells}], rival,
                          //  heads: [layers whose O and ATTN columns are split into heads],
                          //  experts: [layers whose MoE FFN column is split into experts]}; a head cell is "group.head|layer|pos",
                          //  an expert cell "FFN:expert|layer|pos"
const undoStack = [], redoStack = [];
let asked = 0;            // sequence number of the latest request, to drop stale answers
let promptEpoch = 0;      // counts prompt changes: a continuation of an earlier prompt is dropped
window.explore = { answered: 0, latency: null, painted: null, framed: 0, timings: null };  // for tests and the benchmark

// ---- state ----------------------------------------------------------------------------------
const cellKey = (group, layer, pos, head = null, expert = null) =>
  `${group}${head === null ? "" : "." + head}${expert === null ? "" : ":" + expert}|${layer === null ? "" : layer}|${pos}`;
function parseKey(key) {
  const [column, layer, pos] = key.split("|");
  const [unit, expert] = column.split(":");
  const [group, head] = unit.split(".");
  return { group, layer: layer === "" ? null : Number(layer), pos: Number(pos), head: head === undefined ? null : Number(head),
           expert: expert === undefined ? null : Number(expert) };
}
function cellsForApi(cells) {   // {"g|l|p": donor} -> [{donor, group, layer, positions, head?, expert?}]
  const columns = new Map();
  for (const [key, donor] of Object.entries(cells)) {
    const { group, layer, pos, head, expert } = parseKey(key);
    const id = `${donor}|${group}|${layer}|${head}|${expert}`;
    if (!columns.has(id)) columns.set(id, { donor, group, layer, positions: [], ...(head === null ? {} : { head }), ...(expert === null ? {} : { expert }) });
    columns.get(id).positions.push(pos);
  }
  for (const c of columns.values()) c.positions.sort((a, b) => a - b);
  return [...columns.values()];
}
function encodeState(s) {
  const p = new URLSearchParams({ t: s.text, y: s.target, d: s.donor, k: String(s.k) });
  if (s.id) p.set("id", s.id);
  const cells = cellsToList(s.cells);
  if (cells.length) p.set("c", JSON.stringify(cells));
  if (s.heads.length) p.set("h", s.heads.join(","));
  if (s.experts.length) p.set("e", s.experts.join(","));
  if (s.rival) p.set("v", s.rival);
  if (s.pins.length) p.set("p", JSON.stringify(s.pins.map((pin) => [pin.label, cellsToList(pin.cells)])));
  return "#" + p.toString();
}
// A column of the address: [donor, group, layer, positions], and a head cell's head last (an expert
// cell's: null, then its expert).
const cellsToList = (cells) => cellsForApi(cells).map((c) => [c.donor, c.group, c.layer, c.positions,
  ...(c.head === undefined ? (c.expert === undefined ? [] : [null, c.expert]) : [c.head])]);
function cellsFromList(list) {
  const cells = {};
  for (const [donor, group, layer, positions, head = null, expert = null] of list)
    for (const pos of positions) cells[cellKey(group, layer, pos, head, expert)] = donor;
  return cells;
}
const headCount = (group) => (info.heads && info.heads.groups[group]) || 0;
const expertCount = (group) => (info.experts && info.experts.groups[group]) || 0;
function expertLayers(text) {     // the address's layers split into experts (layers this model has, with experts)
  if (!info.experts || !text) return [];
  const layers = text.split(",").map(Number).filter((l) => Number.isInteger(l) && l >= 0 && l < info.num_layers);
  return [...new Set(layers)].sort((a, b) => a - b);
}
function headLayers(text) {       // the address's expanded layers: "2,5" -> [2, 5] (layers this model has, with heads)
  if (!info.heads || !text) return [];
  const layers = text.split(",").map(Number).filter((l) => Number.isInteger(l) && l >= 0 && l < info.num_layers);
  return [...new Set(layers)].sort((a, b) => a - b);
}
function decodeState(hash) {
  const p = new URLSearchParams(hash.replace(/^#/, ""));
  if (!p.has("t")) return null;
  const s = { text: p.get("t"), target: p.get("y") || "", id: p.get("id") || null,
              donor: info.donors.includes(p.get("d")) ? p.get("d") : info.donors[0],
              k: Math.max(1, Math.min(info.limits.max_top_k, Number(p.get("k")) || 5)), cells: {},
              pins: [], rival: p.get("v") || "", heads: headLayers(p.get("h")), experts: expertLayers(p.get("e")) };
  try {
    s.cells = cellsFromList(JSON.parse(p.get("c") || "[]"));
    s.pins = JSON.parse(p.get("p") || "[]").map(([label, list]) => ({ label: String(label), cells: cellsFromList(list) }));
  } catch (err) { showError("the address holds a selection this page cannot read; it was dropped"); }
  return s;
}
function commit(next) {           // a change the user made: undoable, in the address, asked for
  undoStack.push(state);
  redoStack.length = 0;
  setState(next);
}
function setState(next) {
  next = { heads: [], experts: [], ...next };  // a session file saved before heads (or experts) has none
  const promptChanged = !state || state.text !== next.text || state.target !== next.target || state.id !== next.id;
  state = next;
  if (promptChanged) {
    map = null; promptEpoch += 1; $("continuations").replaceChildren();
    for (const id of ["exact-info", "lens", "many"]) $(id).replaceChildren();  // the analyses of the old prompt
  }
  history.replaceState(null, "", encodeState(state));
  syncInputs();
  ask();
}
const withCells = (cells) => ({ ...state, cells });

// ---- talking to the server --------------------------------------------------------------------
async function answerOf(response) {  // the JSON of an answer, or an Error with its message
  let data;
  try { data = await response.json(); } catch (err) { data = { error: `the server answered ${response.status}` }; }
  if (!response.ok) throw new Error(data.error || `the server answered ${response.status}`);
  return data;
}
async function post(path, body) {
  return answerOf(await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) }));
}
const promptBody = () => ({ text: state.text, target: state.target, prompt_id: state.id });

async function ask() {
  const mine = ++asked, start = performance.now();
  $("status").textContent = "…";
  try {
    const pins = state.pins.map((pin) => ({ label: pin.label, cells: cellsForApi(pin.cells) }));
    const response = await fetch("/api/predict", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: promptBody(), cells: cellsForApi(state.cells), top_k: state.k, pins, competitor: state.rival }) });
    const fetched = performance.now();
    const data = await answerOf(response);
    if (mine !== asked) return;
    const parsed = performance.now();
    view = data;
    showError(null);
    render();
    const rendered = performance.now(), ms = rendered - start;
    window.explore.latency = ms;
    $("status").textContent = `answered in ${ms.toFixed(0)} ms`;
    // Where the time went, for the benchmark: the server's answer, its JSON, the page's DOM work,
    // and the browser's style, layout and paint up to the next frame shown.
    const timings = { fetch: fetched - start, ...serverTiming(response), parse: parsed - fetched, render: rendered - parsed };
    window.explore.timings = timings;
    requestAnimationFrame(() => setTimeout(() => {
      if (mine !== asked) return;
      timings.paint = performance.now() - rendered;
      window.explore.painted = performance.now() - start;
      window.explore.framed += 1;
      document.dispatchEvent(new Event("explore-framed"));  // a waiter needs no polling, which takes CPU from the click
    }, 0));
  } catch (err) {
    if (mine !== asked) return;
    showError(err.message);
    $("status").textContent = "";
  } finally {
    if (mine === asked) window.explore.answered += 1;
  }
}
function serverTiming(response) {  // {read, work, json}: the server's own ms, from its Server-Timing header
  const out = {};
  for (const m of (response.headers.get("Server-Timing") || "").matchAll(/(\w+);dur=([\d.]+)/g)) out[m[1]] = Number(m[2]);
  return out;
}
function showError(message) {
  $("error").hidden = !message;
  $("error").textContent = message || "";
}

// ---- drawing ------------------------------------------------------------------------------------
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v); else node.setAttribute(k, v);
  }
  for (const child of children) if (child !== null) node.append(child);
  return node;
}
const donorClass = (donor) => `d${info.donors.indexOf(donor) % 6}`;

function render() { renderTarget(); renderGrid(); renderPredictions(); renderCompare(); renderExport(); renderSelectors(); }

const sizeText = (n) => (n >= 1e9 ? `${(n / 1e9).toFixed(2)}B` : n >= 1e6 ? `${(n / 1e6).toFixed(1)}M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)}k` : String(n));
function renderModels() {         // the header: the recipient, and each donor with its grid colour (the legend)
  const m = info.models;
  const donors = m.donors.map((d) => el("span", { class: "legend", "data-donor": d.name, title: d.source || d.name },
    el("span", { class: `swatch ${donorClass(d.name)}` }), ` ${d.name} (${sizeText(d.parameters)})`));
  $("models").replaceChildren(`recipient ${m.recipient.name} (${sizeText(m.recipient.parameters)} parameters, ${info.num_layers} layers) · donors:`, ...donors);
}

// The grid is built once per prompt (its tokens and roles) and per split of layers into heads; a
// click then changes only the cells whose look changed (class, title, map colour), not ~2000
// rebuilt cells and their layout. Its clicks are handled once, on the table, by the cell's indices.
let grid = null;                  // {tokens, roles, heads, cols, tds: [[td]], shown: [[string]]} of the table drawn now
function shownColumns() {         // info.columns, each split layer's O and ATTN followed by their heads, FFN by its experts
  const out = [];
  info.columns.forEach((c, index) => {
    out.push({ ...c, head: null, expert: null, index });
    if (c.layer !== null && state.heads.includes(c.layer))
      for (let h = 0; h < headCount(c.group); h++) out.push({ ...c, head: h, expert: null, index });
    if (c.layer !== null && state.experts.includes(c.layer))
      for (let e = 0; e < expertCount(c.group); e++) out.push({ ...c, head: null, expert: e, index });
  });
  return out;
}
const unitOf = (c, unit) => (c[unit] === undefined ? null : c[unit]);  // a column's head or expert (null: the whole cell)
const columnName = (c) => `${c.group}${c.layer === null ? "" : " L" + c.layer}${unitOf(c, "head") === null ? "" : " h" + c.head}`
  + (unitOf(c, "expert") === null ? "" : " e" + c.expert);
const expertTitle = (c) => `FFN layer ${c.layer}, expert ${c.expert}: expert ${c.expert}'s weights from the donor wherever the
  recipient's router picks it; the router stays the recipient's (graft the whole FFN cell for the donor's routing); every position`;
function headTitle(c) {           // what a head column grafts
  if (c.group === "O") return `O layer ${c.layer}, head ${c.head}: what head ${c.head} writes (o's head ${c.head}); every position`;
  const kv = Math.floor(c.head / (info.heads.query / info.heads.kv));
  const shared = info.heads.kv < info.heads.query ? ` (shared with the other query heads of its group: not independent of them)` : "";
  return `ATTN layer ${c.layer}, head ${c.head}: q head ${c.head} and the key-value head it reads, k and v head ${kv}${shared}; every position`;
}
function columnHeader(c, i, start) {
  const cls = "col" + (start ? " gstart" : "") + (c.head === null ? "" : " head") + (c.expert === null ? "" : " expert");
  if (c.head !== null) return el("th", { class: cls, text: String(c.head), title: headTitle(c), "data-col": i });
  if (c.expert !== null) return el("th", { class: cls, text: String(c.expert), title: expertTitle(c), "data-col": i });
  const th = el("th", { class: cls, text: c.layer === null ? "·" : String(c.layer),
    title: `${c.group}${c.layer === null ? "" : " layer " + c.layer}: every position`, "data-col": i });
  if (c.layer !== null && headCount(c.group)) {
    const open = state.heads.includes(c.layer);
    th.append(el("button", { class: "hx", "data-layer": c.layer, text: open ? "−" : "+",
      title: `${open ? "join" : "split"} layer ${c.layer}'s O and ATTN ${open ? "again" : "into their " + headCount(c.group) + " heads"}` }));
  }
  if (c.layer !== null && expertCount(c.group)) {
    const open = state.experts.includes(c.layer);
    th.append(el("button", { class: "ex", "data-layer": c.layer, text: open ? "−" : "+",
      title: `${open ? "join" : "split"} layer ${c.layer}'s FFN ${open ? "again" : "into its " + expertCount(c.group) + " experts"}` }));
  }
  return th;
}
function buildGrid(table) {
  const cols = shownColumns();
  const first = (i) => i === 0 || cols[i - 1].group !== cols[i].group;
  const groupRow = el("tr", {}, el("th", { text: "token" }));
  const layerRow = el("tr", {}, el("th", { text: "" }));
  cols.forEach((c, i) => {
    if (first(i)) groupRow.append(el("th", { colspan: cols.filter((d) => d.group === c.group).length, class: "gstart", text: c.group }));
    layerRow.append(columnHeader(c, i, first(i)));
  });
  const body = el("tbody"), tds = [], shown = [];
  view.tokens.forEach((token, pos) => {
    const role = view.roles ? view.roles[pos] : null;
    const tr = el("tr", {}, el("th", { class: "tok", title: `position ${pos}: every column`, "data-pos": pos },
      role ? el("span", { class: `role ${role}`, text: role }) : null, token));
    const row = cols.map((c, i) => el("td", { class: "cell" + (first(i) ? " gstart" : ""), "data-group": c.group,
      "data-layer": c.layer === null ? "" : c.layer, "data-pos": pos, "data-col": i, ...(c.head === null ? {} : { "data-head": c.head }),
      ...(c.expert === null ? {} : { "data-expert": c.expert }) }));
    tr.append(...row);
    body.append(tr);
    tds.push(row);
    shown.push(row.map(() => null));
  });
  table.replaceChildren(el("thead", {}, groupRow, layerRow), body);
  return { tokens: view.tokens, roles: view.roles, heads: state.heads.join(","), experts: state.experts.join(","), cols, tds, shown };
}
function gridClick(event) {
  const button = event.target.closest("button.hx");
  if (button) { toggleHeads([Number(button.dataset.layer)]); return; }
  const expertButton = event.target.closest("button.ex");
  if (expertButton) { toggleExperts([Number(expertButton.dataset.layer)]); return; }
  const target = event.target.closest("td.cell, th.tok, th.col");
  if (!target) return;
  const d = target.dataset;
  if (target.matches("td.cell")) toggleCells([[grid.cols[Number(d.col)], Number(d.pos)]]);
  else if (target.matches("th.tok")) toggleRow(Number(d.pos));
  else toggleColumn(grid.cols[Number(d.col)]);
}
function toggleHeads(layers) {    // split these layers into heads, or join them when all are split; a view, not a graft
  const open = layers.every((l) => state.heads.includes(l));
  const heads = open ? state.heads.filter((l) => !layers.includes(l)) : [...new Set([...state.heads, ...layers])].sort((a, b) => a - b);
  state = { ...state, heads };
  history.replaceState(null, "", encodeState(state));
  renderGrid();
}
function toggleExperts(layers) {  // split these layers' FFN into experts, or join them when all are split; a view too
  const open = layers.every((l) => state.experts.includes(l));
  const experts = open ? state.experts.filter((l) => !layers.includes(l)) : [...new Set([...state.experts, ...layers])].sort((a, b) => a - b);
  state = { ...state, experts };
  history.replaceState(null, "", encodeState(state));
  renderGrid();
}
const sameList = (a, b) => a === b || (!!a && !!b && a.length === b.length && a.every((x, i) => x === b[i]));

function partial() {              // "group|layer|pos" -> donor, of whole cells some of whose heads (or experts) are grafted
  const out = {};
  for (const [key, donor] of Object.entries(state.cells)) {
    const k = parseKey(key);
    if (k.head !== null || k.expert !== null) out[cellKey(k.group, k.layer, k.pos)] = donor;
  }
  return out;
}
function mapValue(c, pos) {       // a cell's value on the map; a head's or an expert's where the map has it (else null)
  if (c.expert !== null) {
    const v = map.experts && map.experts[c.group] ? map.experts[c.group][pos][c.layer][c.expert] : null;
    return v === undefined ? null : v;
  }
  if (c.head === null) return map.values[pos][c.index];
  const v = map.heads && map.heads[c.group] ? map.heads[c.group][pos][c.layer][c.head] : null;
  return v === undefined ? null : v;
}
// The map's colour scale: symmetric, clipped at the SCALE_PERCENTILE-th percentile of the cells'
// |value| (zeros, cells known without a pass, left out), so that one cell (UNEMB at LT) does not set
// it and wash out the rest; cells beyond the clip are drawn at full colour, and the legend says so.
const SCALE_PERCENTILE = 95;
function mapScale(m) {
  if (m.scale) return m.scale;
  const sizes = m.values.flat().map(Math.abs).filter((v) => v > 0).sort((a, b) => a - b);
  const clip = sizes.length ? sizes[Math.min(sizes.length - 1, Math.floor((SCALE_PERCENTILE / 100) * sizes.length))] : 0;
  m.scale = { clip, max: sizes.length ? sizes[sizes.length - 1] : 0, beyond: sizes.filter((v) => v > clip).length };
  return m.scale;
}
const scaleText = (m) => { const s = mapScale(m);
  return `colour clipped at ±${s.clip.toPrecision(3)} (the ${SCALE_PERCENTILE}th percentile of |value|; largest ${s.max.toPrecision(3)}, ${s.beyond} cells beyond it at full colour)`; };
function renderGrid() {
  const table = $("grid");
  if (!grid || !sameList(grid.tokens, view.tokens) || !sameList(grid.roles, view.roles) || grid.heads !== state.heads.join(",")
      || grid.experts !== state.experts.join(","))
    grid = buildGrid(table);
  $("heads").textContent = state.heads.length === info.num_layers ? "join heads" : "split heads";
  const same = new Set((info.identical[state.donor] || []).map(([g, l]) => `${g}|${l === null ? "" : l}`));
  table.classList.toggle("map", !!map);
  const cols = grid.cols, part = partial();
  const unchanged = cols.map((c) => same.has(`${c.group}|${c.layer === null ? "" : c.layer}`));
  const base = cols.map((c, i) => "cell" + (i === 0 || cols[i - 1].group !== c.group ? " gstart" : "") + (c.head === null && c.expert === null ? "" : " hd"));
  const scale = map ? mapScale(map).clip : 0;
  view.tokens.forEach((token, pos) => {
    const tds = grid.tds[pos], shown = grid.shown[pos];
    cols.forEach((c, i) => {
      const donor = state.cells[cellKey(c.group, c.layer, pos, c.head, c.expert)];
      const some = c.head === null && c.expert === null && !donor ? part[cellKey(c.group, c.layer, pos)] : undefined;
      const v = map && scale > 0 ? mapValue(c, pos) : null;
      const look = `${donor || ""}|${some || ""}|${unchanged[i] ? state.donor : ""}|${v}|${scale}`;  // the title names the donor
      if (shown[i] === look) return;
      shown[i] = look;
      const td = tds[i];
      td.className = base[i] + (donor ? ` on ${donorClass(donor)}` : "") + (some ? ` part ${donorClass(some)}` : "") + (unchanged[i] ? " same" : "");
      let title = `${token.trim() || token} · ${columnName(c)}` + (donor ? ` · from ${donor}` : "") + (some ? ` · some ${expertCount(c.group) ? "experts" : "heads"} from ${some}` : "")
        + (unchanged[i] ? ` · ${state.donor}'s weights here equal the recipient's: grafting them changes nothing` : "");
      if (v !== null) {
        const a = Math.min(1, Math.abs(v) / scale);
        td.style.backgroundColor = v >= 0 ? `rgba(40,160,60,${a})` : `rgba(200,40,40,${a})`;
        title += ` · ${map.method === "exact" ? "exact effect" : "attribution"} ${v.toPrecision(3)}`;
      } else td.style.backgroundColor = "";
      td.title = title;
    });
  });
  $("map-legend").hidden = !map;
  if (map && map.method === "exact") $("map-legend").textContent = `Exact effects from ${map.donor}: each cell's measured
    change of the target's log-probability when it alone is grafted (green raises it, red lowers it); the scale and the
    first-order map's error are below the analyses' buttons; ${scaleText(map)}.`;
  else if (map) $("map-legend").textContent = `Attribution from ${map.donor} (${map.method}): each cell's estimated change of the
    target's log-probability if it alone were grafted (green raises it, red lowers it). Sum ${map.sum.toFixed(3)};
    the donor everywhere changes it by ${(map.donor_everywhere - map.recipient).toFixed(3)}; ${scaleText(map)}.`;
}

function renderPredictions() {
  const box = $("predictions");
  box.replaceChildren();
  for (const row of view.predictions) {
    const title = row.name === "graft" ? "current graft" : row.name === "recipient" ? "recipient" : `donor ${row.name}`;
    const list = el("ol");
    for (const t of row.top)
      list.append(el("li", { class: t.id === view.target_id ? "hit" : "" },
        el("span", { class: "tok", text: JSON.stringify(t.token) }), el("span", { class: "prob", text: t.prob.toFixed(4) })));
    const target = row.target
      ? el("div", { class: "target" }, `target ${JSON.stringify(view.target_token)}: rank `,
          el("span", { class: "rank", text: String(row.target.rank) }), ", p ",
          el("span", { class: "tprob", text: shownProb(row.target.prob) }))
      : el("div", { class: "target", text: "no target" });
    box.append(el("div", { class: `pred ${row.name === "graft" ? "graft" : ""}`, "data-name": row.name },
      el("h2", { text: title }), list, target));
  }
}

// Probabilities to 4 decimals; a target's below 0.001 in 3 significant digits (rank 646 is not p 0).
const shownProb = (p) => (p > 0 && p < 1e-3 ? p.toExponential(2) : p.toFixed(4));

function renderTarget() {
  const tokens = view.target_tokens || [];
  $("target-tokens").textContent = tokens.length
    ? `target tokens: ${tokens.map((t, i) => JSON.stringify(t) + (i === view.scored ? " (scored)" : "")).join(" · ")}` : "";
  $("target-note").textContent = view.target_note || "";
}

// ---- the comparison -------------------------------------------------------------------------------
const signed = (v) => (v >= 0 ? "+" : "") + v.toFixed(4);
function compareRows(cmp) {       // [label, metric key, format] of each row of the table
  const rows = [["p (first token)", "prob", shownProb], ["rank", "rank", String], ["log p", "logprob", (v) => v.toFixed(4)],
    ["Δ log p vs recipient", "delta_logprob", signed]];
  if (cmp.competitor) rows.push([`logit diff vs ${JSON.stringify(cmp.competitor.token)}`, "logit_diff", signed]);
  rows.push(["log p (whole target)", "target_logprob", (v) => v.toFixed(4)], ["Δ log p (whole) vs recipient", "delta_target_logprob", signed]);
  for (const d of cmp.donors) rows.push([`recovery of ${d}'s gain`, `recovery:${d}`, (v) => (v === null ? "–" : v.toFixed(4))]);
  return rows;
}
const metricOf = (column, key) => (key.startsWith("recovery:") ? column.recovery[key.slice(9)] : column[key]);
function renderCompare() {
  const table = $("compare"), cmp = view.compare;
  table.replaceChildren();
  $("csv").disabled = $("json").disabled = !cmp;
  if (!cmp) { table.append(el("tr", {}, el("td", { text: "the comparison scores the target: type a target" }))); return; }
  let pin = 0;
  const head = el("tr", {}, el("th", { class: "metric", text: "" }));
  for (const c of cmp.columns) {
    const th = el("th", { class: c.kind, "data-kind": c.kind }, c.kind === "donor" ? `donor ${c.name}` : c.name);
    if (c.kind === "pin") {
      const index = pin++;
      th.append(el("button", { class: "load", text: "load", title: "put this graft on the grid", onclick: () => commit(withCells({ ...state.pins[index].cells })) }),
        el("button", { class: "rename", text: "✎", title: "rename this pin", onclick: () => renamePin(index) }),
        el("button", { class: "unpin", text: "✕", title: "unpin", onclick: () => commit({ ...state, pins: state.pins.filter((_, i) => i !== index) }) }));
    }
    head.append(th);
  }
  const body = el("tbody");
  for (const [label, key, format] of compareRows(cmp)) {
    const tr = el("tr", { "data-metric": key }, el("th", { class: "metric", text: label }));
    cmp.columns.forEach((c, i) => tr.append(el("td", { class: c.kind, "data-col": i, text: format(metricOf(c, key)) })));
    body.append(tr);
  }
  table.append(el("thead", {}, head), body);
}
const PIN_NAME_LENGTH = 80;        // the server's bound on a pin's label
function pinCurrent() {           // named as the "as" box says, else by its size and donors
  const cells = Object.keys(state.cells).length, donors = [...new Set(Object.values(state.cells))];
  const named = $("pin-name").value.trim().slice(0, PIN_NAME_LENGTH);
  const label = named || `#${state.pins.length + 1}: ${cells} cells` + (donors.length ? ` from ${donors.join("+")}` : "");
  $("pin-name").value = "";
  commit({ ...state, pins: [...state.pins, { label, cells: { ...state.cells } }] });
}
function renamePin(index) {
  const name = (prompt("this pin's name", state.pins[index].label) || "").trim().slice(0, PIN_NAME_LENGTH);
  if (name) commit({ ...state, pins: state.pins.map((pin, i) => (i === index ? { ...pin, label: name } : pin)) });
}

// ---- exports of the comparison ------------------------------------------------------------------------
function comparisonJson() {
  const cmp = view.compare;
  let pin = 0;
  const cells = (c) => (c.kind === "pin" ? cellsForApi(state.pins[pin++].cells) : c.kind === "current" ? cellsForApi(state.cells) : null);
  return { prompt: state.text, target: state.target, prompt_id: state.id, target_tokens: view.target_tokens,
           scored: view.scored, competitor: cmp.competitor, donors: cmp.donors,
           columns: cmp.columns.map((c) => ({ ...c, cells: cells(c) })) };
}
function comparisonCsv() {
  const cmp = view.compare, keys = ["prob", "rank", "logprob", "delta_logprob", "logit_diff", "target_logprob", "delta_target_logprob"];
  const quote = (v) => (v === null || v === undefined ? "" : /[",\n\r]/.test(String(v)) ? `"${String(v).replace(/"/g, '""')}"` : String(v));
  const header = ["prompt", "target", "competitor", "kind", "name", ...keys, ...cmp.donors.map((d) => `recovery_${d}`)];
  const context = [state.text, state.target, cmp.competitor ? cmp.competitor.text : ""];  // rows of many prompts can be concatenated
  const lines = cmp.columns.map((c) => [...context, c.kind, c.name, ...keys.map((k) => c[k]), ...cmp.donors.map((d) => c.recovery[d])].map(quote).join(","));
  return [header.map(quote).join(","), ...lines].join("\n") + "\n";
}
function download(name, type, text) {
  const a = el("a", { href: URL.createObjectURL(new Blob([text], { type })), download: name });
  document.body.append(a); a.click(); a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
}

const setText = (id, text) => { if ($(id).textContent !== text) $(id).textContent = text; };  // unchanged text: no relayout
function renderExport() {
  setText("python", view.python);
  setText("condition", view.condition || "(none)");
  setText("condition-note", view.condition_note || "");
}

// The position buttons graft "every weight" in one of the two definitions (docs/methodology.md):
// clean (embeddings and every layer's weights; the recipient's unembedding) or the authors' (the
// token embedding and every layer's weights, and on a tied model the donor's unembedding with it,
// so the donor's unembedding scores LT wherever LT's embedding is grafted). The buttons say which.
const definitionsDiffer = () => JSON.stringify(info.component_sets.WEIGHTS) !== JSON.stringify(info.component_sets.AUTHORS_WEIGHTS);
const definition = () => (definitionsDiffer() && $("definition").value === "authors" ? "authors" : "clean");
function definitionText() {
  if (!definitionsDiffer()) return "every weight: the authors' definition and the clean one graft the same on this model (untied unembedding)";
  return definition() === "authors"
    ? `every weight as the authors grafted it: ${info.component_sets.AUTHORS_WEIGHTS.join(", ")} (the donor's unembedding with the token embedding${info.tied ? ", as on this tied model" : ""})`
    : `every weight, clean: ${info.component_sets.WEIGHTS.join(", ")} (the recipient's unembedding)`;
}
let selectorsShown = null;         // the selections (and definition) the buttons and menu were drawn for
function renderSelectors() {
  const drawn = JSON.stringify([view.selections, definition()]);
  if (drawn === selectorsShown) return;
  selectorsShown = drawn;
  const quick = $("quick"), groups = info.component_sets[definition() === "authors" ? "AUTHORS_WEIGHTS" : "WEIGHTS"];
  const suffix = definitionsDiffer() ? (definition() === "authors" ? " (authors')" : " (clean)") : "";
  $("definition-box").hidden = !definitionsDiffer();
  $("definition-note").textContent = definitionsDiffer() ? definitionText() : "";  // else in the buttons' titles
  quick.replaceChildren();
  for (const name of ["FE", "LT", "FE+LT", "(FE+LT)^C", "FE^C", "LT^C"]) {
    const positions = view.selections[name];
    quick.append(el("button", { text: name + suffix, "data-sel": name, "data-definition": definition(),
      title: positions ? `${definitionText()} at ${name} (positions ${positions.join(", ")}), all layers` : `this prompt has no ${name}`,
      onclick: () => positions && commit(withCells(select({}, positions, info.bands["all layers"], groups, true))) }));
    if (!positions) quick.lastChild.disabled = true;
  }
  const pos = $("sel-pos"), keep = pos.value;
  pos.replaceChildren(...Object.keys(view.selections).map((n) => el("option", { value: n, text: n })));
  if (view.selections[keep]) pos.value = keep;
}

// ---- selecting ----------------------------------------------------------------------------------
function select(cells, positions, layers, groups, on) {   // returns new cells: on=true grafts from state.donor
  const next = { ...cells };
  for (const c of info.columns) {
    if (!groups.includes(c.group) || (c.layer !== null && !layers.includes(c.layer))) continue;
    for (const p of positions) {
      const key = cellKey(c.group, c.layer, p);
      dropUnits(next, c, p, null);
      if (on) next[key] = state.donor; else delete next[key];
    }
  }
  return next;
}
// A whole cell and its heads (or experts) are not grafted together, nor heads or experts of one cell
// from two donors (the engine takes one donor per position, layer and component): a cell turned on
// drops the others.
function dropUnits(cells, c, pos, keep) {
  if (c.layer === null) return;
  const keys = [];
  for (let h = 0; h < headCount(c.group); h++) keys.push(cellKey(c.group, c.layer, pos, h));
  for (let e = 0; e < expertCount(c.group); e++) keys.push(cellKey(c.group, c.layer, pos, null, e));
  for (const key of keys) if (keep === null || cells[key] !== keep) delete cells[key];
}
function toggleCells(pairs) {     // all on (from this donor) -> off; else -> on
  const keys = pairs.map(([c, p]) => cellKey(c.group, c.layer, p, unitOf(c, "head"), unitOf(c, "expert")));
  const allOn = keys.every((k) => state.cells[k] === state.donor);
  const next = { ...state.cells };
  pairs.forEach(([c, p], i) => {
    if (allOn) { delete next[keys[i]]; return; }
    if (unitOf(c, "head") === null && unitOf(c, "expert") === null) dropUnits(next, c, p, null);
    else { delete next[cellKey(c.group, c.layer, p)]; dropUnits(next, c, p, state.donor); }
    next[keys[i]] = state.donor;
  });
  commit(withCells(next));
}
const toggleRow = (pos) => toggleCells(info.columns.map((c) => [c, pos]));
const toggleColumn = (c) => toggleCells(view.tokens.map((_, p) => [c, p]));
function composed(on) {
  const positions = view.selections[$("sel-pos").value] || [];
  commit(withCells(select(state.cells, positions, info.bands[$("sel-layers").value],
                          info.component_sets[$("sel-comps").value], on)));
}

// ---- the rest of the page -----------------------------------------------------------------------
function syncInputs() {
  $("text").value = state.text; $("target").value = state.target; $("dataset").value = state.id || "";
  $("donor").value = state.donor; $("topk").value = state.k; $("rival").value = state.rival;
}
function promptFromInputs() {
  const text = $("text").value, target = $("target").value;
  const id = state.id && info.prompts.find((p) => p.id === state.id && p.text === text) ? state.id : null;
  if (text === state.text && target === state.target && id === state.id) return;
  commit({ ...state, text, target, id, cells: {}, pins: [] });
}

let generateAsked = 0, attributeAsked = 0;  // the newest request of each kind: older answers are dropped
const replaced = (err) => /replaced by a newer/.test(err.message);  // the server stopped an older one
async function generate() {
  const box = $("continuations"), epoch = promptEpoch, text = state.text, mine = ++generateAsked;
  box.textContent = "…";
  try {
    const data = await post("/api/generate", { prompt: promptBody(), cells: cellsForApi(state.cells),
      max_new_tokens: Number($("new-tokens").value), generated: $("generated").value });
    if (epoch !== promptEpoch || mine !== generateAsked) return;  // the prompt changed, or a newer one was asked
    box.replaceChildren(...data.continuations.map((c) => el("div", { text: `${c.name.padEnd(10)} ${text}▸${c.text}` })));
  } catch (err) {
    if (epoch === promptEpoch && mine === generateAsked && !replaced(err)) { box.textContent = ""; showError(err.message); }
  }
}
async function attribution() {
  const mine = ++attributeAsked;
  $("status").textContent = "attributing…";
  try {
    const data = await post("/api/attribute", { prompt: promptBody(), donor: state.donor, method: $("method").value });
    if (mine !== attributeAsked) return;
    map = data;
    renderGrid();
    $("status").textContent = "";
  } catch (err) {
    if (mine !== attributeAsked) return;
    if (!replaced(err)) showError(err.message);
    $("status").textContent = "";
  }
}
async function copy(button) {
  const text = $(button.dataset.from).textContent;
  try { await navigator.clipboard.writeText(text); button.textContent = "copied"; }
  catch (err) { getSelection().selectAllChildren($(button.dataset.from)); button.textContent = "selected: Ctrl+C"; }
  setTimeout(() => { button.textContent = "copy"; }, 1500);
}

async function start() {
  const response = await fetch("/api/info");
  info = await response.json();
  renderModels();
  $("donor").replaceChildren(...info.donors.map((d) => el("option", { value: d, text: d })));
  $("dataset").append(...info.prompts.map((p) => el("option", { value: p.id, text: `${p.template}: ${p.text}` })));
  $("sel-layers").replaceChildren(...Object.keys(info.bands).map((b) => el("option", { value: b, text: b })));
  $("sel-comps").replaceChildren(...Object.keys(info.component_sets).map((c) => el("option", { value: c, text: c })));
  $("topk").max = info.limits.max_top_k; $("new-tokens").max = info.limits.max_new_tokens;

  $("dataset").onchange = () => {
    const p = info.prompts.find((q) => q.id === $("dataset").value);
    if (p) commit({ ...state, text: p.text, target: p.target, id: p.id, cells: {}, pins: [] });
    else commit({ ...state, id: null });
  };
  $("apply").onclick = promptFromInputs;
  for (const id of ["text", "target"])
    $(id).addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || id === "target")) { e.preventDefault(); promptFromInputs(); } });
  $("donor").onchange = () => commit({ ...state, donor: $("donor").value });
  $("topk").onchange = () => commit({ ...state, k: Math.max(1, Math.min(info.limits.max_top_k, Number($("topk").value) || 5)) });
  $("definition").onchange = () => renderSelectors();
  $("sel-add").onclick = () => composed(true);
  $("sel-remove").onclick = () => composed(false);
  $("clear").onclick = () => commit(withCells({}));
  // Undo and redo change the grafts, not which layers are split into heads or experts (a view).
  const splits = () => ({ heads: state.heads, experts: state.experts });
  $("undo").onclick = () => { if (undoStack.length) { redoStack.push(state); setState({ ...undoStack.pop(), ...splits() }); } };
  $("redo").onclick = () => { if (redoStack.length) { undoStack.push(state); setState({ ...redoStack.pop(), ...splits() }); } };
  document.addEventListener("keydown", (e) => {
    if (!(e.ctrlKey || e.metaKey) || e.key.toLowerCase() !== "z" || ["TEXTAREA", "INPUT"].includes(e.target.tagName)) return;
    e.preventDefault(); $(e.shiftKey ? "redo" : "undo").click();
  });
  $("pin").onclick = pinCurrent;
  const rival = () => { if ($("rival").value !== state.rival) commit({ ...state, rival: $("rival").value }); };
  $("rival").addEventListener("change", rival);
  $("rival").addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); rival(); } });
  $("csv").onclick = () => download("explore-comparison.csv", "text/csv", comparisonCsv());
  $("json").onclick = () => download("explore-comparison.json", "application/json", JSON.stringify(comparisonJson(), null, 2));
  $("generate").onclick = generate;
  $("attribute").onclick = attribution;
  $("hide-map").onclick = () => { map = null; renderGrid(); };
  $("grid").addEventListener("click", gridClick);
  $("heads").hidden = !info.heads;
  $("heads").onclick = () => toggleHeads([...Array(info.num_layers).keys()]);
  if (info.heads) {
    const { query, kv } = info.heads;
    const attn = kv === query ? "ATTN's head h is q, k and v head h" : `ATTN's head h is q head h with the key-value head it reads
      (k and v head h // ${query / kv}, shared by ${query / kv} query heads)`;
    $("heads-hint").textContent = `+ on a layer of O or ATTN splits them into heads (${query} query heads, ${kv} key-value heads):
      O's head h is what head h writes; ${attn}. A half-filled cell has some of its heads grafted.`;
  }
  if (info.experts) $("experts-hint").textContent = `+ on a layer of FFN splits this mixture-of-experts block into its
    ${info.experts.count} experts: expert e's cell grafts expert e's weights alone (Graft(..., experts=[e])). The router stays
    the recipient's unless it is grafted too (the whole FFN cell grafts router, experts and any shared expert together), so
    each token still goes to the experts the recipient's router picks: an expert changes a token only where it is picked, and
    all experts together are not the whole FFN cell.`;
  for (const b of document.querySelectorAll("button.copy")) b.onclick = () => copy(b);

  const first = info.prompts[0];
  setState(decodeState(location.hash) || { text: first ? first.text : "The capital of France is", target: first ? first.target : "",
    id: first ? first.id : null, donor: info.donors[0], k: 5, cells: {}, pins: [], rival: "", heads: [], experts: [] });
}

start().catch((err) => showError(`cannot start: ${err.message}`));
