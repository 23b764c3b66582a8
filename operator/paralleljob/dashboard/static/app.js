// The web view's front end: the picture from /api/stream (server-sent events: one snapshot, then patches)
// drawn on one <canvas>; pan and zoom by d3-zoom. Racks are drawn as one bar of their GPUs' states until a
// GPU would be at least MIN_CELL_PX on screen; then nodes and GPUs, only for the racks in sight. No DOM
// node per GPU: at 100k GPUs a frame is a few thousand rectangles.
"use strict";

const CELL = 10, GAP = 2, ROW = CELL + GAP, HEAD = 16, PAD = 8, LABEL = 84, MIN_CELL_PX = 4;
const STATE = { f: ["free", "#cfe3cf"], u: ["used", null], c: ["closed node", "#a3a3a3"],
                g: ["degraded", "#f2a900"], d: ["drained", "#9c27b0"], x: ["failed", "#d32f2f"] };
const DOWN = "#d32f2f";
// Job colours: none red, amber or purple (those say failed, degraded, drained), and neighbours of another
// hue, so the first jobs (the usual few) never come out as two blues: blue, green, pink, brown, teal, olive...
const PALETTE = ["#1f77b4", "#2ca02c", "#e377c2", "#8c564b", "#17becf", "#bcbd22", "#005f73", "#ff70a6",
                 "#6a994e", "#b08968", "#3a86ff", "#2a9d8f", "#d4a373", "#52b788", "#457b9d", "#0096c7"];
const OTHER = "#4a4a4a";  // a pod or claim no ParallelJob explains

const pj = window.pj = { state: null, seq: -1, painted: null, snapshots: 0, patches: 0, layout: null,
                          selected: null, by: "stage" };
const canvas = document.getElementById("map");
const ctx = canvas.getContext("2d");
let transform = d3.zoomIdentity, frame = 0;

// The selected job's stages, replicas or TP groups (the other jobs' GPUs are grey meanwhile): one colour of
// its own each, never red, amber or purple; more than the palette holds: a blue-to-yellow ramp (cividis).
function rankColour(i, count) {
  return count <= PALETTE.length ? PALETTE[i] : d3.interpolateCividis(count > 1 ? i / (count - 1) : 0.5);
}
function jobColour(i) { return i < 0 ? OTHER : PALETTE[i % PALETTE.length]; }

// ---- layout: racks (the lowest domain) on a grid, nodes as rows, GPUs as cells --------------------------
function layout(state) {
  const racks = state.domains.map((name, i) => ({ name, index: i, nodes: [] }));
  for (const name of Object.keys(state.nodes).sort(natural)) racks[state.nodes[name].domain].nodes.push(name);
  // racks of one spine (zone, ...) side by side: sort by the path read from the top level down
  const top = r => r.name.split("/").reverse().join("/");
  const live = racks.filter(r => r.nodes.length).sort((a, b) => natural(top(a), top(b)));
  const maxGpus = Math.max(1, ...Object.values(state.nodes).map(n => n.states.length));
  const maxNodes = Math.max(1, ...live.map(r => r.nodes.length));
  const w = PAD * 2 + maxGpus * ROW + LABEL, h = HEAD + PAD + maxNodes * ROW;
  const cols = Math.max(1, Math.ceil(Math.sqrt(live.length * h / w * 1.6)));
  const where = {};
  live.forEach((r, i) => {
    r.x = (i % cols) * (w + PAD); r.y = Math.floor(i / cols) * (h + PAD); r.w = w; r.h = h;
    r.nodes.forEach((n, j) => { where[n] = { rack: r, row: j }; });
  });
  return { racks: live, where, w: cols * (w + PAD), h: Math.ceil(live.length / cols) * (h + PAD), maxGpus };
}
const natural = new Intl.Collator(undefined, { numeric: true }).compare;  // gpu-node-2 before gpu-node-10

function cellXY(name, gpu) {
  const at = pj.layout.where[name];
  if (!at) return null;
  return [at.rack.x + PAD + gpu * ROW, at.rack.y + HEAD + at.row * ROW];
}

