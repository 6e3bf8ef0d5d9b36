// Draw every figure of an analysis page with uPlot (figures-data: {div id: Plot.chart()}).
// xy charts: one shared x array, every series aligned to it (null where it has no value);
// modes lines+markers, lines, markers, bar (grouped, categorical x); a series with low/high
// gets a shaded band in its colour. Heatmaps: categorical x and y, cells in viridis, the value
// under the cursor in a line below. document.body.dataset.plotsRendered: the charts drawn (a
// chart whose drawing failed says so in its place, with the console error).
(function(){
  const figures = JSON.parse(document.getElementById('figures-data').textContent);
  const ids = Object.keys(figures);
  const instead = div => div.parentElement.querySelector('a')
    ? 'the PNG link below shows this figure.' : 'this figure has no PNG.';
  if (typeof uPlot === 'undefined') {  // the page was moved without uPlot.iife.min.js
    for (const id of ids) {
      const div = document.getElementById(id);
      div.className = 'chart-missing';
      div.textContent = 'uPlot.iife.min.js is missing next to this page: ' + instead(div);
    }
    document.body.dataset.plotsRendered = '0';
    return;
  }
  const HEIGHT = 300;
  const VIRIDIS = ['#440154', '#472d7b', '#3b528b', '#2c728e', '#21918c', '#28ae80', '#5ec962',
                   '#addc30', '#fde725'];
  const RGB = VIRIDIS.map(c => [1, 3, 5].map(i => parseInt(c.slice(i, i + 2), 16)));
  const INTEGER_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5,
                         2e5, 5e5, 1e6, 2e6, 5e6, 1e7];
  const number = (v, digits) => v !== 0 && Math.abs(v) < 1e-3
    ? Number(v.toPrecision(digits)).toExponential()
    : Number(v.toPrecision(digits)).toLocaleString('en-US', {maximumFractionDigits: 10});
  const fmt = v => v == null ? '–' : number(v, 6);  // hover values: 6 significant digits
  // tick labels as precise as the ticks (uPlot's default stops at 3 decimals: 10.7901 and
  // 10.7903 would both read 10.79); under 0.001 as 1.9e-6
  const ticks = (u, splits) => splits.map(v => v == null ? '' : number(v, 10));

  function viridis(t) {
    t = Math.min(1, Math.max(0, t)) * (RGB.length - 1);
    const i = Math.min(RGB.length - 2, Math.floor(t)), f = t - i;
    const [r, g, b] = RGB[i].map((c, k) => Math.round(c + f * (RGB[i + 1][k] - c)));
    return [`rgb(${r},${g},${b})`, 0.299 * r + 0.587 * g + 0.114 * b];
  }

  function widthOf(div) { return Math.max(300, Math.floor(div.clientWidth)); }

  // a y axis as wide as its longest tick label (uPlot's axis-autosize recipe)
  function autoSize(u, values, axisIdx, cycleNum) {
    const axis = u.axes[axisIdx];
    if (cycleNum > 1) return axis._size;
    let size = axis.ticks.size + axis.gap;
    const longest = (values || []).reduce((a, v) => String(v).length > a.length ? String(v) : a, '');
    if (longest) {
      u.ctx.font = axis.font[0];
      size += u.ctx.measureText(longest).width / uPlot.pxRatio;
    }
    return Math.ceil(size) + 4;
  }

  // categories at 0..n-1: ticks at whole indices (thinned to fit), their labels as values
  function categoryAxis(labels, vertical) {
    return {
      splits: (u, axisIdx, min, max) => {
        const px = (vertical ? u.bbox.height : u.bbox.width) / uPlot.pxRatio;
        const longest = labels.reduce((a, l) => Math.max(a, l.length), 1);
        const room = vertical ? 16 : 7 * longest + 10;
        const step = Math.max(1, Math.ceil(room / (px / Math.max(1, max - min))));
        const out = [];
        for (let i = Math.max(0, Math.ceil(min)); i <= Math.min(labels.length - 1, max); i += step)
          out.push(i);
        return out;
      },
      values: (u, splits) => splits.map(i => labels[i] ?? ''),
    };
  }

  // [0, n-1] (the data, or a double-click's reset) gets half a category each side
  function categoryRange(n) {
    return (u, min, max) => (min === 0 && max === n - 1) || min == null
      ? [-0.5, n - 0.5] : [min, max];
  }

  // grouped bars: bar `slot` of `slots` at each category, from 0 to the value
  function barPaths(slot, slots) {
    return (u, si, i0, i1) => {
      const path = new Path2D(), xs = u.data[0], ys = u.data[si];
      const unit = Math.abs(u.valToPos(1, 'x', true) - u.valToPos(0, 'x', true));
      const w = unit * 0.8 / slots;
      const base = u.valToPos(Math.min(Math.max(0, u.scales.y.min), u.scales.y.max), 'y', true);
      for (let i = i0; i <= i1; i++) {
        if (ys[i] == null) continue;
        const top = u.valToPos(ys[i], 'y', true);
        path.rect(u.valToPos(xs[i], 'x', true) - unit * 0.4 + slot * w, Math.min(top, base), w,
                  Math.max(1, Math.abs(base - top)));
      }
      return {stroke: path, fill: path, clip: null, band: null, gaps: null, flags: 0};
    };
  }

  // the bands (mean ± interval) under the lines, one polygon per run of defined points
  function drawBands(u, f) {
    const ctx = u.ctx;
    ctx.save();
    ctx.beginPath();
    ctx.rect(u.bbox.left, u.bbox.top, u.bbox.width, u.bbox.height);
    ctx.clip();
    f.series.forEach((s, k) => {
      if (!s.low || !u.series[k + 1].show) return;
      const [r, g, b] = [1, 3, 5].map(i => parseInt(s.color.slice(i, i + 2), 16));
      ctx.fillStyle = `rgba(${r},${g},${b},0.18)`;
      let run = [];
      const flush = () => {
        if (run.length === 1) {  // a lone step: its interval as a bar 6 px wide
          const i = run[0], x = u.valToPos(f.x[i], 'x', true), w = 3 * uPlot.pxRatio;
          const y0 = u.valToPos(s.high[i], 'y', true), y1 = u.valToPos(s.low[i], 'y', true);
          ctx.fillRect(x - w, Math.min(y0, y1), 2 * w, Math.abs(y1 - y0));
        } else if (run.length) {
          ctx.beginPath();
          run.forEach((i, j) => {
            const x = u.valToPos(f.x[i], 'x', true), y = u.valToPos(s.high[i], 'y', true);
            j ? ctx.lineTo(x, y) : ctx.moveTo(x, y);
          });
          for (const i of run.slice().reverse())
            ctx.lineTo(u.valToPos(f.x[i], 'x', true), u.valToPos(s.low[i], 'y', true));
          ctx.closePath();
          ctx.fill();
        }
        run = [];
      };
      f.x.forEach((_, i) => {
        if (s.low[i] != null && s.high[i] != null) run.push(i);
        else if (s.y[i] != null) flush();  // a step without a band breaks it
      });
      flush();
    });
    ctx.restore();
  }

  function xyChart(div, f) {
    const bars = f.series.filter(s => s.mode === 'bar');
    const labels = f.xLabels;
    const series = [{label: f.xlabel, value: (u, v) => v == null ? '–'
      : labels ? (labels[v] ?? '–') : fmt(v)}];
    for (const s of f.series) {
      const o = {
        label: s.label, stroke: s.color, width: 1.5, spanGaps: true,
        value: (u, v, si, i) => fmt(v) + (s.low && i != null && s.low[i] != null
          ? ` [${fmt(s.low[i])}, ${fmt(s.high[i])}]` : ''),
      };
      if (s.dash) o.dash = [6, 4];
      if (s.mode === 'bar') {
        Object.assign(o, {paths: barPaths(bars.indexOf(s), bars.length), fill: s.color,
                          width: 1, points: {show: false}});
      } else if (s.mode === 'markers') {
        Object.assign(o, {paths: () => null, points: {show: true, size: 7, fill: s.color,
                                                      space: 0}});
      } else if (s.mode === 'lines') {
        o.points = {show: false};
      } else {
        o.points = {show: true, size: 5, fill: s.color, space: 0};
      }
      series.push(o);
    }
    const yRange = () => {
      if (f.rate) return [-0.02, 1.02];
      let lo = Infinity, hi = -Infinity;
      for (const s of f.series)
        for (const arr of [s.y, s.low || [], s.high || []])
          for (const v of arr) if (v != null) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
      if (bars.length) { lo = Math.min(lo, 0); hi = Math.max(hi, 0); }
      if (lo === Infinity) return [0, 1];
      const span = hi - lo;
      if (!(span > Math.abs(hi) * 1e-9)) {  // flat: a band around the value
        const pad = Math.abs(hi) * 0.1 || 1;
        return [lo - pad, hi + pad];
      }
      // uPlot's rounded range, unless rounding flattened it (1 ± 3e-7 ranges to [1, 1], and
      // ticks over an empty range never end)
      const [a, b] = uPlot.rangeNum(lo, hi, 0.1, true);
      return a <= lo && b >= hi && b - a >= span ? [a, b] : [lo - 0.1 * span, hi + 0.1 * span];
    };
    // room between x ticks for the longer label of the two ends (1,000,000 needs 60 px)
    const xAxis = {label: f.xlabel, values: ticks, space: (u, ai, min, max) =>
      Math.max(50, 7 * Math.max(...ticks(u, [min, max]).map(t => t.length)) + 18)};
    const xScale = {time: false};
    if (labels) {
      Object.assign(xAxis, categoryAxis(labels, false));
      xScale.range = categoryRange(labels.length);
    } else if (f.logX) {
      xScale.distr = 3;
    } else {
      xScale.range = (u, min, max) => min == null ? [0, 1]
        : min === max ? [min - 1, max + 1] : [min, max];
      if (f.integerX) xAxis.incrs = INTEGER_STEPS;
    }
    const opts = {
      title: f.title, width: widthOf(div), height: HEIGHT, series,
      padding: [null, 40, null, null],  // room for the last x tick's label
      scales: {x: xScale, y: {range: yRange}},
      axes: [xAxis, {label: f.ylabel, size: autoSize, values: ticks}],
      cursor: {focus: {prox: 16}},
      focus: {alpha: 0.4},
      hooks: {drawAxes: [u => drawBands(u, f)], draw: [f.drawn]},
    };
    return new uPlot(opts, [f.x, ...f.series.map(s => s.y)], div);
  }

  function heatmap(div, f) {
    const nx = f.xLabels.length, ny = f.yLabels.length;
    const cell = (r, c) => (f.z[r] || [])[c];
    const values = f.z.flat().filter(v => v != null);
    const [zmin, zmax] = f.rate ? [0, 1] : [Math.min(...values), Math.max(...values)];
    const scaled = v => zmax > zmin ? (v - zmin) / (zmax - zmin) : 0.5;
    const info = document.createElement('div');
    info.className = 'hm-info';
    const idle = 'hover a cell for its value';
    info.textContent = idle;
    function drawCells(u) {
      const ctx = u.ctx, px = uPlot.pxRatio;
      ctx.save();
      ctx.beginPath();
      ctx.rect(u.bbox.left, u.bbox.top, u.bbox.width, u.bbox.height);
      ctx.clip();
      const width = Math.abs(u.valToPos(1, 'x', true) - u.valToPos(0, 'x', true));
      const text = nx * ny <= 100 && width > 26 * px;
      ctx.font = `${Math.round(11 * px)}px system-ui, sans-serif`;
      ctx.textAlign = 'center';
      ctx.textBaseline = 'middle';
      for (let r = 0; r < ny; r++) {
        for (let c = 0; c < nx; c++) {
          const v = cell(r, c);
          if (v == null) continue;
          const x0 = u.valToPos(c - 0.5, 'x', true), x1 = u.valToPos(c + 0.5, 'x', true);
          const y0 = u.valToPos(r - 0.5, 'y', true), y1 = u.valToPos(r + 0.5, 'y', true);
          const [colour, luma] = viridis(scaled(v));
          ctx.fillStyle = colour;
          ctx.fillRect(Math.min(x0, x1), Math.min(y0, y1), Math.abs(x1 - x0) + 1,
                       Math.abs(y1 - y0) + 1);
          if (text) {
            ctx.fillStyle = luma < 128 ? '#fff' : '#000';
            ctx.fillText(f.rate || !Number.isInteger(v) ? v.toFixed(2) : String(v), (x0 + x1) / 2,
                         (y0 + y1) / 2);
          }
        }
      }
      ctx.restore();
    }
    function showCell(u) {
      const {left, top} = u.cursor;
      if (left == null || left < 0) { info.textContent = idle; return; }
      const c = Math.round(u.posToVal(left, 'x')), r = Math.round(u.posToVal(top, 'y'));
      info.textContent = c >= 0 && c < nx && r >= 0 && r < ny
        ? `${f.xlabel} ${f.xLabels[c]} · ${f.ylabel} ${f.yLabels[r]} · ${f.zlabel || 'value'} ` +
          fmt(cell(r, c)) : idle;
    }
    const opts = {
      title: f.title, width: widthOf(div), height: HEIGHT,
      legend: {show: false},
      cursor: {x: false, y: false, points: {show: false}, drag: {x: true, y: false}},
      series: [{}, {label: f.zlabel, paths: () => null, points: {show: false}}],
      scales: {x: {time: false, range: categoryRange(nx)}, y: {range: () => [-0.5, ny - 0.5]}},
      axes: [{label: f.xlabel, grid: {show: false}, ...categoryAxis(f.xLabels, false)},
             {label: f.ylabel, grid: {show: false}, size: autoSize,
              ...categoryAxis(f.yLabels, true)}],
      hooks: {drawAxes: [drawCells], setCursor: [showCell], draw: [f.drawn]},
    };
    const u = new uPlot(opts, [[...Array(nx).keys()], Array(nx).fill(null)], div);
    const bar = document.createElement('div');
    bar.className = 'cbar';
    const gradient = VIRIDIS.join(',');
    bar.innerHTML = '<span></span><span></span><i></i><span></span>';
    const [name, low, strip, high] = bar.children;
    name.textContent = f.zlabel || 'value';
    low.textContent = fmt(zmin);
    high.textContent = fmt(zmax);
    strip.style.background = `linear-gradient(to right,${gradient})`;
    div.append(info, bar);
    return u;
  }

  const charts = [], drawn = new Set();
  const failed = (div, error) => {
    console.error(`figure ${div.id} was not drawn:`, error);
    div.className = 'chart-missing';
    div.textContent = `this figure could not be drawn (${error}): ` + instead(div);
  };
  for (const id of ids) {
    const div = document.getElementById(id), f = figures[id];
    f.drawn = () => drawn.add(id);  // uPlot's draw hook: the chart is on its canvas
    try {
      charts.push([div, f.kind === 'heatmap' ? heatmap(div, f) : xyChart(div, f)]);
    } catch (error) {
      failed(div, error);
    }
  }
  let pending = null;
  window.addEventListener('resize', () => {
    clearTimeout(pending);
    pending = setTimeout(() => {
      for (const [div, u] of charts) u.setSize({width: widthOf(div), height: HEIGHT});
    }, 100);
  });
  // uPlot draws in a microtask after its constructor returns: count (and report) after it
  setTimeout(() => {
    for (const [div, u] of charts) {
      if (!drawn.has(div.id)) { u.destroy(); failed(div, 'nothing was drawn'); }
    }
    document.body.dataset.plotsRendered = String(drawn.size);
  }, 0);
})();
