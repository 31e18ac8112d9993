// Styx UI: the charts, SVG drawn here (no library) from queues.history:
// items per minute and depth (historyCharts: the overview and a queue's
// page), and a dead-letter queue's arrivals by error group (groupChart).
'use strict';

(() => {
  const S = window.styx;
  const { h, num, fmt, NO_ERROR } = S;

  // The SVG namespace: a name, never fetched (spelled in parts so that no
  // URL of another origin appears in the UI's files; TestNoExternalURLs).
  const SVG = ['http:', '', 'www.w3.org', '2000', 'svg'].join('/');
  function svg(tag, attrs = {}, ...children) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
    for (const c of children.flat(Infinity)) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : String(c));
    return el;
  }

  // lineChart draws series (each { label, values }, a value per minute,
  // null where unknown) as lines over the last hour, in SVG drawn here (no
  // library). The figure names each series' total (sum, or last value
  // when last is set) in its legend and its aria-label. A line that runs on
  // an earlier one (they share a point above zero: produced and
  // dead-lettered alike when every item dies) is drawn dashed on top of
  // it, and the earlier one wider beneath, so both show; the legend's key
  // is dashed too.
  function lineChart(title, series, { last = false, id } = {}) {
    const W = 560, H = 150, L = 40, R = 8, T = 10, B = 22;
    const n = Math.max(1, ...series.map((x) => x.values.length));
    const top = Math.max(1, ...series.flatMap((x) => x.values.filter((v) => v !== null)));
    const xOf = (i) => L + (n === 1 ? 0 : (i * (W - L - R)) / (n - 1));
    const yOf = (v) => T + (H - T - B) * (1 - v / top);
    const total = (x) => {
      const known = x.values.filter((v) => v !== null);
      if (last) return known.length ? known[known.length - 1] : null;
      return known.reduce((a, b) => a + b, 0);
    };
    const words = series.map((x) => { const t = total(x); return `${x.label} ${t === null ? 'unknown' : fmt(t)}${last ? ' now' : ' in the last hour'}`; });
    // over: the series drawn dashed (they meet an earlier one), each with
    // the label of the first it meets; under: the series drawn wider.
    const over = new Map(), under = new Set();
    series.forEach((x, k) => {
      for (let j = 0; j < k; j++) {
        if (x.values.some((v, i) => v !== null && v > 0 && v === series[j].values[i])) {
          over.set(k, series[j].label);
          under.add(j);
          break;
        }
      }
    });
    const style = (k) => 's' + k + (over.has(k) ? ' over' : '') + (under.has(k) ? ' under' : '');
    const lines = series.map((x, k) => {
      // Unknown values break the line into runs.
      const runs = [];
      let run = [];
      x.values.forEach((v, i) => {
        if (v === null) { if (run.length) runs.push(run); run = []; return; }
        run.push(`${xOf(i).toFixed(1)},${yOf(v).toFixed(1)}`);
      });
      if (run.length) runs.push(run);
      return runs.map((r) => r.length === 1 ? svg('circle', { cx: r[0].split(',')[0], cy: r[0].split(',')[1], r: under.has(k) ? 4 : 2, class: 'dot ' + style(k) })
        : svg('polyline', { points: r.join(' '), class: 'line ' + style(k) }));
    });
    const grid = [0, 0.5, 1].map((f) => svg('line', { x1: L, x2: W - R, y1: yOf(top * f), y2: yOf(top * f), class: 'grid' }));
    const ticks = [[0, '−60m'], [Math.floor((n - 1) / 2), '−30m'], [n - 1, 'now']].map(([i, t]) =>
      svg('text', { x: xOf(i), y: H - 6, class: 'tick', 'text-anchor': i === 0 ? 'start' : i === n - 1 ? 'end' : 'middle' }, t));
    const yLabels = [svg('text', { x: L - 4, y: yOf(top) + 4, class: 'tick', 'text-anchor': 'end' }, fmt(top)),
      svg('text', { x: L - 4, y: yOf(0) + 4, class: 'tick', 'text-anchor': 'end' }, '0')];
    return h('figure', { class: 'chart', id },
      h('figcaption', {}, title),
      svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `${title}: ${words.join(', ')}` }, grid, yLabels, ticks, lines),
      h('ul', { class: 'legend' }, series.map((x, k) => h('li', { title: over.has(k) ? `dashed where it runs on the ${over.get(k)} line` : null },
        h('span', { class: 'key ' + style(k) }), words[k]))));
  }

  // historyCharts draws a queues.history reply: items per minute
  // (produced, completed, dead-lettered) and depth (depthTitle names it;
  // the overview's counts live queues only: liveDepth).
  function historyCharts(hist, depthTitle = 'Depth (items), last hour') {
    const pts = hist.points || [];
    if (pts.length === 0) return null;
    return h('div', { class: 'charts' },
      lineChart('Items per minute, last hour', [
        { label: 'produced', values: pts.map((p) => num(p.produced)) },
        { label: 'completed', values: pts.map((p) => num(p.completed)) },
        { label: 'dead-lettered', values: pts.map((p) => num(p.dead_lettered)) }], { id: 'chart-rates' }),
      lineChart(depthTitle, [{ label: 'depth', values: pts.map((p) => (num(p.depth) < 0 ? null : num(p.depth))) }], { last: true, id: 'chart-depth' }));
  }

  // GROUP_LABELS keeps, for this browser tab (sessionStorage), the error
  // pattern of each group fingerprint a chart has named: once a group's
  // items are gone (redriven, deleted) the server no longer knows its
  // pattern, and its line keeps its label instead of turning into a bare
  // fingerprint.
  const GROUP_LABELS = 'styx.groupPatterns';
  // OTHER_GROUPS is the key of a history point's dead_by_group that counts
  // the arrivals of the groups past the first 100 of a minute
  // (history.OtherGroups).
  const OTHER_GROUPS = 'other';
  function groupLabel(fp, pattern, present) {
    if (fp === OTHER_GROUPS) return 'other error groups (past 100 in a minute)';
    let known = {};
    try { known = JSON.parse(sessionStorage.getItem(GROUP_LABELS) || '{}'); } catch { known = {}; }
    if (pattern) {
      if (known[fp] !== pattern) {
        known[fp] = pattern;
        const keys = Object.keys(known);
        if (keys.length > 500) delete known[keys[0]]; // bounded: the oldest goes
        try { sessionStorage.setItem(GROUP_LABELS, JSON.stringify(known)); } catch { /* full: keep going */ }
      }
      return pattern;
    }
    if (present) return NO_ERROR; // a group of items that died without an error text
    return known[fp] || `error group ${fp} (its items are gone)`;
  }

  // groupChart draws a DLQ's arrivals per minute by error group: the five
  // largest groups of the hour. groups is the dead.groups reply's groups
  // (those that still hold items), when known.
  function groupChart(hist, groups = []) {
    const pts = hist.points || [];
    const totals = {};
    for (const p of pts) for (const [fp, v] of Object.entries(p.dead_by_group || {})) totals[fp] = (totals[fp] || 0) + num(v);
    const top = Object.keys(totals).sort((a, b) => totals[b] - totals[a]).slice(0, 5);
    if (top.length === 0) return h('p', { class: 'muted', id: 'chart-groups' }, 'No dead items arrived in the last hour.');
    const patterns = hist.group_patterns || {};
    return lineChart('Dead-lettered per minute by error group, last hour',
      top.map((fp) => ({ label: groupLabel(fp, patterns[fp], groups.some((g) => g.fingerprint === fp)), values: pts.map((p) => num((p.dead_by_group || {})[fp])) })), { id: 'chart-groups' });
  }

  Object.assign(S, { historyCharts, groupChart });
})();