// ---- colours of the selected job's ranks --------------------------------------------------------------
function selectedCells() {
  const job = pj.state && pj.state.jobs.find(j => j.key === pj.selected);
  const cells = new Map();
  cells.slots = new Map();  // node -> its slots (TP groups) of the selected job, to outline them
  if (!job) return cells;
  // a slot is one TP group's GPUs on one pod: a whole TP group, or its part on one NVL72 tray
  job.slots.forEach((s, k) => {
    if (!cells.slots.has(s.node)) cells.slots.set(s.node, []);
    cells.slots.get(s.node).push(s);
    const [group, count] = colouredBy(job, s);
    s.gpuIndices.forEach((g, i) => cells.set(s.node + "/" + g, { hue: rankColour(group, count),
                                                                  rank: s.ranks[i], slot: k, s }));
  });
  return cells;
}
// Which colour of how many a slot gets: by its PP stage, its DP replica or its TP group (d x pp + p).
function colouredBy(job, s) {
  if (pj.by === "stage") return [s.stage, job.shape.pp];
  if (pj.by === "replica") return [s.replica, job.shape.dp];
  return [s.group, job.shape.pp * job.shape.dp];
}
// The legend of the selected job's colours, in its panel: one swatch per stage, replica or TP group.
function rankLegend() {
  const box = document.getElementById("ranklegend");
  const job = pj.state && pj.state.jobs.find(j => j.key === pj.selected);
  if (!box) return;
  if (!job || !job.slots.length) { box.innerHTML = ""; return; }
  const count = colouredBy(job, job.slots[0])[1], name = { stage: "PP", replica: "DP", group: "TP group" }[pj.by];
  const label = i => pj.by === "group" ? `${name} ${i} (DP ${Math.floor(i / job.shape.pp)} · PP ${i % job.shape.pp})` : `${name} ${i}`;
  box.innerHTML = Array.from({ length: count }, (_, i) =>
    `<span class="key"><span class="sw" style="background:${rankColour(i, count)}"></span>${esc(label(i))}</span>`).join("");
}

function gpuColour(node, i, sel) {
  const s = node.states[i];
  if (s === "u" || (node.holders[i] >= 0 && s !== "x" && s !== "g" && s !== "d")) {
    const h = pj.state.holders[node.holders[i]];
    if (pj.selected) {
      const mine = sel.get(node.name + "/" + i);
      return mine ? mine.hue : (h ? "#dfe3ea" : STATE.f[1]);
    }
    return h ? jobColour(h.colour) : OTHER;
  }
  return STATE[s][1];
}

// ---- drawing --------------------------------------------------------------------------------------------
function draw() {
  frame = 0;
  const t0 = performance.now();
  const dpr = window.devicePixelRatio || 1, W = canvas.clientWidth, H = canvas.clientHeight;
  if (canvas.width !== W * dpr || canvas.height !== H * dpr) { canvas.width = W * dpr; canvas.height = H * dpr; }
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, W, H);
  if (!pj.state || !pj.layout) return;
  const k = transform.k, detailed = k * CELL >= MIN_CELL_PX, sel = selectedCells();
  ctx.save();
  ctx.translate(transform.x, transform.y); ctx.scale(k, k);
  const x0 = -transform.x / k, y0 = -transform.y / k, x1 = x0 + W / k, y1 = y0 + H / k;
  // text at most 12 px on screen however far in
  ctx.font = `${Math.min(10, 12 / k)}px system-ui, sans-serif`; ctx.textBaseline = "top";
  for (const r of pj.layout.racks) {
    if (r.x > x1 || r.y > y1 || r.x + r.w < x0 || r.y + r.h < y0) continue;
    const down = r.nodes.some(n => !pj.state.nodes[n].ready);
    ctx.fillStyle = "#f7f8fa"; ctx.fillRect(r.x, r.y, r.w, r.h);
    ctx.lineWidth = (down ? 3 : 1) / Math.min(k, 1); ctx.strokeStyle = down ? DOWN : "#c5c9d3";
    ctx.strokeRect(r.x, r.y, r.w, r.h);
    if (k * 10 >= 7) { ctx.fillStyle = "#333"; ctx.fillText(r.name, r.x + PAD, r.y + 3, r.w - 2 * PAD); }
    if (detailed) drawNodes(r, sel, k); else drawRackBar(r, sel);
  }
  ctx.restore();
  pj.painted = { seq: pj.seq, at: Date.now(), ms: performance.now() - t0, detailed };
}

