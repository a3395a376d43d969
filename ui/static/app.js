// metalloc operator page: reads the API it is served by with the browser's
// credentials and never writes. See ui/ui.go for what it shows; grid.js
// lays out and paints the fleet grid.
'use strict';
(function () {
  const API_VERSION = '1.82';
  const POLL_MS = 2000;        // allocations and groups, when there is no event stream
  const SSE_SAFETY_MS = 30000; // allocations and groups, with an event stream
  const CONDUCTORS_MS = 5000;
  const FLEET_MS = 15000;
  const RACK_BARS = 120;       // more racks than this: the fullest only
  const GROUP_ROWS = 50;       // groups shown: failed and allocating first, then the newest
  const COLORS = {
    available: '#2e9e4f', allocated: '#2f6fd6', maintenance: '#e0a020',
    manageable: '#9aa3ad', error: '#d43c3c',
  };
  const DIM = '#e4e6ea';
  const G = window.MetallocGrid;

  // Everything the page knows; window.metalloc for tests and curious operators.
  const S = {
    fleet: null, byUUID: new Map(), layout: null, match: null, matched: 0, mode: null,
    zoom: { row: null, rack: null }, filter: { cls: '', trait: '', owner: '' },
    allocations: [], allocStates: new Map(), groups: [], groupByUUID: new Map(), conductors: [],
    live: 'connecting', skew: 0, selected: -1, highlight: null, ready: false, firstLoad: null, fleetTiming: null,
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

  const num = (n) => n.toLocaleString('en-US');

  // fmtTime writes a time as 2026-11-26 21:44:05 +01:00: date, 24-hour
  // local time and the offset from UTC.
  const pad = (n) => String(n).padStart(2, '0');
  function fmtTime(t) {
    const d = t instanceof Date ? t : new Date(Date.parse(t));
    if (isNaN(d)) return '';
    const off = -d.getTimezoneOffset(), a = Math.abs(off);
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' + pad(d.getHours()) + ':' +
      pad(d.getMinutes()) + ':' + pad(d.getSeconds()) + ' ' + (off < 0 ? '-' : '+') + pad(Math.floor(a / 60)) + ':' + pad(a % 60);
  }
  S.fmtTime = fmtTime;

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

  // ---- fleet: filters, zoom, grid ----------------------------------------

  function fillSelect(sel, names, label) {
    const keep = sel.value;
    sel.replaceChildren(el('option', { value: '' }, 'all'));
    for (const n of names) sel.append(el('option', { value: n }, label ? label(n) : n));
    sel.value = names.includes(keep) ? keep : '';
  }

  // fleetPath is the summary the page wants: its zoom and filters.
  function fleetPath() {
    const p = new URLSearchParams();
    if (S.zoom.row !== null) p.set('row', S.zoom.row);
    if (S.zoom.rack !== null) p.set('rack', S.zoom.rack);
    if (S.filter.cls) p.set('resource_class', S.filter.cls);
    if (S.filter.trait) p.set('trait', S.filter.trait);
    if (S.filter.owner) p.set('owner', S.filter.owner === '(none)' ? '' : S.filter.owner);
    const q = p.toString();
    return '/v1/ui/fleet' + (q ? '?' + q : '');
  }

  // computeMatch marks the drawn nodes the filters select (the server
  // counts them for racks and rows).
  function computeMatch() {
    const f = S.fleet;
    if (!f.nodes) { S.match = null; S.matched = f.matched; return; }
    const n = f.nodes.uuid.length;
    const cls = S.filter.cls ? f.classes.indexOf(S.filter.cls) : -1, tr = S.filter.trait ? f.traits.indexOf(S.filter.trait) : -1;
    const ow = S.filter.owner === '' ? -1 : f.owners.indexOf(S.filter.owner === '(none)' ? '' : S.filter.owner);
    const m = S.match && S.match.length === n ? S.match : new Uint8Array(n);
    let count = 0;
    for (let i = 0; i < n; i++) {
      let ok = (!S.filter.cls || f.nodes.class[i] === cls) && (!S.filter.owner || f.nodes.owner[i] === ow);
      if (ok && S.filter.trait) ok = tr >= 0 && f.nodes.traits[i].includes(tr);
      m[i] = ok ? 1 : 0;
      count += m[i];
    }
    S.match = m;
    S.matched = S.zoom.row === null ? count : f.matched;
  }

  function showMatchCount() {
    const any = S.filter.cls || S.filter.trait || S.filter.owner;
    $('match-count').textContent = any ? num(S.matched) + ' match' : '';
  }

  // layout places the grid for the summary's mode in the panel's size.
  function layout() {
    const f = S.fleet, wrap = $('grid-wrap');
    const width = Math.max(480, wrap.clientWidth - 4), height = Math.max(200, wrap.clientHeight - 4);
    S.mode = f.nodes && f.racks ? 'nodes' : f.racks ? 'racks' : 'rows';
    S.layout = S.mode === 'nodes' ? G.layoutNodes(f, width, height)
      : S.mode === 'racks' ? G.layoutTiles(f, width, height) : G.layoutRows(f, width);
    S.layout.viewHeight = height;
    $('grid-wrap').dataset.mode = S.mode;
  }

  // draw paints the part of the grid in view: the canvas is as tall as the
  // scrolled box (#grid-wrap), a sizer gives the scrollbar the full height,
  // so a large grid costs what is on screen.
  let drawQueued = false;
  function draw() {
    drawQueued = false;
    const L = S.layout, f = S.fleet;
    if (!L) return;
    const wrap = $('grid-wrap'), canvas = $('grid'), dpr = window.devicePixelRatio || 1;
    $('grid-sizer').style.height = L.height + 'px';
    const viewH = Math.min(L.height, Math.max(200, wrap.clientHeight));
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
    L.drawn = G.draw(ctx, L, f, {
      top, bottom: top + viewH, colors: COLORS, dim: DIM, match: S.match, selected: S.selected, highlight: S.highlight,
    });
    L.top = top;
  }
  function queueDraw() {
    if (!drawQueued && S.layout) { drawQueued = true; requestAnimationFrame(draw); }
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
    for (const r of f.rows) r.states.forEach((n, k) => { counts[k] += n; });
    $('legend').replaceChildren(...f.states.map((s, k) => {
      const i = el('i');
      i.style.background = COLORS[s];
      return el('span', { 'data-state': s }, i, s + ' ' + counts[k]);
    }));
    S.stateCounts = Object.fromEntries(f.states.map((s, k) => [s, counts[k]]));
  }

  // bar is one free/total bar: the filled part is the free share.
  function bar(label, free, total, title) {
    const share = total ? free / total : 0;
    const fill = el('div', { class: 'free' });
    fill.style.width = (100 * share).toFixed(1) + '%';
    return el('div', { class: 'bar' + (total && free === 0 ? ' full' : ''), title: title || label, 'data-free': free, 'data-total': total },
      el('span', { class: 'label' }, label), el('div', { class: 'track' }, fill),
      el('span', { class: 'num' }, num(free) + ' / ' + num(total)));
  }

  const rackName = (r) => (r.row === '' ? '' : 'row ' + r.row + ' ') + (r.rack === '' ? '(no rack)' : 'rack ' + r.rack);

  function renderBars() {
    const f = S.fleet;
    $('class-bars').replaceChildren(...f.class_summary.map((c) =>
      bar(c.name || '(none)', c.free, c.total, (c.name || '(none)') + ': ' + c.free + ' free of ' + c.total)));
    const byRow = !f.racks;
    let items = (byRow ? f.rows : f.racks).map((r, k) => ({ ...r, k }));
    $('rack-title').textContent = byRow ? 'free / total per row' : 'free / total per rack';
    if (items.length > RACK_BARS) {
      items.sort((a, b) => a.free / a.total - b.free / b.total || a.k - b.k);
      items = items.slice(0, RACK_BARS);
      $('rack-note').textContent = 'fullest ' + RACK_BARS + ' of ' + (byRow ? f.row_count : f.racks.length);
    } else {
      $('rack-note').textContent = '';
    }
    $('rack-bars').replaceChildren(...items.map((r) => bar(byRow ? (r.row === '' ? '(no row)' : 'row ' + r.row) : rackName(r),
      r.free, r.total)));
  }

  // renderZoom shows where the grid is (whole fleet, a row, a rack) and
  // what it draws, with links back up.
  function renderZoom() {
    const f = S.fleet, parts = [];
    const link = (text, row, rack) => el('a', { href: '#', onclick: (ev) => { ev.preventDefault(); zoomTo(row, rack); } }, text);
    parts.push(S.zoom.row === null ? el('b', {}, 'whole fleet') : link('whole fleet', null, null));
    if (S.zoom.row !== null) {
      const name = S.zoom.row === '' ? 'no row' : 'row ' + S.zoom.row;
      parts.push(' › ', S.zoom.rack === null ? el('b', {}, name) : link(name, S.zoom.row, null));
    }
    if (S.zoom.rack !== null) parts.push(' › ', el('b', {}, S.zoom.rack === '' ? 'no rack' : 'rack ' + S.zoom.rack));
    const what = S.mode === 'nodes' ? num(f.selection_total) + ' nodes drawn'
      : S.mode === 'racks' ? 'racks summarised (over ' + num(f.node_limit) + ' nodes): click a rack to draw its nodes'
        : 'rows summarised (over ' + num(f.rack_limit) + ' racks): click a row for its racks';
    $('zoom').replaceChildren(...parts, el('small', {}, ' — ' + what));
  }

  function zoomTo(row, rack) {
    S.zoom = { row, rack };
    S.selected = -1;
    $('grid-wrap').scrollTop = 0;
    scheduleFleet(0);
  }
  S.zoomTo = zoomTo;

  async function loadFleet() {
    const path = fleetPath(), t0 = performance.now();
    const f = await api(path);
    const t1 = performance.now();
    S.skew = Date.parse(f.generated_at) - Date.now();
    S.fleet = f;
    const phases = {}, tick = (name, fn) => { const t = performance.now(); fn(); phases[name] = performance.now() - t; };
    tick('index', () => {
      const m = new Map();
      if (f.nodes) { const u = f.nodes.uuid; for (let i = 0; i < u.length; i++) m.set(u[i], i); }
      S.byUUID = m;
      if (S.selectedUUID && m.has(S.selectedUUID)) S.selected = m.get(S.selectedUUID); else S.selected = -1;
      markGroupNodes();
    });
    tick('filters', () => {
      fillSelect($('f-class'), f.classes.filter((c) => c !== ''));
      fillSelect($('f-trait'), f.traits);
      fillSelect($('f-owner'), f.owners.map((o) => (o === '' ? '(none)' : o)));
      computeMatch();
      showMatchCount();
    });
    tick('layout', layout);
    tick('draw', draw);
    tick('bars', () => { renderLegend(); renderBars(); renderZoom(); });
    const racks = f.rows.reduce((n, r) => n + r.racks, 0);
    $('node-count').textContent = num(f.total) + ' nodes in ' + num(racks) + ' racks';
    $('updated').textContent = 'fleet at ' + fmtTime(f.generated_at);
    S.fleetTiming = { fetchMs: t1 - t0, renderMs: performance.now() - t1, phases };
    if (S.firstLoad === null) S.firstLoad = performance.now();
    S.ready = true;
    document.body.dataset.ready = '1';
    if (fleetPath() !== path) scheduleFleet(0); // the zoom or a filter changed meanwhile
  }

  for (const [id, key] of [['f-class', 'cls'], ['f-trait', 'trait'], ['f-owner', 'owner']]) {
    $(id).addEventListener('change', (ev) => {
      S.filter[key] = ev.target.value;
      if (S.fleet && S.fleet.nodes) { computeMatch(); showMatchCount(); draw(); }
      scheduleFleet(0); // the counts per rack and row come from the server
    });
  }
  // the panel's size changes with the window, a scrollbar, the aside: lay
  // the grid out again to fill it
  let sized = '';
  new ResizeObserver(() => {
    const wrap = $('grid-wrap'), size = wrap.clientWidth + 'x' + wrap.clientHeight;
    if (S.fleet && size !== sized) { sized = size; layout(); draw(); }
  }).observe($('grid-wrap'));
  $('grid-wrap').addEventListener('scroll', queueDraw);
  const gridPoint = (ev) => {
    const b = $('grid').getBoundingClientRect();
    return [ev.clientX - b.left, ev.clientY - b.top + (S.layout ? S.layout.top : 0)];
  };
  $('grid').addEventListener('click', (ev) => {
    const h = G.hit(S.layout, ...gridPoint(ev));
    if (!h) return;
    if (h.node !== undefined) showNode(S.fleet.nodes.uuid[h.node]);
    else if (h.rack !== undefined) zoomTo(S.fleet.racks[h.rack].row, S.fleet.racks[h.rack].rack);
    else zoomTo(S.fleet.rows[h.row].row, null);
  });
  // the canvas's tooltip names what is under the pointer
  $('grid').addEventListener('mousemove', (ev) => {
    const h = G.hit(S.layout, ...gridPoint(ev)), f = S.fleet;
    let t = '';
    const counts = (r) => r.free + ' free of ' + r.total + '; ' + f.states.map((s, k) => s + ' ' + r.states[k]).join(', ');
    if (h && h.node !== undefined) {
      const i = h.node;
      t = (f.nodes.name[i] || f.nodes.uuid[i]) + ': ' + f.states[f.nodes.state[i]] + ' (' + f.nodes.provision_state[i] + '), ' +
        (f.classes[f.nodes.class[i]] || '');
    } else if (h && h.rack !== undefined) t = rackName(f.racks[h.rack]) + ': ' + counts(f.racks[h.rack]);
    else if (h) t = (f.rows[h.row].row === '' ? 'no row' : 'row ' + f.rows[h.row].row) + ': ' + counts(f.rows[h.row]);
    $('grid').title = t;
  });
  $('details-close').addEventListener('click', () => {
    $('details').hidden = true;
    S.selected = -1;
    S.selectedUUID = null;
    draw();
  });

  // ---- node details ------------------------------------------------------

  function dl(pairs) {
    const d = el('dl');
    for (const [k, v] of pairs) if (v !== undefined && v !== null && v !== '') d.append(el('dt', {}, k), el('dd', {}, v));
    return d;
  }

  const groupLabel = (uuid) => {
    const g = S.groupByUUID.get(uuid);
    return g && g.name ? g.name : uuid.slice(0, 8);
  };

  async function showNode(uuid) {
    S.selectedUUID = uuid;
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
        ['instance', n.instance_uuid], ['updated', fmtTime(n.updated_at)],
      ])];
      if (alloc) {
        body.push(el('h2', {}, 'allocation'), dl([
          ['uuid', el('span', { class: 'mono' }, alloc.uuid)], ['name', alloc.name],
          ['state', el('span', { class: 'state ' + alloc.state }, alloc.state)],
          ['group', alloc.allocation_group_uuid ? el('span', { class: 'group-mark' }, 'group ' + groupLabel(alloc.allocation_group_uuid)) : ''],
          ['owner', alloc.owner], ['traits', (alloc.traits || []).join(', ')],
          ['created', fmtTime(alloc.created_at)], ['last error', alloc.last_error ? explain(alloc.last_error) : ''],
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

  // ---- allocations and groups ---------------------------------------------

  // explain turns a last_error into something readable: the conductor's
  // text is Ironic's sentence then our per-filter counts, e.g. "Failed to process
  // allocation U: no suitable nodes have the requested traits A. (no node
  // fits: 73 of resource class X, 60 available, 0 with traits A)": the
  // sentence is the summary, the counts a funnel, one line per filter with
  // the nodes it left (older rows: "no node fits: ..." alone).
  function explain(msg) {
    const text = msg.replace(/^Failed to process allocation (group )?[0-9a-f-]+: /, '');
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

  const nodeLink = (uuid) => {
    const ni = S.byUUID.get(uuid), f = S.fleet;
    return el('a', { href: '#', onclick: (ev) => { ev.preventDefault(); showNode(uuid); } },
      ni !== undefined && f.nodes.name[ni] ? f.nodes.name[ni] : uuid.slice(0, 8));
  };

  let allocBusy = false, allocAgain = false, allocRetry = false;
  // allocIdle: no read of the allocations in flight or due again (tests
  // wait for it before counting the reads that follow).
  S.allocIdle = () => !allocBusy && !allocAgain && !allocRetry;
  async function loadAllocations() {
    allocRetry = false;
    if (allocBusy) { allocAgain = true; return; }
    allocBusy = true;
    try {
      const [body] = await Promise.all([api('/v1/allocations?limit=50&sort_key=created_at&sort_dir=desc'), loadGroups()]);
      S.allocations = body.allocations || [];
      let changed = false;
      const rows = S.allocations.map((a) => {
        const prev = S.allocStates.get(a.uuid);
        if (prev !== a.state) changed = true;
        S.allocStates.set(a.uuid, a.state);
        const g = a.allocation_group_uuid;
        return el('tr', { 'data-uuid': a.uuid, 'data-state': a.state, 'data-group': g || '', class: prev === undefined && S.ready ? 'new' : '' },
          el('td', {}, el('span', { class: 'mono' }, a.uuid.slice(0, 8)), a.name ? ' ' + a.name : ''),
          el('td', {}, g ? el('a', { href: '#', class: 'group-mark', title: 'member of allocation group ' + g,
            onclick: (ev) => { ev.preventDefault(); selectGroup(g); } }, groupLabel(g)) : ''),
          el('td', { class: 'class' }, a.resource_class),
          el('td', {}, (a.traits || []).join(', ')),
          el('td', {}, el('span', { class: 'state ' + a.state }, a.state)),
          el('td', {}, a.node_uuid ? nodeLink(a.node_uuid) : ''),
          el('td', { class: 'time' }, fmtTime(a.created_at)),
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
      if (allocAgain) { allocAgain = false; allocRetry = true; setTimeout(loadAllocations, 100); }
    }
  }

  // loadGroups reads the allocation groups (the first page: they list in
  // creation order) and shows those in error and allocating first, then the
  // newest, GROUP_ROWS at most.
  async function loadGroups() {
    let body;
    try {
      body = await api('/v1/allocation_groups?limit=1000');
    } catch (err) {
      $('groups').tBodies[0].replaceChildren(el('tr', {}, el('td', { colspan: 8 }, err.message)));
      return;
    }
    const all = body.allocation_groups || [];
    S.groups = all;
    S.groupByUUID = new Map(all.map((g) => [g.uuid, g]));
    const rank = { error: 0, allocating: 1 };
    const shown = [...all].sort((a, b) => (rank[a.state] ?? 2) - (rank[b.state] ?? 2) ||
      Date.parse(b.created_at) - Date.parse(a.created_at)).slice(0, GROUP_ROWS);
    const errors = all.filter((g) => g.state === 'error').length;
    $('groups-note').textContent = all.length + ' groups' + (errors ? ', ' + errors + ' in error' : '') +
      (all.length > shown.length ? '; showing ' + shown.length : '');
    $('groups').tBodies[0].replaceChildren(...shown.map((g) => {
      const rule = g.required ? 'required ' + g.required : g.preferred ? 'preferred ' + g.preferred : '';
      const members = el('td', { class: 'members' }, g.members.length + ' of ' + g.count);
      g.nodes.forEach((n, k) => { if (n) members.append(k ? ', ' : ': ', nodeLink(n)); });
      return el('tr', { 'data-uuid': g.uuid, 'data-state': g.state, class: S.groupSelected === g.uuid ? 'selected' : '',
        onclick: (ev) => { if (ev.target.tagName !== 'A') selectGroup(g.uuid); } },
      el('td', {}, el('span', { class: 'mono' }, g.uuid.slice(0, 8)), g.name ? ' ' + g.name : ''),
      el('td', {}, el('span', { class: 'state ' + g.state }, g.state)),
      el('td', { class: 'class' }, g.resource_class), el('td', {}, rule), el('td', {}, g.domain || ''),
      members, el('td', { class: 'time' }, fmtTime(g.created_at)),
      el('td', {}, g.last_error ? explain(g.last_error) : ''));
    }));
    markGroupNodes();
  }

  // selectGroup outlines a group's nodes in the grid (again: none).
  function selectGroup(uuid) {
    S.groupSelected = S.groupSelected === uuid ? null : uuid;
    for (const tr of $('groups').tBodies[0].rows) tr.classList.toggle('selected', tr.dataset.uuid === S.groupSelected);
    markGroupNodes();
    draw();
  }
  S.selectGroup = selectGroup;

  function markGroupNodes() {
    const g = S.groupSelected && S.groupByUUID.get(S.groupSelected);
    S.highlight = g ? new Set(g.nodes.map((n) => S.byUUID.get(n)).filter((i) => i !== undefined)) : null;
  }

  // ---- conductors --------------------------------------------------------

  // loadConductors shows each conductor alive, dead (online, heartbeat run
  // out: what metalloc_conductors_dead counts) or stopped (went offline
  // cleanly), as GET /v1/ui/conductors tells them apart; an alive one
  // asked to drain also shows draining or drained.
  async function loadConductors() {
    try {
      const body = await api('/v1/ui/conductors');
      S.conductors = body.conductors || [];
      $('conductors').tBodies[0].replaceChildren(...S.conductors.map((c) => el('tr', { 'data-hostname': c.hostname, 'data-state': c.state },
        el('td', {}, c.hostname), el('td', {}, c.conductor_group || ''),
        el('td', {}, el('span', { class: 'state ' + c.state, title: c.state === 'dead' ? 'online, but the expiry its last heartbeat wrote has passed: its work is taken over' : c.state === 'stopped' ? 'went offline cleanly' : c.drain === 'drained' ? 'heartbeating; drained: it handed its rows over and claims nothing until restarted' : c.drain === 'draining' ? 'heartbeating; draining: finishing its in-flight rows, claiming none' : 'heartbeating' }, c.drain ? c.state + ', ' + c.drain : c.state)),
        el('td', {}, c.state === 'stopped' ? 'since ' + fmtTime(c.updated_at)
          : c.heartbeat_age === null ? '' : c.heartbeat_age.toFixed(1) + ' s ago'))));
    } catch (err) {
      $('conductors').tBodies[0].replaceChildren(el('tr', {}, el('td', { colspan: 4 }, err.status === 403 ? 'not visible to you' : err.message)));
    }
  }

  // ---- lease calendar ----------------------------------------------------

  // The calendar of GET /v1/ui/leases: one row per rack (the topology's
  // finest level), one column per step from the current one; a cell shows
  // the nodes free for the whole step, then a chip per lease holding some
  // of the rack's nodes then (letter as in `metalloc-manage lease
  // calendar`, colour per lease, count), ? for leases the caller may not
  // see. The column holding now is tinted and marked where now is.
  const LEASES_MS = 30000;
  const LEASE_COLORS = ['#8a6fd0', '#2f6fd6', '#d47a1f', '#1f9e8f', '#c2417a', '#5b7f1f', '#7a5230', '#3f51b5', '#b23b3b', '#4e7f9e'];
  const leaseLetter = (i) => { let s = ''; for (i++; i > 0; i = Math.floor((i - 1) / 26)) s = String.fromCharCode(65 + (i - 1) % 26) + s; return s; };
  S.leaseLetter = leaseLetter;

  function leaseCalPath() {
    const p = new URLSearchParams({ step: $('l-step').value });
    const step = Number($('l-step').value), now = Math.floor((Date.now() + S.skew) / 1000);
    const after = now - now % step;
    p.set('after', new Date(after * 1000).toISOString().replace('.000Z', 'Z'));
    p.set('until', new Date((after + Number($('l-days').value) * 86400) * 1000).toISOString().replace('.000Z', 'Z'));
    if ($('l-class').value) p.set('resource_class', $('l-class').value);
    return '/v1/ui/leases?' + p.toString();
  }

  // cellHeading writes a column's start in the browser's time zone: the
  // day (and the hour for steps under a day).
  function cellHeading(t, step) {
    const d = new Date(t * 1000), day = d.toLocaleDateString('en-US', { weekday: 'short' }) + ' ' + pad(d.getMonth() + 1) + '-' + pad(d.getDate());
    return step % 86400 === 0 && d.getHours() === 0 ? day : [day, el('br'), pad(d.getHours()) + ':' + pad(d.getMinutes())];
  }

  async function loadLeaseCalendar() {
    let cal;
    try {
      cal = await api(leaseCalPath());
    } catch (err) {
      $('lease-cal').tBodies[0].replaceChildren(el('tr', {}, el('td', {}, err.message)));
      return;
    }
    S.leaseCal = cal;
    const after = Date.parse(cal.after) / 1000, step = cal.step, now = Date.parse(cal.now) / 1000;
    const steps = cal.rows.length ? cal.rows[0].cells.length : Math.ceil((Date.parse(cal.until) / 1000 - after) / step);
    const nowCol = Math.floor((now - after) / step);
    const level = cal.level || 'pool';
    const head = el('tr', {}, el('th', { class: 'domain' }, level), el('th', {}, 'nodes'));
    for (let i = 0; i < steps; i++) {
      const th = el('th', { class: i === nowCol ? 'now' : '', 'data-col': i }, ...[].concat(cellHeading(after + i * step, step)));
      if (i === nowCol) {
        const mark = el('span', { class: 'now-mark', title: 'now: ' + fmtTime(new Date(now * 1000)) });
        mark.style.left = (100 * (now - after - i * step) / step).toFixed(1) + '%';
        th.append(mark);
      }
      head.append(th);
    }
    $('lease-cal').tHead.replaceChildren(head);
    const color = (i) => LEASE_COLORS[i % LEASE_COLORS.length];
    $('lease-cal').tBodies[0].replaceChildren(...cal.rows.map((r) => {
      const label = !cal.level ? 'all' : r.domain === '' ? '(no ' + cal.level + ')' : r.domain;
      const classes = Object.entries(r.classes).map(([c, n]) => n + ' ' + c).join(', ');
      const tr = el('tr', { 'data-domain': r.domain }, el('th', { class: 'domain' }, label),
        el('td', { title: classes + (r.maintenance ? '; ' + r.maintenance + ' in maintenance' : '') },
          String(r.total) + (r.maintenance ? ' (' + r.maintenance + ' maint.)' : '')));
      r.cells.forEach((c, i) => {
        const from = after + i * step;
        const tips = [label + ', ' + fmtTime(new Date(from * 1000)) + ' for ' + (step >= 86400 ? step / 86400 + ' d' : step / 3600 + ' h') + ': ' + c.free + ' free'];
        const td = el('td', { class: 'cell' + (i === nowCol ? ' now' : ''), 'data-free': c.free },
          el('span', { class: 'free' + (c.free === 0 ? ' none' : '') }, String(c.free)));
        for (const h of c.leases) {
          const l = cal.leases[h.lease];
          const chip = el('span', { class: 'lease-chip', 'data-lease': l.uuid }, leaseLetter(h.lease) + ' ' + h.nodes);
          chip.style.background = color(h.lease);
          td.append(chip);
          tips.push(leaseLetter(h.lease) + ' ' + (l.name || l.uuid) + ' (project ' + l.project_id + ', ' + l.state + '): ' + h.nodes + ' nodes');
        }
        if (c.hidden) {
          td.append(el('span', { class: 'lease-chip hidden' }, '? ' + c.hidden));
          tips.push(c.hidden + ' nodes held by leases you may not see');
        }
        td.title = tips.join('\n');
        tr.append(td);
      });
      return tr;
    }));
    if (!cal.rows.length) {
      $('lease-cal').tBodies[0].replaceChildren(el('tr', {}, el('td', { colspan: steps + 2 },
        'no reservable nodes' + (cal.resource_class ? ' of ' + cal.resource_class : '') + ' (metalloc-manage node set-reservable)')));
    }
    $('lease-legend').replaceChildren(...cal.leases.map((l, i) => {
      const chip = el('span', { class: 'lease-chip' }, leaseLetter(i));
      chip.style.background = color(i);
      return el('li', { 'data-lease': l.uuid }, chip, (l.name || l.uuid) + ' — project ' + l.project_id + ', ' + l.state + ', ' +
        fmtTime(l.start_time) + ' → ' + fmtTime(l.end_time) + ', ' + l.nodes + ' nodes');
    }));
    $('leases-note').textContent = cal.leases.length + ' leases; ' + cal.rows.length + ' ' + level + (cal.rows.length === 1 ? '' : 's') +
      ' with reservable nodes; at ' + fmtTime(new Date(now * 1000));
    if (S.fleet) {
      const keep = $('l-class').value;
      fillSelect($('l-class'), S.fleet.classes.filter((c) => c !== ''));
      $('l-class').value = keep;
    }
    S.leaseCalReady = true;
  }
  S.loadLeaseCalendar = loadLeaseCalendar;
  for (const id of ['l-class', 'l-step', 'l-days']) $(id).addEventListener('change', () => loadLeaseCalendar());

  async function leasesLoop() {
    await loadLeaseCalendar();
    setTimeout(leasesLoop, LEASES_MS);
  }

  // ---- scheduling: event stream if the API has one, else polling ---------

  let fleetTimer = null, fleetBusy = false;
  function scheduleFleet(ms) {
    clearTimeout(fleetTimer);
    fleetTimer = setTimeout(async () => {
      if (fleetBusy) { scheduleFleet(200); return; }
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
    leasesLoop();
    liveLoop();
  }
  start();
})();
