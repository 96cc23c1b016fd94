// Draws the charts of a `sweep report` page from the JSON embedded in it. No libraries, no
// network: every chart is a <canvas> drawn here. The data is computed by sweep; this only draws.
(function () {
  'use strict';
  var errors = [];
  var counts = {};
  function flush() {
    document.body.setAttribute('data-errors', errors.join(' | '));
  }
  window.addEventListener('error', function (e) {
    errors.push(String(e.message || e));
    flush();
  });
  var consoleError = console.error;
  console.error = function () {
    errors.push(Array.prototype.map.call(arguments, String).join(' '));
    flush();
    consoleError.apply(console, arguments);
  };

  var data = JSON.parse(document.getElementById('sweep-data').textContent);
  var tip = document.getElementById('tip');

  // ---- helpers ----

  function fmt(v) {
    if (v === null || v === undefined) return '-';
    if (typeof v !== 'number') return String(v);
    if (v === 0) return '0';
    var a = Math.abs(v);
    if (a >= 1e5 || a < 1e-3) return v.toExponential(3).replace(/\.?0+e/, 'e');
    return String(parseFloat(v.toPrecision(5)));
  }
  function setup(canvas) {
    var dpr = window.devicePixelRatio || 1;
    var w = canvas.clientWidth, h = canvas.clientHeight;
    canvas.width = Math.max(1, Math.round(w * dpr));
    canvas.height = Math.max(1, Math.round(h * dpr));
    var ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    ctx.font = '12px system-ui, sans-serif';
    return {ctx: ctx, w: w, h: h};
  }
  function empty(c, text) {
    c.ctx.fillStyle = '#777';
    c.ctx.textAlign = 'center';
    c.ctx.fillText(text, c.w / 2, c.h / 2);
  }
  function range(values) {
    var lo = Infinity, hi = -Infinity;
    for (var i = 0; i < values.length; i++) {
      var v = values[i];
      if (v === null || !isFinite(v)) continue;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    if (lo === Infinity) return [0, 1];
    var max = Number.MAX_VALUE;
    // One value: half a unit each side, or 5% of it where half a unit is lost in its rounding.
    if (lo === hi) { var d = Math.max(0.5, Math.abs(lo) * 0.05); lo -= d; hi += d; }
    var pad = (hi / 2 - lo / 2) * 0.08;  // halves: hi - lo may pass the largest number
    return [Math.max(lo - pad, -max), Math.min(hi + pad, max)];
  }
  // Where v lies from lo (0) to hi (1), without forming hi - lo (it may overflow).
  function frac(v, lo, hi) { return (v / 2 - lo / 2) / (hi / 2 - lo / 2); }
  // Round tick values inside [lo, hi]: steps of 1, 2 or 5 times a power of ten, about 5;
  // whole numbers only when `whole` (trial numbers).
  function ticks(lo, hi, whole) {
    var raw = hi / 5 - lo / 5, mag = Math.pow(10, Math.floor(Math.log10(raw))), step = mag;
    [1, 2, 5, 10].some(function (k) {
      if (!isFinite(k * mag)) return true;  // past the largest number: keep the last step
      step = k * mag;
      return step >= raw;
    });
    if (whole && step < 1) step = 1;
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi && out.length < 20; v += step) {
      out.push(Math.abs(v) < step * 1e-9 ? 0 : parseFloat(v.toPrecision(12)));
    }
    return out;
  }
  // A plot frame with round labels on each axis; returns the value-to-pixel maps.
  function frame(c, xr, yr, xname, yname, xWhole) {
    var ctx = c.ctx, yticks = ticks(yr[0], yr[1]);
    // The left margin holds the widest y label (1.5e+21 is wider than 0.9) and the axis title.
    var widest = 0;
    yticks.forEach(function (yv) { widest = Math.max(widest, ctx.measureText(fmt(yv)).width); });
    var m = {l: Math.max(64, Math.ceil(widest) + 30), r: 16, t: 12, b: 36};
    var pw = c.w - m.l - m.r, ph = c.h - m.t - m.b;
    var X = function (x) { return m.l + frac(x, xr[0], xr[1]) * pw; };
    var Y = function (y) { return m.t + (1 - frac(y, yr[0], yr[1])) * ph; };
    ctx.strokeStyle = '#ddd';
    ctx.fillStyle = '#555';
    ctx.lineWidth = 1;
    yticks.forEach(function (yv) {
      var y = Y(yv);
      ctx.beginPath(); ctx.moveTo(m.l, y); ctx.lineTo(m.l + pw, y); ctx.stroke();
      ctx.textAlign = 'right'; ctx.textBaseline = 'middle';
      ctx.fillText(fmt(yv), m.l - 6, y);
    });
    ctx.textAlign = 'center'; ctx.textBaseline = 'top';
    ticks(xr[0], xr[1], xWhole).forEach(function (xv) {
      ctx.fillText(fmt(xv), X(xv), m.t + ph + 6);
    });
    ctx.fillText(xname, m.l + pw / 2, m.t + ph + 20);
    ctx.save();
    ctx.translate(12, m.t + ph / 2); ctx.rotate(-Math.PI / 2);
    ctx.textAlign = 'center'; ctx.fillText(yname, 0, 0);
    ctx.restore();
    ctx.strokeStyle = '#999';
    ctx.strokeRect(m.l, m.t, pw, ph);
    return {X: X, Y: Y, m: m, pw: pw, ph: ph};
  }
  // Viridis-like: 0 dark purple (worst) to 1 yellow (best).
  var stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  function colour(t) {
    t = Math.max(0, Math.min(1, t)) * (stops.length - 1);
    var i = Math.min(stops.length - 2, Math.floor(t)), f = t - i, a = stops[i], b = stops[i + 1];
    return 'rgb(' + Math.round(a[0] + (b[0] - a[0]) * f) + ',' +
        Math.round(a[1] + (b[1] - a[1]) * f) + ',' + Math.round(a[2] + (b[2] - a[2]) * f) + ')';
  }
  var palette = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2',
                 '#7f7f7f', '#bcbd22', '#17becf'];
  function showTip(ev, text) {
    tip.textContent = text;
    tip.style.display = 'block';
    tip.style.left = (ev.pageX + 12) + 'px';
    tip.style.top = (ev.pageY + 12) + 'px';
  }
  function hideTip() { tip.style.display = 'none'; }

  // ---- charts ----

  var hover = {};

  function drawHistory() {
    var h = data.history, c = setup(document.getElementById('history'));
    if (!h.points.length) { empty(c, 'no trial has a value of ' + h.metric + ' yet'); return 0; }
    var xs = h.points.map(function (p) { return p[0]; });
    var ys = h.points.map(function (p) { return p[1]; });
    var f = frame(c, range(xs), range(ys), 'trial', h.metric + ' (' + h.mode + ')', true);
    var ctx = c.ctx, n = 0;
    var size = h.points.length > 2000 ? 2 : 4;
    ctx.globalAlpha = h.points.length > 2000 ? 0.6 : 0.9;
    for (var pass = 0; pass < 2; pass++) {  // pruned below completed
      ctx.fillStyle = pass === 0 ? '#aaa' : '#1f77b4';
      for (var i = 0; i < h.points.length; i++) {
        var p = h.points[i];
        if ((p[2] === 1) !== (pass === 1)) continue;
        if (p[3] === 1) {  // TPE's startup random trial
          ctx.strokeStyle = ctx.fillStyle;
          ctx.lineWidth = 1;
          ctx.strokeRect(f.X(p[0]) - size / 2, f.Y(p[1]) - size / 2, size, size);
        } else {
          ctx.fillRect(f.X(p[0]) - size / 2, f.Y(p[1]) - size / 2, size, size);
        }
        n++;
      }
    }
    ctx.globalAlpha = 1;
    if (h.best.length) {
      ctx.strokeStyle = '#d62728';
      ctx.lineWidth = 2;
      ctx.beginPath();
      ctx.moveTo(f.X(h.best[0][0]), f.Y(h.best[0][1]));
      for (var j = 1; j < h.best.length; j++) {
        ctx.lineTo(f.X(h.best[j][0]), f.Y(h.best[j - 1][1]));
        ctx.lineTo(f.X(h.best[j][0]), f.Y(h.best[j][1]));
      }
      ctx.lineTo(f.X(xs[xs.length - 1]), f.Y(h.best[h.best.length - 1][1]));
      ctx.stroke();
    }
    hover.history = function (ev, x, y) {
      var bestI = -1, bestD = 100;
      for (var i = 0; i < h.points.length; i++) {
        var dx = f.X(h.points[i][0]) - x, dy = f.Y(h.points[i][1]) - y, d = dx * dx + dy * dy;
        if (d < bestD) { bestD = d; bestI = i; }
      }
      if (bestI < 0) return hideTip();
      var p = h.points[bestI];
      var by = !h.tpe || !p[3] ? ''
          : p[3] === 1 ? ', proposed by startup random' : ', proposed by tpe';
      showTip(ev, 'trial ' + p[0] + (p[2] ? '' : ' (pruned)') + by + ': ' + h.metric + ' ' +
              fmt(p[1]));
    };
    return n;
  }

  function drawParallel() {
    var p = data.parallel, c = setup(document.getElementById('parallel'));
    if (!p.lines.length) { empty(c, 'no completed trial yet'); return 0; }
    var ctx = c.ctx, axes = p.axes, top = 36, bottom = c.h - 24, left = 70, right = c.w - 70;
    var ax = function (i) {
      return axes.length === 1 ? (left + right) / 2 : left + (right - left) * i / (axes.length - 1);
    };
    var ay = function (pos) { return bottom - pos * (bottom - top); };
    var lines = p.lines.slice().sort(function (a, b) { return a[1] - b[1]; });  // best on top
    ctx.lineWidth = 1;
    ctx.globalAlpha = lines.length > 2000 ? 0.25 : (lines.length > 200 ? 0.5 : 0.85);
    var n = 0;
    for (var i = 0; i < lines.length; i++) {
      var l = lines[i];
      ctx.strokeStyle = colour(l[1]);
      ctx.beginPath();
      var pen = false;
      for (var a = 0; a < axes.length; a++) {
        var pos = l[2 + a];
        if (pos === null) { pen = false; continue; }
        if (pen) ctx.lineTo(ax(a), ay(pos)); else ctx.moveTo(ax(a), ay(pos));
        pen = true;
      }
      ctx.stroke();
      n++;
    }
    ctx.globalAlpha = 1;
    for (var k = 0; k < axes.length; k++) {
      var x = ax(k);
      ctx.strokeStyle = '#333';
      ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, bottom); ctx.stroke();
      ctx.fillStyle = '#111';
      ctx.textAlign = 'center'; ctx.textBaseline = 'bottom';
      ctx.fillText(axes[k].name + (axes[k].scale === 'log' ? ' (log)' : ''), x, top - 14);
      ctx.textAlign = 'left'; ctx.textBaseline = 'middle';
      ctx.fillStyle = '#444';
      var ticks = axes[k].ticks;
      for (var t = 0; t < ticks.length; t++) {
        if (ticks[t][0] === null) continue;
        var y = ay(ticks[t][0]);
        ctx.beginPath(); ctx.moveTo(x - 3, y); ctx.lineTo(x + 3, y); ctx.stroke();
        var label = ticks[t][1];
        if (label.length > 14) label = label.slice(0, 13) + '\u2026';
        ctx.fillText(label, x + 5, y);
      }
    }
    return n;
  }

  function drawCurves() {
    var cv = data.curves, c = setup(document.getElementById('curves'));
    if (!cv.top.length && !cv.pruned.length && !cv.unfinished.length) {
      empty(c, 'no reports of ' + cv.metric + ' yet'); return 0;
    }
    var xs = [], ys = [];
    cv.top.concat(cv.unfinished).forEach(function (t) {
      t.points.forEach(function (p) { xs.push(p[0]); ys.push(p[1]); });
    });
    cv.pruned.forEach(function (p) { xs.push(p[1]); ys.push(p[2]); });
    cv.rungs.forEach(function (r) { xs.push(r); });
    // Epochs or steps that are whole numbers get whole ticks (no epoch 1.5).
    var whole = xs.every(function (x) { return x === Math.round(x); });
    var f = frame(c, range(xs), range(ys), cv.resource, cv.metric, whole);
    var ctx = c.ctx, n = 0;
    ctx.setLineDash([4, 4]);
    ctx.strokeStyle = '#bbb';
    ctx.fillStyle = '#888';
    ctx.textAlign = 'left'; ctx.textBaseline = 'top';
    cv.rungs.forEach(function (r, k) {
      var x = f.X(r);
      ctx.beginPath(); ctx.moveTo(x, f.m.t); ctx.lineTo(x, f.m.t + f.ph); ctx.stroke();
      ctx.fillText('rung ' + k, x + 3, f.m.t + 2);
    });
    ctx.setLineDash([]);
    ctx.strokeStyle = '#666';
    ctx.lineWidth = 1;
    cv.pruned.forEach(function (p) {  // an x where each pruned trial stopped
      var x = f.X(p[1]), y = f.Y(p[2]);
      ctx.beginPath();
      ctx.moveTo(x - 3, y - 3); ctx.lineTo(x + 3, y + 3);
      ctx.moveTo(x - 3, y + 3); ctx.lineTo(x + 3, y - 3);
      ctx.stroke();
      n++;
    });
    ctx.lineWidth = 1.5;
    ctx.setLineDash([5, 3]);  // running or interrupted: dashed, grey, under the finished
    ctx.strokeStyle = '#999';
    function stroke(points) {  // a curve; a single point as a dot
      ctx.beginPath();
      points.forEach(function (p, j) {
        if (j) ctx.lineTo(f.X(p[0]), f.Y(p[1])); else ctx.moveTo(f.X(p[0]), f.Y(p[1]));
      });
      if (points.length === 1) ctx.arc(f.X(points[0][0]), f.Y(points[0][1]), 2, 0, 7);
      ctx.stroke();
      n++;
    }
    cv.unfinished.forEach(function (t) { stroke(t.points); });
    ctx.setLineDash([]);
    ctx.lineWidth = 2;
    for (var i = cv.top.length - 1; i >= 0; i--) {  // the best last, on top
      ctx.strokeStyle = palette[i % palette.length];
      stroke(cv.top[i].points);
    }
    var legend = document.getElementById('curves-legend');
    legend.textContent = '';
    cv.top.forEach(function (t, i) {
      var s = document.createElement('span');
      s.style.color = palette[i % palette.length];
      s.textContent = '\u25A0 trial ' + t.trial + ' (' + fmt(t.value) + ')  ';
      legend.appendChild(s);
    });
    if (cv.pruned.length) {
      var s = document.createElement('span');
      s.textContent = '\u00D7 where a pruned trial stopped (' + cv.pruned.length + ')  ';
      legend.appendChild(s);
    }
    if (cv.unfinished.length) {
      var u = document.createElement('span');
      u.style.color = '#777';
      u.textContent = '- - running or interrupted: trial' + (cv.unfinished.length > 1 ? 's ' : ' ') +
          cv.unfinished.map(function (t) { return t.trial; }).join(', ');
      legend.appendChild(u);
    }
    return n;
  }

  function drawImportance() {
    var imp = data.importance, canvas = document.getElementById('importance');
    canvas.style.height = Math.max(60, 28 * imp.length + 10) + 'px';
    var c = setup(canvas);
    if (!imp.length) { empty(c, 'needs at least 3 completed trials whose metric varies'); return 0; }
    var ctx = c.ctx, left = 150, right = c.w - 70, row = Math.min(28, (c.h - 10) / imp.length);
    ctx.textBaseline = 'middle';
    imp.forEach(function (d, i) {
      var y = 5 + i * row, w = Math.max(1, d.fraction * (right - left));
      ctx.fillStyle = '#1f77b4';
      ctx.fillRect(left, y + row * 0.15, w, row * 0.7);
      ctx.fillStyle = '#111';
      ctx.textAlign = 'right';
      ctx.fillText(d.param, left - 8, y + row / 2);
      ctx.textAlign = 'left';
      ctx.fillText((d.fraction * 100).toFixed(1) + '%', left + w + 6, y + row / 2);
    });
    return imp.length;
  }

  function drawBest() {
    var table = document.getElementById('best');
    table.textContent = '';
    var rows = data.best;
    if (!rows.length) return 0;
    var params = [];
    rows.forEach(function (r) {
      Object.keys(r.params).forEach(function (k) { if (params.indexOf(k) < 0) params.push(k); });
    });
    var head = table.insertRow();
    var done = data.sweep.resource === 'epoch' ? 'epochs run' : 'steps run';
    // A TPE sweep says which sampler proposed each trial: TPE, or its startup random search.
    var by = rows.some(function (r) { return r.proposed_by; });
    var heads = ['trial', data.sweep.metric, done, 'duration (s)'];
    if (by) heads.push('proposed by');
    heads.concat(params).forEach(function (h) {
      var th = document.createElement('th');
      th.textContent = h;
      head.appendChild(th);
    });
    rows.forEach(function (r) {
      var tr = table.insertRow();
      var cells = [r.trial, fmt(r.objective), fmt(r.epochs), fmt(r.duration_s)];
      if (by) cells.push(r.proposed_by || '');
      cells.concat(params.map(function (k) {
        var v = r.params[k];
        return v === undefined ? '' : (typeof v === 'number' ? fmt(v) :
            (typeof v === 'string' ? v : JSON.stringify(v)));
      })).forEach(function (v) { tr.insertCell().textContent = v; });
    });
    return rows.length;
  }

  function drawConfig() {
    document.getElementById('config').textContent = data.config;
    return data.config ? data.config.split('\n').length : 0;
  }

  function drawHeader() {
    var s = data.sweep, k = s.counts;
    document.getElementById('title').textContent = 'sweep ' + s.name;
    document.getElementById('summary').textContent =
        s.mode + ' ' + s.metric + ' \u00B7 ' + s.status + ' \u00B7 ' + k.total + ' trials (' +
        k.completed + ' completed, ' + k.pruned + ' pruned, ' + k.failed + ' failed, ' +
        k.interrupted + ' interrupted, ' + k.running + ' running) \u00B7 early stopping: ' +
        s.early_stopping + ' \u00B7 ran ' + fmt(s.active_s) + ' s';
  }

  var charts = [['history', drawHistory], ['parallel', drawParallel], ['curves', drawCurves],
                ['importance', drawImportance], ['best', drawBest], ['config', drawConfig]];
  function drawAll() {
    var status = [];
    charts.forEach(function (c) {
      try {
        counts[c[0]] = c[1]();
      } catch (e) {
        errors.push(c[0] + ': ' + (e && e.message ? e.message : String(e)));
        counts[c[0]] = 'error';
      }
      status.push(c[0] + ':' + counts[c[0]]);
    });
    document.body.setAttribute('data-charts', status.join(' '));
    flush();
  }

  try {
    drawHeader();
  } catch (e) {
    errors.push('header: ' + e.message);
  }
  drawAll();
  var pending = false;
  window.addEventListener('resize', function () {
    if (pending) return;
    pending = true;
    window.requestAnimationFrame(function () { pending = false; drawAll(); });
  });
  var canvas = document.getElementById('history');
  canvas.addEventListener('mousemove', function (ev) {
    var r = canvas.getBoundingClientRect();
    if (hover.history) hover.history(ev, ev.clientX - r.left, ev.clientY - r.top);
  });
  canvas.addEventListener('mouseleave', hideTip);
})();