function drawNodes(r, sel, k) {
  r.nodes.forEach((name, j) => {
    const n = pj.state.nodes[name], y = r.y + HEAD + j * ROW;
    if (!n.ready) { ctx.fillStyle = DOWN; ctx.fillRect(r.x + 2, y - 1, r.w - 4, ROW); }
    for (let i = 0; i < n.states.length; i++) {
      ctx.fillStyle = gpuColour(n, i, sel);
      ctx.fillRect(r.x + PAD + i * ROW, y, CELL, CELL);
      if (n.states[i] === "x" && k * CELL >= 8) {  // failed: also a cross, colour is not the only cue
        ctx.strokeStyle = "#fff"; ctx.lineWidth = 1.5 / k; ctx.beginPath();
        ctx.moveTo(r.x + PAD + i * ROW + 2, y + 2); ctx.lineTo(r.x + PAD + i * ROW + CELL - 2, y + CELL - 2);
        ctx.moveTo(r.x + PAD + i * ROW + CELL - 2, y + 2); ctx.lineTo(r.x + PAD + i * ROW + 2, y + CELL - 2);
        ctx.stroke();
      }
    }
    for (const slot of sel.slots.get(name) || []) {  // each TP group of the selected job, outlined
      if (!slot.gpuIndices.length) continue;  // a MIG slice the device plugin placed: on no GPU drawn here
      const lo = Math.min(...slot.gpuIndices), hi = Math.max(...slot.gpuIndices);
      ctx.strokeStyle = "#111"; ctx.lineWidth = 1.5 / Math.min(k, 1.5);
      ctx.strokeRect(r.x + PAD + lo * ROW - 1, y - 1, (hi - lo) * ROW + CELL + 2, CELL + 2);
    }
    if (k * CELL >= 9) {
      ctx.fillStyle = n.ready ? "#333" : "#fff";
      ctx.fillText(name + (n.ready ? "" : " DOWN"), r.x + PAD + n.states.length * ROW + 3, y, LABEL - 4);
    }
  });
}

function drawRackBar(r, sel) {
  // one bar per rack: its GPUs sorted by what they show, so a rack's share of each job is its length;
  // counted again only for racks a patch touched (or after the colours changed)
  if (!r.counts) {
    r.counts = new Map();
    for (const name of r.nodes) {
      const n = pj.state.nodes[name];
      for (let i = 0; i < n.states.length; i++) {
        const c = n.ready ? gpuColour(n, i, sel) : DOWN;
        r.counts.set(c, (r.counts.get(c) || 0) + 1);
      }
    }
  }
  const counts = r.counts;
  const total = [...counts.values()].reduce((a, b) => a + b, 0) || 1;
  const x = r.x + PAD, y = r.y + HEAD, w = r.w - 2 * PAD, h = r.h - HEAD - PAD;
  let at = 0;
  for (const [c, n] of [...counts.entries()].sort((a, b) => b[1] - a[1])) {
    ctx.fillStyle = c; ctx.fillRect(x + (at / total) * w, y, Math.max(n / total * w, 0.5), h); at += n;
  }
}

function redraw() { if (!frame) frame = requestAnimationFrame(draw); }
function recount(racks) { for (const r of racks || (pj.layout ? pj.layout.racks : [])) r.counts = null; }

