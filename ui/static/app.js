// metalloc operator page: reads the API it is served by with the browser's
// credentials and never writes. See ui/ui.go for what it shows.
'use strict';
(function () {
  const API_VERSION = '1.82';
  const POLL_MS = 2000;        // allocations, when there is no event stream
  const SSE_SAFETY_MS = 30000; // allocations, with an event stream
  const CONDUCTORS_MS = 5000;
  const FLEET_MS = 15000;
  const RACK_BARS = 120;       // more racks than this: the fullest only
  const COLORS = {
    available: '#2e9e4f', allocated: '#2f6fd6', maintenance: '#e0a020',
    manageable: '#9aa3ad', error: '#d43c3c',
  };
  const DIM = '#e4e6ea';

  // Everything the page knows; window.metalloc for tests and curious operators.
  const S = {
    fleet: null, byUUID: new Map(), layout: null, match: null, matched: 0,
    filter: { cls: '', trait: '', owner: '' },
    allocations: [], allocStates: new Map(), conductors: [], live: 'connecting',
    skew: 0, selected: -1, ready: false, firstLoad: null, fleetTiming: null,
  };
  window.metalloc = S;

  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v; else if (k.startsWith('on')) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
    }
    for (const k of kids) if (k != null) e.append(k);
    return e;
  };

  // url resolves an API path against the page's origin (never its full
  // address: one opened as http://user:password@host/ui/ carries
  // credentials that fetch refuses in a URL; the browser still sends them).
  const url = (path) => new URL(path, location.origin).href;

  async function api(path) {
    const r = await fetch(url(path), {
      credentials: 'same-origin',
      headers: { 'X-OpenStack-Ironic-API-Version': API_VERSION, Accept: 'application/json' },
    });
    if (!r.ok) {
      let msg = r.status + ' ' + r.statusText;
      try {
        const b = await r.json();
        let em = b.error_message;
        if (typeof em === 'string') { try { em = JSON.parse(em); } catch (e) { /* plain text */ } }
        msg = (em && (em.faultstring || em)) || msg;
      } catch (e) { /* not JSON */ }
      const err = new Error(path + ': ' + msg);
      err.status = r.status;
      throw err;
    }
    return r.json();
  }

  function showError(where, err) {
    $('error').textContent = err ? where + ': ' + err.message : '';
  }

  // ---- fleet: filters, layout, canvas ------------------------------------

  function fillSelect(sel, names, label) {
    const keep = sel.value;
    sel.replaceChildren(el('option', { value: '' }, 'all'));
    for (const n of names) sel.append(el('option', { value: n }, label ? label(n) : n));
    sel.value = names.includes(keep) ? keep : '';
  }

  function computeMatch() {
    const f = S.fleet, n = f.nodes.uuid.length;
    const cls = f.classes.indexOf(S.filter.cls), tr = f.traits.indexOf(S.filter.trait);
    const ow = S.filter.owner === '' ? -1 : f.owners.indexOf(S.filter.owner === '(none)' ? '' : S.filter.owner);
    const m = S.match && S.match.length === n ? S.match : new Uint8Array(n);
    let count = 0;
    for (let i = 0; i < n; i++) {
      let ok = (cls < 0 || f.nodes.class[i] === cls) && (ow < 0 || f.nodes.owner[i] === ow);
      if (ok && tr >= 0) ok = f.nodes.traits[i].includes(tr);
      m[i] = ok ? 1 : 0;
      count += m[i];
    }
    S.match = m;
    S.matched = count;
    $('match-count').textContent = (S.filter.cls || S.filter.trait || S.filter.owner) ? count + ' match' : '';
  }

  // layout places every node: racks are columns of cells (at most perCol
  // high) flowing left to right, each topology row starting a new line.
  function layout() {
    const f = S.fleet, n = f.nodes.uuid.length, R = f.racks.length;
    const cell = n <= 2000 ? 14 : n <= 20000 ? 8 : 5;
    const fill = cell - (cell >= 8 ? 2 : 1);
    const perCol = n <= 2000 ? 16 : n <= 20000 ? 24 : 40;
    const labelH = 13, rowLabelW = 44, gapX = 6, gapY = 8;
    // nodes of each rack, in id order (CSR: start[r]..start[r+1] in order)
    const start = new Int32Array(R + 1), order = new Int32Array(n), fillAt = new Int32Array(R);
    for (let i = 0; i < n; i++) start[f.nodes.rack[i] + 1]++;
    for (let r = 0; r < R; r++) start[r + 1] += start[r];
    for (let i = 0; i < n; i++) { const r = f.nodes.rack[i]; order[start[r] + fillAt[r]++] = i; }
    const width = Math.max(600, $('grid-wrap').clientWidth - 4);
    const racks = [], x = new Float32Array(n), y = new Float32Array(n);
    let cx = rowLabelW, cy = 4, lineH = 0, prevRow = null;
    const rowLabels = [];
    for (let r = 0; r < R; r++) {
      const count = start[r + 1] - start[r];
      const cols = Math.max(1, Math.ceil(count / perCol));
      const rk = f.racks[r].rack;
      const label = rk === '' ? '—' : cell >= 8 ? 'rack ' + rk : rk;
      const w = Math.max(cols * cell, cell >= 8 ? 44 : 16);
      const h = labelH + Math.min(count, perCol) * cell;
      const row = f.racks[r].row;
      if (row !== prevRow || cx + w > width) {
        if (prevRow !== null) { cy += lineH + gapY; }
        cx = rowLabelW; lineH = 0;
        if (row !== prevRow) rowLabels.push({ y: cy, text: row === '' ? 'no row' : 'row ' + row });
        prevRow = row;
      }
      racks.push({ r, x: cx, y: cy, w, h, cols, start: start[r], count, label });
      for (let k = 0; k < count; k++) {
        const i = order[start[r] + k];
        x[i] = cx + Math.floor(k / perCol) * cell;
        y[i] = cy + labelH + (k % perCol) * cell;
      }
      cx += w + gapX;
      lineH = Math.max(lineH, h);
    }
    S.layout = { cell, fill, perCol, racks, rowLabels, order, x, y, width, height: cy + lineH + 6 };
  }

  // draw paints the racks in view only: the canvas is as tall as the
  // scrolled box (#grid-wrap), a sizer gives the scrollbar the full height,
  // so a 100,000-node fleet costs what is on screen.
  let drawQueued = false;
  function draw() {
    drawQueued = false;
    const L = S.layout, f = S.fleet;
    const wrap = $('grid-wrap'), canvas = $('grid'), dpr = window.devicePixelRatio || 1;
    $('grid-sizer').style.height = L.height + 'px';
    const maxH = Math.floor(window.innerHeight * 0.72);
    const viewH = Math.min(L.height, maxH);
    const top = Math.min(wrap.scrollTop, Math.max(0, L.height - viewH));
    const cw = Math.ceil(L.width * dpr), ch = Math.ceil(viewH * dpr);
    if (canvas.width !== cw || canvas.height !== ch) { // resizing reallocates the bitmap
      canvas.width = cw;
      canvas.height = ch;
      canvas.style.width = L.width + 'px';
      canvas.style.height = viewH + 'px';
    }
    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, L.width, viewH);
    ctx.setTransform(dpr, 0, 0, dpr, 0, -top * dpr);
    const bottom = top + viewH;
    const vis = L.racks.filter((rk) => rk.y < bottom && rk.y + rk.h > top);
    ctx.fillStyle = '#4b535c';
    ctx.font = '600 11px system-ui, sans-serif';
    ctx.textBaseline = 'top';
    for (const rl of L.rowLabels) if (rl.y + 30 > top && rl.y < bottom) ctx.fillText(rl.text, 2, rl.y + 13);
    ctx.font = (L.cell >= 8 ? 10 : 8) + 'px system-ui, sans-serif';
    ctx.fillStyle = '#6b737c';
    for (const rk of vis) ctx.fillText(rk.label, rk.x, rk.y + 1, rk.w);
    // one pass per colour, so the fill style changes six times, not per cell
    const colors = f.states.map((s) => COLORS[s] || '#000');
    const st = f.nodes.state, m = S.match, X = L.x, Y = L.y, w = L.fill, order = L.order;
    let drawn = 0;
    for (let c = -1; c < colors.length; c++) {
      ctx.fillStyle = c < 0 ? DIM : colors[c];
      for (const rk of vis) {
        for (let k = rk.start, end = rk.start + rk.count; k < end; k++) {
          const i = order[k];
          if ((m[i] ? st[i] : -1) === c) { ctx.fillRect(X[i], Y[i], w, w); drawn++; }
        }
      }
    }
    if (S.selected >= 0) {
      ctx.strokeStyle = '#000';
      ctx.lineWidth = 2;
      ctx.strokeRect(X[S.selected] - 1, Y[S.selected] - 1, w + 2, w + 2);
    }
    L.drawn = drawn;
    L.top = top;
  }
  function queueDraw() {
    if (!drawQueued && S.layout) { drawQueued = true; requestAnimationFrame(draw); }
  }

  // nodeAt is the node under grid point (px, py) (unscrolled), or -1.
  function nodeAt(px, py) {
    const L = S.layout;
    if (!L) return -1;
    for (const rk of L.racks) {
      if (px < rk.x || px >= rk.x + rk.w || py < rk.y || py >= rk.y + rk.h) continue;
      const col = Math.floor((px - rk.x) / L.cell), row = Math.floor((py - rk.y - 13) / L.cell);
      if (row < 0 || row >= L.perCol) return -1;
      const k = col * L.perCol + row;
      return k < rk.count ? L.order[rk.start + k] : -1;
    }
    return -1;
  }

  // cellCenter scrolls node i into view and gives its centre in page
  // coordinates (for tests).
  S.cellCenter = function (i) {
    const L = S.layout, wrap = $('grid-wrap');
    wrap.scrollTop = Math.max(0, L.y[i] - 100);
    draw();
    const b = $('grid').getBoundingClientRect();
    return { x: b.left + window.scrollX + L.x[i] + L.fill / 2, y: b.top + window.scrollY + L.y[i] - L.top + L.fill / 2 };
  };

  function renderLegend() {
    const f = S.fleet, counts = new Array(f.states.length).fill(0);
    for (const s of f.nodes.state) counts[s]++;
    $('legend').replaceChildren(...f.states.map((s, k) => {
      const i = el('i');
      i.style.background = COLORS[s];
      return el('span', { 'data-state': s }, i, s + ' ' + counts[k]);
    }));
    S.stateCounts = Object.fromEntries(f.states.map((s, k) => [s, counts[k]]));
  }

  function bar(label, free, total, title) {
    const used = total - free, pct = total ? (100 * used) / total : 0;
    const u = el('div', { class: 'used' + (total && free === 0 ? ' full' : '') });
    u.style.width = pct.toFixed(1) + '%';
    return el('div', { class: 'bar', title: title || label },
      el('span', { class: 'label' }, label), el('div', { class: 'track' }, u),
      el('span', { class: 'num' }, free + ' / ' + total));
  }

  function renderBars() {
    const f = S.fleet;
    $('class-bars').replaceChildren(...f.class_summary.map((c) =>
      bar(c.name || '(none)', c.free, c.total, (c.name || '(none)') + ': ' + c.free + ' free of ' + c.total)));
    let racks = f.racks.map((r, k) => ({ ...r, k }));
    if (racks.length > RACK_BARS) {
      racks.sort((a, b) => a.free / a.total - b.free / b.total || a.k - b.k);
      racks = racks.slice(0, RACK_BARS);
      $('rack-note').textContent = 'fullest ' + RACK_BARS + ' of ' + f.racks.length;
    } else {
      $('rack-note').textContent = '';
    }
    $('rack-bars').replaceChildren(...racks.map((r) => {
      const name = (r.row === '' ? '' : 'row ' + r.row + ' ') + (r.rack === '' ? '(no rack)' : 'rack ' + r.rack);
      return bar(name, r.free, r.total);
    }));
  }

  async function loadFleet() {
    const t0 = performance.now();
    const f = await api('/v1/ui/fleet');
    const t1 = performance.now();
    S.skew = Date.parse(f.generated_at) - Date.now();
    S.fleet = f;
    const phases = {}, tick = (name, fn) => { const t = performance.now(); fn(); phases[name] = performance.now() - t; };
    tick('index', () => {
      const m = new Map(), u = f.nodes.uuid;
      for (let i = 0; i < u.length; i++) m.set(u[i], i);
      S.byUUID = m;
    });
    tick('filters', () => {
      fillSelect($('f-class'), f.classes.filter((c) => c !== ''));
      fillSelect($('f-trait'), f.traits);
      fillSelect($('f-owner'), f.owners.map((o) => (o === '' ? '(none)' : o)));
      computeMatch();
    });
    tick('layout', layout);
    tick('draw', draw);
    tick('bars', () => { renderLegend(); renderBars(); });
    $('node-count').textContent = f.nodes.uuid.length + ' nodes in ' + f.racks.length + ' racks';
    $('updated').textContent = 'fleet at ' + new Date(Date.parse(f.generated_at)).toLocaleTimeString();
    S.fleetTiming = { fetchMs: t1 - t0, renderMs: performance.now() - t1, phases };
    if (S.firstLoad === null) S.firstLoad = performance.now();
    S.ready = true;
    document.body.dataset.ready = '1';
  }

  for (const [id, key] of [['f-class', 'cls'], ['f-trait', 'trait'], ['f-owner', 'owner']]) {
    $(id).addEventListener('change', (ev) => {
      S.filter[key] = ev.target.value;
      if (S.fleet) { computeMatch(); draw(); }
    });
  }
  window.addEventListener('resize', () => { if (S.fleet) { layout(); draw(); } });
  $('grid-wrap').addEventListener('scroll', queueDraw);
  $('grid').addEventListener('click', (ev) => {
    const b = $('grid').getBoundingClientRect();
    const i = nodeAt(ev.clientX - b.left, ev.clientY - b.top + (S.layout ? S.layout.top : 0));
    if (i >= 0) showNode(S.fleet.nodes.uuid[i]);
  });
  $('details-close').addEventListener('click', () => {
    $('details').hidden = true;
    S.selected = -1;
    draw();
  });

  // ---- node details ------------------------------------------------------

  function dl(pairs) {
    const d = el('dl');
    for (const [k, v] of pairs) if (v !== undefined && v !== null && v !== '') d.append(el('dt', {}, k), el('dd', {}, v));
    return d;
  }

  async function showNode(uuid) {
    S.selected = S.byUUID.has(uuid) ? S.byUUID.get(uuid) : -1;
    draw();
    $('details').hidden = false;
    $('details-body').replaceChildren('loading…');
    try {
      const n = await api('/v1/nodes/' + uuid);
      let alloc = null;
      if (n.allocation_uuid) alloc = await api('/v1/allocations/' + n.allocation_uuid).catch(() => null);
      const i = S.selected, f = S.fleet;
      const traits = n.traits || (i >= 0 ? f.nodes.traits[i].map((t) => f.traits[t]) : []);
      const extra = n.extra || {};
      const body = [dl([
        ['name', n.name], ['uuid', el('span', { class: 'mono' }, n.uuid)],
        ['state', i >= 0 ? f.states[f.nodes.state[i]] : ''],
        ['provision', n.provision_state + (n.target_provision_state ? ' → ' + n.target_provision_state : '')],
        ['power', n.power_state], ['maintenance', n.maintenance ? 'yes' + (n.maintenance_reason ? ': ' + n.maintenance_reason : '') : 'no'],
        ['resource class', n.resource_class], ['owner', n.owner], ['lessee', n.lessee],
        ['topology', ['row', 'rack', 'slot'].filter((k) => extra[k] !== undefined).map((k) => k + ' ' + extra[k]).join(', ')],
        ['traits', traits.join(', ')], ['last error', n.last_error],
        ['instance', n.instance_uuid],
      ])];
      if (alloc) {
        body.push(el('h2', {}, 'allocation'), dl([
          ['uuid', el('span', { class: 'mono' }, alloc.uuid)], ['name', alloc.name],
          ['state', el('span', { class: 'state ' + alloc.state }, alloc.state)],
          ['owner', alloc.owner], ['traits', (alloc.traits || []).join(', ')],
          ['created', alloc.created_at], ['last error', alloc.last_error ? explain(alloc.last_error) : ''],
        ]));
      } else {
        body.push(el('p', {}, 'no allocation'));
      }
      $('details-body').replaceChildren(...body);
    } catch (err) {
      $('details-body').replaceChildren(err.message);
    }
  }
  S.showNode = showNode;

  // ---- allocations -------------------------------------------------------

  // explain turns a last_error into something readable: the conductor's
  // text is Ironic's sentence then our per-filter counts, e.g. "Failed to process
  // allocation U: no suitable nodes have the requested traits A. (no node
  // fits: 73 of resource class X, 60 available, 0 with traits A)": the
  // sentence is the summary, the counts a funnel, one line per filter with
  // the nodes it left (older rows: "no node fits: ..." alone).
  function explain(msg) {
    const text = msg.replace(/^Failed to process allocation [0-9a-f-]+: /, '');
    const m = /^(.*?)\.?\s*\(no node fits: (.*)\)$/.exec(text) || /^()no node fits: (.*?)\.?$/.exec(text);
    if (!m) return el('div', { class: 'last-error' }, el('span', { class: 'summary' }, text));
    const ul = el('ul', { class: 'funnel' });
    for (const step of m[2].split(/, (?=\d+ )/)) {
      const sm = /^(\d+) (.*)$/.exec(step);
      if (!sm) { ul.append(el('li', {}, el('b'), step)); continue; }
      ul.append(el('li', { class: sm[1] === '0' ? 'zero' : '' }, el('b', {}, sm[1]), sm[2]));
    }
    return el('div', { class: 'last-error', title: msg }, el('span', { class: 'summary' }, (m[1] || 'no node fits') + ':'), ul);
  }
  S.explain = explain;

  let allocBusy = false, allocAgain = false;
  async function loadAllocations() {
    if (allocBusy) { allocAgain = true; return; }
    allocBusy = true;
    try {
      const body = await api('/v1/allocations?limit=50&sort_key=created_at&sort_dir=desc');
      S.allocations = body.allocations || [];
      let changed = false;
      const rows = S.allocations.map((a) => {
        const prev = S.allocStates.get(a.uuid);
        if (prev !== a.state) changed = true;
        S.allocStates.set(a.uuid, a.state);
        const ni = a.node_uuid ? S.byUUID.get(a.node_uuid) : undefined;
        const nodeCell = a.node_uuid
          ? el('a', { href: '#', onclick: (ev) => { ev.preventDefault(); showNode(a.node_uuid); } },
            ni !== undefined && S.fleet.nodes.name[ni] ? S.fleet.nodes.name[ni] : a.node_uuid.slice(0, 8))
          : '';
        return el('tr', { 'data-uuid': a.uuid, 'data-state': a.state, class: prev === undefined && S.ready ? 'new' : '' },
          el('td', {}, el('span', { class: 'mono' }, a.uuid.slice(0, 8)), a.name ? ' ' + a.name : ''),
          el('td', {}, a.resource_class),
          el('td', {}, (a.traits || []).join(', ')),
          el('td', {}, el('span', { class: 'state ' + a.state }, a.state)),
          el('td', {}, nodeCell),
          el('td', {}, new Date(Date.parse(a.created_at)).toLocaleTimeString()),
          el('td', {}, a.last_error ? explain(a.last_error) : ''));
      });
      $('allocations').tBodies[0].replaceChildren(...rows);
      showError('', null);
      // a state change moves nodes: refresh the grid soon
      if (changed && S.ready) scheduleFleet(500);
    } catch (err) {
      showError('allocations', err);
    } finally {
      allocBusy = false;
      if (allocAgain) { allocAgain = false; setTimeout(loadAllocations, 100); }
    }
  }

  // ---- conductors --------------------------------------------------------

  async function loadConductors() {
    try {
      const body = await api('/v1/conductors?detail=True');
      S.conductors = body.conductors || [];
      const now = Date.now() + S.skew;
      $('conductors').tBodies[0].replaceChildren(...S.conductors.map((c) => {
        const age = c.updated_at ? Math.max(0, (now - Date.parse(c.updated_at)) / 1000) : NaN;
        return el('tr', { 'data-hostname': c.hostname },
          el('td', {}, c.hostname), el('td', {}, c.conductor_group || ''),
          el('td', {}, el('span', { class: 'state ' + (c.alive ? 'alive' : 'dead') }, c.alive ? 'alive' : 'dead')),
          el('td', {}, isNaN(age) ? '' : age.toFixed(1) + ' s'));
      }));
    } catch (err) {
      $('conductors').tBodies[0].replaceChildren(el('tr', {}, el('td', { colspan: 4 }, err.status === 403 ? 'not visible to you' : err.message)));
    }
  }

  // ---- scheduling: event stream if the API has one, else polling ---------

  let fleetTimer = null, fleetBusy = false;
  function scheduleFleet(ms) {
    clearTimeout(fleetTimer);
    fleetTimer = setTimeout(async () => {
      if (fleetBusy) { scheduleFleet(1000); return; }
      fleetBusy = true;
      try { await loadFleet(); } catch (err) { showError('fleet', err); }
      fleetBusy = false;
      scheduleFleet(FLEET_MS);
    }, ms);
  }

  function setLive(mode) {
    S.live = mode;
    const p = $('live');
    p.className = 'pill ' + mode;
    p.textContent = mode === 'sse' ? 'live (event stream)' : 'polling every ' + POLL_MS / 1000 + ' s';
  }

  let pollTimer = null;
  function poll() {
    clearTimeout(pollTimer);
    loadAllocations();
    pollTimer = setTimeout(poll, S.live === 'sse' ? SSE_SAFETY_MS : POLL_MS);
  }

  // events reads GET /v1/allocations/events while it answers 200 with
  // text/event-stream; each event refreshes the allocations. It returns
  // when the stream is absent or ends.
  async function events() {
    let r;
    try {
      r = await fetch(url('/v1/allocations/events'), {
        credentials: 'same-origin',
        headers: { Accept: 'text/event-stream', 'X-OpenStack-Ironic-API-Version': API_VERSION },
      });
    } catch (err) {
      return false;
    }
    if (r.status !== 200 || !(r.headers.get('Content-Type') || '').startsWith('text/event-stream')) {
      try { await r.body.cancel(); } catch (e) { /* nothing to cancel */ }
      return false;
    }
    setLive('sse');
    poll();
    const reader = r.body.getReader(), dec = new TextDecoder();
    let buf = '', timer = null;
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true }).replace(/\r\n/g, '\n');
        let k;
        while ((k = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, k);
          buf = buf.slice(k + 2);
          if (/^data:/m.test(ev) && !timer) timer = setTimeout(() => { timer = null; loadAllocations(); }, 200);
        }
      }
    } catch (err) { /* stream broke */ }
    return true;
  }

  async function liveLoop() {
    for (;;) {
      const had = await events();
      if (!had) {
        setLive('poll');
        poll();
        return; // no event stream on this API: keep polling
      }
      setLive('poll');
      poll();
      await new Promise((res) => setTimeout(res, 5000)); // stream ended: poll, then retry it
    }
  }

  async function conductorsLoop() {
    await loadConductors();
    setTimeout(conductorsLoop, CONDUCTORS_MS);
  }

  async function start() {
    try { await loadFleet(); } catch (err) { showError('fleet', err); }
    scheduleFleet(FLEET_MS);
    conductorsLoop();
    liveLoop();
  }
  start();
})();
