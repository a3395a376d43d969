// metalloc operator page: the fleet grid's layouts, painting and hit tests
// (app.js fetches and drives; this file only computes and paints). Three
// layouts, by what the fleet summary carries:
//   nodes  one cell per node, racks as columns of cells, one line per
//          topology row; cells as large as lets the whole grid fit the panel
//   racks  one tile per rack (too many nodes to draw), split by state
//   rows   one bar per topology row (too many racks to draw)
'use strict';
window.MetallocGrid = (function () {
  const LABEL_H = 13, ROW_LABEL_W = 52, GAP_X = 6, GAP_Y = 8;
  const MAX_CELL = 40, MIN_CELL = 4, MAX_TILE = 56, MIN_TILE = 6, ROW_BAR_H = 18;

  const rowLabel = (row) => (row === '' ? 'no row' : 'row ' + row);

  // flow places items ({row, w, h}) left to right from x = ROW_LABEL_W, a
  // new line at each new topology row and when width is used up. It
  // returns their positions, the height, the widest line and the row
  // labels.
  function flow(items, width, gapX, gapY) {
    const x = new Float32Array(items.length), y = new Float32Array(items.length), labels = [];
    let cx = ROW_LABEL_W, cy = 4, lineH = 0, prevRow = null, used = 0;
    for (let i = 0; i < items.length; i++) {
      const it = items[i];
      if (it.row !== prevRow || cx + it.w > width) {
        if (prevRow !== null) cy += lineH + (it.row !== prevRow ? gapY : gapX);
        if (it.row !== prevRow) labels.push({ y: cy, text: rowLabel(it.row) });
        cx = ROW_LABEL_W; lineH = 0; prevRow = it.row;
      }
      x[i] = cx; y[i] = cy;
      cx += it.w + gapX;
      used = Math.max(used, cx - gapX);
      lineH = Math.max(lineH, it.h);
    }
    return { x, y, labels, height: cy + lineH + 6, used };
  }

  // layoutNodes places the summary's nodes: each rack a block of columns
  // of perCol cells, in id order. It tries cell sizes from MAX_CELL down
  // and 1 to 6 columns per rack, and takes the largest cell (fewest
  // columns) whose grid fits width x height; if none does, the smallest
  // (the panel scrolls).
  function layoutNodes(f, width, height) {
    const n = f.nodes.uuid.length, R = f.racks.length;
    const start = new Int32Array(R + 1), order = new Int32Array(n), fillAt = new Int32Array(R);
    for (let i = 0; i < n; i++) if (f.nodes.rack[i] >= 0) start[f.nodes.rack[i] + 1]++;
    for (let r = 0; r < R; r++) start[r + 1] += start[r];
    for (let i = 0; i < n; i++) { const r = f.nodes.rack[i]; if (r >= 0) order[start[r] + fillAt[r]++] = i; }
    const racks = [];
    let maxCount = 1;
    for (let r = 0; r < R; r++) {
      const count = start[r + 1] - start[r];
      if (count > 0) { racks.push({ r, start: start[r], count, row: f.racks[r].row }); maxCount = Math.max(maxCount, count); }
    }
    const shape = (cell, perCol) => racks.map((rk) => {
      const cols = Math.max(1, Math.ceil(rk.count / perCol));
      return { row: rk.row, w: Math.max(cols * cell, cell >= 8 ? 44 : 16), h: LABEL_H + Math.min(rk.count, perCol) * cell, cols };
    });
    const attempt = (cell, k) => {
      const perCol = Math.max(1, Math.ceil(maxCount / k)), items = shape(cell, perCol);
      return { cell, perCol, items, fl: flow(items, width, GAP_X, GAP_Y) };
    };
    // per column count, the largest cell that fits (binary search: the
    // grid only grows with the cell); the largest of those, fewest columns
    let best = null;
    for (let k = 1; k <= 6; k++) {
      let lo = MIN_CELL, hi = MAX_CELL, fit = null;
      while (lo <= hi) {
        const mid = (lo + hi) >> 1, a = attempt(mid, k);
        if (a.fl.height <= height) { fit = a; lo = mid + 1; } else hi = mid - 1;
      }
      if (fit && (!best || fit.cell > best.cell)) best = fit;
    }
    if (!best) { // nothing fits: the shortest at the smallest cell
      for (let k = 1; k <= 6; k++) {
        const a = attempt(MIN_CELL, k);
        if (!best || a.fl.height < best.fl.height) best = a;
      }
    }
    const { cell, perCol, items, fl } = best;
    const x = new Float32Array(n), y = new Float32Array(n);
    const placed = racks.map((rk, j) => {
      const it = items[j], rx = fl.x[j], ry = fl.y[j];
      for (let k = 0; k < rk.count; k++) {
        const i = order[rk.start + k];
        x[i] = rx + Math.floor(k / perCol) * cell;
        y[i] = ry + LABEL_H + (k % perCol) * cell;
      }
      const name = f.racks[rk.r].rack;
      return { r: rk.r, x: rx, y: ry, w: it.w, h: it.h, cols: it.cols, start: rk.start, count: rk.count,
        label: name === '' ? '—' : cell >= 8 ? 'rack ' + name : name };
    });
    return { mode: 'nodes', cell, fill: cell - (cell >= 8 ? 2 : 1), perCol, racks: placed, rowLabels: fl.labels,
      order, x, y, width, height: fl.height, used: fl.used };
  }

  // layoutTiles places one square tile per rack, as large as lets every
  // rack fit width x height (else the smallest, and the panel scrolls).
  function layoutTiles(f, width, height) {
    const racks = f.racks;
    const attempt = (t, th) => {
      const items = racks.map((r) => ({ row: r.row, w: t, h: th }));
      return { t, th, fl: flow(items, width, t >= 16 ? 3 : 1, GAP_Y) };
    };
    // the widest square tile that fits, else the smallest; then as tall
    // (up to three times its width) as still fits: a row's racks usually
    // fill the width before the rows fill the height
    const largest = (lo, hi, make) => {
      let best = null;
      while (lo <= hi) {
        const mid = (lo + hi) >> 1, a = make(mid);
        if (a.fl.height <= height) { best = a; lo = mid + 1; } else hi = mid - 1;
      }
      return best;
    };
    let best = largest(MIN_TILE, MAX_TILE, (t) => attempt(t, t)) || attempt(MIN_TILE, MIN_TILE);
    best = largest(best.t, 3 * best.t, (th) => attempt(best.t, th)) || best;
    const { t, th, fl } = best;
    return { mode: 'racks', tile: t, rowLabels: fl.labels, width, height: fl.height, used: fl.used,
      items: racks.map((r, k) => ({ k, x: fl.x[k], y: fl.y[k], w: t, h: th, label: r.rack })) };
  }

  // layoutRows gives each topology row a bar across the width.
  function layoutRows(f, width) {
    const items = f.rows.map((r, k) => ({ k, x: ROW_LABEL_W + 40, y: 4 + k * (ROW_BAR_H + 3), w: width - ROW_LABEL_W - 48, h: ROW_BAR_H }));
    return { mode: 'rows', items, rowLabels: [], width, height: 8 + f.rows.length * (ROW_BAR_H + 3), used: width };
  }

  // stacked paints counts (per state, of total) as segments of the box,
  // bottom up (vertical) or left to right, the rest dim.
  function stacked(ctx, colors, dim, box, counts, total, vertical) {
    ctx.fillStyle = dim;
    ctx.fillRect(box.x, box.y, box.w, box.h);
    if (!total) return;
    let acc = 0;
    for (let s = 0; s < counts.length; s++) {
      if (!counts[s]) continue;
      ctx.fillStyle = colors[s];
      const a = acc / total, b = (acc + counts[s]) / total;
      if (vertical) {
        const y0 = box.y + box.h * (1 - b), y1 = box.y + box.h * (1 - a);
        ctx.fillRect(box.x, y0, box.w, Math.max(1, y1 - y0));
      } else {
        const x0 = box.x + box.w * a, x1 = box.x + box.w * b;
        ctx.fillRect(x0, box.y, Math.max(1, x1 - x0), box.h);
      }
      acc += counts[s];
    }
  }

  // draw paints what of L lies between view.top and view.bottom (grid
  // coordinates) on ctx, already translated; it returns how many nodes it
  // painted (nodes layout) or items (the others).
  function draw(ctx, L, f, view) {
    const colors = f.states.map((s) => view.colors[s] || '#000');
    ctx.textBaseline = 'top';
    ctx.fillStyle = '#4b535c';
    ctx.font = '600 11px system-ui, sans-serif';
    for (const rl of L.rowLabels) if (rl.y + 30 > view.top && rl.y < view.bottom) ctx.fillText(rl.text, 2, rl.y + 13);
    const visible = (it) => it.y < view.bottom && it.y + it.h > view.top;
    if (L.mode === 'rows') {
      let n = 0;
      for (const it of L.items) {
        if (!visible(it)) continue;
        const r = f.rows[it.k];
        ctx.fillStyle = '#4b535c';
        ctx.font = '11px system-ui, sans-serif';
        ctx.fillText(rowLabel(r.row), 2, it.y + 3, ROW_LABEL_W + 36);
        stacked(ctx, colors, view.dim, it, r.states, r.total, false);
        n++;
      }
      return n;
    }
    if (L.mode === 'racks') {
      let n = 0;
      ctx.font = '9px system-ui, sans-serif';
      for (const it of L.items) {
        if (!visible(it)) continue;
        const r = f.racks[it.k];
        stacked(ctx, colors, view.dim, it, r.states, r.total, true);
        if (L.tile >= 20) { ctx.fillStyle = '#1d2228'; ctx.fillText(it.label, it.x + 2, it.y + 2, it.w - 4); }
        n++;
      }
      return n;
    }
    const vis = L.racks.filter(visible);
    ctx.font = (L.cell >= 8 ? 10 : 8) + 'px system-ui, sans-serif';
    ctx.fillStyle = '#6b737c';
    for (const rk of vis) ctx.fillText(rk.label, rk.x, rk.y + 1, rk.w);
    // one pass per colour, so the fill style changes six times, not per cell
    const st = f.nodes.state, m = view.match, X = L.x, Y = L.y, w = L.fill, order = L.order;
    let drawn = 0;
    for (let c = -1; c < colors.length; c++) {
      ctx.fillStyle = c < 0 ? view.dim : colors[c];
      for (const rk of vis) {
        for (let k = rk.start, end = rk.start + rk.count; k < end; k++) {
          const i = order[k];
          if ((m[i] ? st[i] : -1) === c) { ctx.fillRect(X[i], Y[i], w, w); drawn++; }
        }
      }
    }
    if (view.highlight && view.highlight.size) {
      ctx.strokeStyle = '#1d2228';
      ctx.lineWidth = 1;
      for (const i of view.highlight) ctx.strokeRect(X[i] - 1.5, Y[i] - 1.5, w + 3, w + 3);
    }
    if (view.selected >= 0) {
      ctx.strokeStyle = '#000';
      ctx.lineWidth = 2;
      ctx.strokeRect(X[view.selected] - 1, Y[view.selected] - 1, w + 2, w + 2);
    }
    return drawn;
  }

  // hit is what lies at grid point (px, py): {node: i}, {rack: k},
  // {row: k} or null.
  function hit(L, px, py) {
    if (!L) return null;
    if (L.mode !== 'nodes') {
      for (const it of L.items) {
        if (px >= it.x && px < it.x + it.w && py >= it.y && py < it.y + it.h) return L.mode === 'racks' ? { rack: it.k } : { row: it.k };
      }
      return null;
    }
    for (const rk of L.racks) {
      if (px < rk.x || px >= rk.x + rk.w || py < rk.y || py >= rk.y + rk.h) continue;
      const col = Math.floor((px - rk.x) / L.cell), row = Math.floor((py - rk.y - LABEL_H) / L.cell);
      if (row < 0 || row >= L.perCol) return null;
      const k = col * L.perCol + row;
      return k < rk.count ? { node: L.order[rk.start + k] } : null;
    }
    return null;
  }

  return { layoutNodes, layoutTiles, layoutRows, draw, hit };
})();