// ---- side panels ----------------------------------------------------------------------------------------
// Milliseconds as every figure of the page shows them: the same rounding for a cost and its lower bound.
function ms(x) { return x == null ? "" : Number(x).toFixed(Math.abs(x) >= 100 ? 1 : Math.abs(x) >= 1 ? 2 : 4); }
function esc(s) { return String(s ?? "").replace(/[&<>"]/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]); }

// A job's moves that free room, from the snapshot's brief (edge/status/moveplans JobMoves.brief): its plan, or
// the last time it was moved for another job and the work that lost.
function movesBrief(m) {
  if (!m) return "";
  const out = [];
  if (m.plan) out.push(`move plan: ${m.plan.moves} move(s) free ${m.plan.domain}, ${m.plan.heldNodes} node(s) held, planned loss ${m.plan.lostGpuSeconds} GPU-s`);
  if (m.lastRoomMove) out.push(`moved for ${m.lastRoomMove.for} (${m.lastRoomMove.domain}) at ${m.lastRoomMove.time}, lost ${m.lastRoomMove.lostGpuSeconds} GPU-s`);
  return out.map(t => `<div class="why moves">${esc(t)}</div>`).join("");
}

// The panel's moves (describe's JobMoves.to_json): the plan move by move, the last "no", the last move.
function movesPanel(m) {
  if (!m || (!m.plan && !m.check && !m.lastRoomMove)) return "";
  let html = "<h2>Moves</h2>";
  if (m.plan) {
    html += `<p>${esc(m.plan.message)}</p><p class="why">since ${esc(m.plan.createdAt)}; held: ${esc(m.plan.heldNodes.join(", "))}</p>` +
      "<table><tr><th>job</th><th>when</th><th>due</th><th>lost GPU-s</th></tr>" +
      m.plan.moves.map(x => `<tr><td>${esc(x.job)}</td><td>${esc(x.when)}</td><td>${esc(x.at)}</td><td>${esc(x.lostGpuSeconds)}</td></tr>`).join("") + "</table>";
  }
  if (m.check) html += `<p class="why">checked ${esc(m.check.checkedAt)}: ${esc(m.check.answer)}</p>`;
  if (m.lastRoomMove) {
    const l = m.lastRoomMove;
    html += `<p>last moved for room: at ${esc(l.time)} for ${esc(l.for)} (${esc(l.domain)}), lost ${esc(l.lostGpuSeconds)} GPU-seconds</p>`;
  }
  return html;
}

function panels() {
  const s = pj.state, t = s.totals, down = Object.values(s.nodes).filter(n => !n.ready).length;
  document.getElementById("summary").textContent =
    `${Object.keys(s.nodes).length} nodes (${down} down) · ${t.total} GPUs: ${t.used} used, ${t.free} free, ` +
    `${t.unhealthy} failed, ${t.degraded} degraded, ${t.drained} drained · ${s.jobs.length} jobs`;
  document.getElementById("jobs").innerHTML = "<tr><th></th><th>job</th><th>phase</th><th>TP×PP×DP</th><th>cost ms</th></tr>" +
    s.jobs.map(j => `<tr class="job${j.key === pj.selected ? " sel" : ""}" data-key="${esc(j.key)}">` +
      `<td><span class="sw" style="background:${j.colour >= 0 ? jobColour(j.colour) : "#fff"}"></span></td>` +
      `<td>${esc(j.key)}${j.why ? `<div class="why">${esc(j.why)}</div>` : ""}${movesBrief(j.moves)}</td><td>${esc(j.phase)}</td>` +
      `<td>${j.shape.tp}×${j.shape.pp}×${j.shape.dp}</td><td>${ms(j.cost.totalMs)}</td></tr>`).join("");
  document.getElementById("queues").innerHTML = "<tr><th>queue</th><th>holding</th><th>guaranteed</th><th>waiting (why)</th></tr>" +
    s.queues.map(q => `<tr><td>${esc(q.name)}</td><td>${q.holding} GPUs, ${q.running} jobs</td><td>${q.guaranteed}` +
      `${q.max != null ? ` (max ${q.max})` : ""}</td><td>${q.waiting.map(w => `${esc(w.key)} (${w.gpus})<div class="why">${esc(w.why)}</div>`).join("") || "—"}</td></tr>`).join("");
  document.getElementById("failures").innerHTML = s.failures.slice(-40).reverse().map(f =>
    `<li><span class="bad">${esc(f.reason)}</span> ${esc(f.object)}${f.count > 1 ? ` ×${f.count}` : ""}` +
    `<div class="why">${esc(f.time)} ${esc(f.message)}</div></li>`).join("") || "<li>none</li>";
}

async function showDetail() {
  const box = document.getElementById("detailbox");
  if (!pj.selected) { box.hidden = true; return; }
  box.hidden = false;
  document.getElementById("detailtitle").textContent = pj.selected;
  const [ns, name] = pj.selected.split("/");
  const res = await fetch(`/api/job/${encodeURIComponent(ns)}/${encodeURIComponent(name)}`);
  if (!res.ok) { document.getElementById("detail").textContent = (await res.json()).error; return; }
  const d = pj.detail = await res.json();
  const c = d.cost || {};
  const rows = [["phase", d.phase + (d.message ? ` — ${d.message}` : "")], ["shape", `${d.shape} = ${d.gpus} GPUs`],
    ["cost per step", c.totalMs != null ? `${ms(c.totalMs)} ms (TP ${ms(c.tpMs)}, PP ${ms(c.ppMs)}, DP ${ms(c.dpMs)}; bottleneck ${c.bottleneck})` : "not placed"],
    ["lower bound", d.lowerBoundMs != null ? `${ms(d.lowerBoundMs)} ms` + (c.totalMs && d.lowerBoundMs > 0 ? ` (placed at ${(c.totalMs / d.lowerBoundMs).toFixed(2)}×)` : "") : (d.lowerBoundWhy || "—")],
    ["traffic crosses", d.levels.map(l => `${l.level}: ${(l.bytesPerStep / 1e9).toFixed(2)} GB/step @ ${l.bandwidthGBps} GB/s`).join("; ") || "—"],
    ["queue / priority", `${d.queue} / ${d.priority}`], ["recovery", `${d.strategy}, ${d.restarts} restarts`],
    ["last failure", d.last_failure && d.last_failure.kind ? `${d.last_failure.kind} -> ${d.last_failure.action}: ${d.last_failure.message || ""}` : "none"]];
  const conds = (d.conditions || []).map(x => `<tr><td>${esc(x.type)}=${esc(x.status)}</td><td>${esc(x.reason)}: ${esc(x.message)}</td></tr>`).join("");
  // on a DRA cluster: the devices the pod's ResourceClaims hold (name=UUID, hover for the claims)
  const devs = p => p.devices && p.devices.length ? `<td title="${esc("claims: " + p.claims.join(", "))}">${esc(p.devices.map((n, i) => p.uuids[i] ? `${n}=${p.uuids[i]}` : n).join(" "))}<br><small>${esc(p.claims.join(", "))}</small></td>` : "";
  // a tray pod holds ranks of one or more TP groups: each (replica, stage) it holds
  const groupsOf = p => (p.groups && p.groups.length ? p.groups : [[p.replica, p.stage]]).map(([r, s]) => `DP ${r} · PP ${s}`).join(", ");
  // each pod's phase as describe gives it ("Succeeded (pod deleted)": a finished rank whose pod the pod GC took)
  const pods = (d.pods || []).map(p => `<tr><td>${esc(p.node)}</td><td>${groupsOf(p)}</td><td>GPUs ${p.gpu_indices.join(",")}</td><td>ranks ${p.ranks[0]}–${p.ranks[p.ranks.length - 1]}</td><td>${esc(p.pod_phase || "no pod")}</td>${devs(p)}</tr>`).join("");
  const repairs = (d.repairs || []).map(e => `<li>${esc(e.time)} ${esc(e.reason)}: ${esc(e.message)}</li>`).join("");
  const events = (d.events || []).slice(-12).map(e => `<li>${esc(e.time)} <b>${esc(e.reason)}</b> ${esc(e.message)}</li>`).join("");
  document.getElementById("detail").innerHTML =
    `<table class="kv">${rows.map(([a, b]) => `<tr><td>${a}</td><td>${esc(b)}</td></tr>`).join("")}</table>` +
    (pods ? `<h2>Ranks</h2><table id="ranks">${pods}</table>` : "") + movesPanel(d.moves) + (conds ? `<h2>Conditions</h2><table>${conds}</table>` : "") +
    `<h2>Repairs</h2><ul>${repairs || "<li>none</li>"}</ul><h2>Events</h2><ul>${events || "<li>none</li>"}</ul>`;
}

function select(key) {
  pj.selected = pj.selected === key ? null : key;
  recount();
  panels(); redraw(); rankLegend(); showDetail();
}

document.getElementById("jobs").addEventListener("click", e => {
  const row = e.target.closest("tr.job"); if (row) select(row.dataset.key);
});
document.querySelectorAll("input[name=by]").forEach(el => el.addEventListener("change", () => { pj.by = el.value; recount(); redraw(); rankLegend(); }));

function legend() {
  document.getElementById("legend").innerHTML = Object.values(STATE).filter(([, c]) => c)
    .map(([n, c]) => `<i style="background:${c}"></i>${n}`).join("") +
    `<i style="background:${PALETTE[0]}"></i><i style="background:${PALETTE[1]}; margin-left:0"></i>` +
    `<i style="background:${PALETTE[2]}; margin-left:0"></i>job (one colour each)<i style="background:${DOWN}"></i>node down`;
}

// ---- hover and click on the map -------------------------------------------------------------------------
function hit(px, py) {
  const [x, y] = transform.invert([px, py]);
  for (const r of pj.layout ? pj.layout.racks : []) {
    if (x < r.x || y < r.y || x > r.x + r.w || y > r.y + r.h) continue;
    const row = Math.floor((y - r.y - HEAD) / ROW), gpu = Math.floor((x - r.x - PAD) / ROW);
    const name = r.nodes[row];
    if (transform.k * CELL < MIN_CELL_PX || !name) return { rack: r };
    const n = pj.state.nodes[name];
    return { rack: r, node: n, gpu: gpu >= 0 && gpu < n.states.length ? gpu : null };
  }
  return null;
}
canvas.addEventListener("mousemove", e => {
  const h = hit(e.offsetX, e.offsetY), tip = document.getElementById("hover");
  if (!h) { tip.style.display = "none"; return; }
  let text = h.rack.name;
  if (h.node) {
    const n = h.node;
    text = `${n.name} (${h.rack.name})\n${n.ready ? "Ready" : "NotReady"}${n.schedulable ? "" : ", closed: " + n.why}`;
    if (h.gpu != null) {
      const holder = pj.state.holders[n.holders[h.gpu]];
      text += `\nGPU ${h.gpu}: ${STATE[n.states[h.gpu]][0]}${holder ? " by " + holder.key : ""}`;
      const mine = selectedCells().get(n.name + "/" + h.gpu);
      if (mine) text += ` · rank ${mine.rank} (DP ${mine.s.replica} · PP ${mine.s.stage}, pod ${mine.s.pod})`;
    }
    if (n.notes.length) text += "\n" + n.notes.join("\n");
  }
  tip.textContent = text; tip.style.display = "block";
  tip.style.left = (e.offsetX + 14) + "px"; tip.style.top = (e.offsetY + 14) + "px";
});
canvas.addEventListener("click", e => {
  const h = hit(e.offsetX, e.offsetY);
  if (h && h.node && h.gpu != null) {
    const holder = pj.state.holders[h.node.holders[h.gpu]];
    if (holder && holder.colour >= 0) select(holder.key);
  }
});

const zoom = d3.zoom().scaleExtent([0.01, 12]).on("zoom", e => { transform = e.transform; redraw(); });
d3.select(canvas).call(zoom);

function fit() {
  const W = canvas.clientWidth, H = canvas.clientHeight, L = pj.layout;
  const k = Math.min(W / (L.w + PAD), H / (L.h + PAD), 2.5);
  d3.select(canvas).call(zoom.transform, d3.zoomIdentity.translate(PAD, PAD).scale(k));
}
// Zoom so a node's GPUs are readable (for people, and for the tests that look at one GPU's pixels).
pj.focus = (name, k = 3) => {
  const [x, y] = cellXY(name, 0);
  d3.select(canvas).call(zoom.transform, d3.zoomIdentity.translate(canvas.clientWidth / 3 - x * k, canvas.clientHeight / 3 - y * k).scale(k));
  draw();
};
// Where a GPU's cell is on screen, in CSS pixels of the canvas (centre).
pj.cellOnScreen = (name, gpu) => { const p = cellXY(name, gpu); return p && transform.apply([p[0] + CELL / 2, p[1] + CELL / 2]); };
// A point inside a node's row, right of its label (red when the node is down).
pj.rowOnScreen = name => { const at = pj.layout.where[name]; return at && transform.apply([at.rack.x + at.rack.w - 5, at.rack.y + HEAD + at.row * ROW + CELL / 2]); };
// A point on the left edge of a node's rack (its frame: red while a node in it is down).
pj.rackEdgeOnScreen = name => { const r = pj.layout.where[name].rack; return transform.apply([r.x, r.y + r.h / 2]); };
pj.colourOf = { state: s => STATE[s][1], job: i => jobColour(i), down: DOWN, rank: (i, n) => rankColour(i, n) };

// ---- the stream -----------------------------------------------------------------------------------------
function apply(kind, data) {
  if (kind === "snapshot") {
    const first = !pj.state;
    pj.state = data; pj.snapshots++;
    pj.layout = layout(pj.state);
    if (first) fit();
  } else {
    var was = selectedJob();
    const s = pj.state, newNodes = Object.keys(data.nodes).some(n => !(n in s.nodes));
    Object.assign(s.nodes, data.nodes);
    for (const n of data.gone) delete s.nodes[n];
    for (const [key, value] of Object.entries(data)) if (!["nodes", "gone", "seq", "serverMs"].includes(key)) s[key] = value;
    if (newNodes || data.gone.length || data.domains) pj.layout = layout(s);
    else if (data.holders || (pj.selected && data.jobs)) recount();  // colours, or the selected ranks, moved
    else recount(Object.keys(data.nodes).map(n => pj.layout.where[n].rack));
    pj.patches++;
  }
  pj.seq = data.seq;
  panels(); rankLegend();
  draw();  // at once, not on the next frame: an update is on screen when this returns
  if (!pj.firstPaint) pj.firstPaint = pj.painted;
  // the panel reads the job's Events: again only when the job itself changed, not on every patch
  // and once more a little later: the operator posts its Events just after it writes the status
  if (pj.selected && (kind === "snapshot" || selectedJob() !== was)) { showDetail(); setTimeout(showDetail, 2000); }
}
function selectedJob() { return JSON.stringify(pj.state && pj.state.jobs.find(j => j.key === pj.selected)); }

function connect() {
  const source = new EventSource("/api/stream");
  const conn = document.getElementById("conn");
  source.onopen = () => { conn.textContent = "live"; conn.className = "conn on"; };
  source.onerror = () => { conn.textContent = "reconnecting"; conn.className = "conn off"; };
  for (const kind of ["snapshot", "patch"]) {
    source.addEventListener(kind, e => {  // how long each step takes, for the benchmark and the curious
      const t0 = performance.now(), data = JSON.parse(e.data), t1 = performance.now();
      apply(kind, data);
      pj.timing = { kind, bytes: e.data.length, parseMs: t1 - t0, applyMs: performance.now() - t1, serverMs: data.serverMs };
    });
  }
}
window.addEventListener("resize", redraw);
legend();
connect();
