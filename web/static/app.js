// Styx UI. Plain JavaScript, no dependencies, no build step.
//
// Every call to the server goes through api(): one place that adds the API
// key (Authorization: Bearer) and asks for one when the server answers 401.
// Pages are rendered from the path (see route); links are ordinary links,
// so every page can be bookmarked, shared and opened in a new tab.
'use strict';

(() => {
  const KEY_STORAGE = 'styx.apiKey';
  const REASONS = ['max_attempts', 'expired', 'explicit'];
  const PAGE_SIZE = 50;
  // HIDDEN_QUEUE stands for a queue the key does not cover in every answer
  // (internal/auth/hidden.go); no request may name it.
  const HIDDEN_QUEUE = '~hidden';
  const HIDDEN_TEXT = 'a queue this key cannot see';
  const main = document.getElementById('main');
  // R is the redrive outcomes, canary and dialog defaults (redrive.js).
  const R = window.styxRedrive;
  // A is the Activity panel of the queue and DLQ pages (activity.js).
  const A = window.styxActivity;
  let page = 0; // bumped on each navigation; stale async work checks it
  // L is the live-queue controls of a queue's page (livequeue.js).
  const L = window.styxLive;

  // ---------------------------------------------------------------- API

  class APIError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  // api calls /v1/<method> with a JSON body and returns the JSON reply.
  // It sends the API key kept in sessionStorage, if any; on 401 it asks
  // for a key once and retries. Errors throw APIError(status, message).
  async function api(method, body = {}, retried = false) {
    const headers = { 'Content-Type': 'application/json', Accept: 'application/json' };
    const key = sessionStorage.getItem(KEY_STORAGE);
    if (key) headers.Authorization = 'Bearer ' + key;
    let res;
    try {
      res = await fetch('/v1/' + method, { method: 'POST', headers, body: JSON.stringify(body) });
    } catch (e) {
      throw new APIError(0, 'the server cannot be reached: ' + e.message);
    }
    const text = await res.text();
    let data = {};
    if (text) {
      try { data = JSON.parse(text); } catch { data = { message: text }; }
    }
    if (res.status === 401 && !retried) {
      const why = key ? 'The server refused this API key. Enter another.' : 'This server asks for an API key.';
      if (await askKey(why)) return api(method, body, true);
    }
    if (!res.ok) throw new APIError(res.status, data.message || res.statusText || 'HTTP ' + res.status);
    return data;
  }

  // askKey shows the API key dialog; it resolves true when a key was
  // given. Calls made together that all answer 401 share one prompt.
  let keyPrompt = null;
  function askKey(why) {
    if (!keyPrompt) keyPrompt = promptKey(why).finally(() => { keyPrompt = null; });
    return keyPrompt;
  }

  function promptKey(why) {
    const dlg = document.getElementById('key-dialog');
    const input = document.getElementById('key-input');
    document.getElementById('key-why').textContent = why + ' The key is kept in this browser tab only (sessionStorage).';
    input.value = '';
    return new Promise((resolve) => {
      dlg.addEventListener('close', () => {
        if (dlg.returnValue === 'save' && input.value.trim() !== '') {
          sessionStorage.setItem(KEY_STORAGE, input.value.trim());
          resolve(true);
          return;
        }
        if (dlg.returnValue === 'clear') sessionStorage.removeItem(KEY_STORAGE);
        resolve(false);
      }, { once: true });
      dlg.showModal();
      input.focus();
    });
  }

  // BUSY_NOTE is what a click on an action says while another action is
  // in progress (see action).
  const BUSY_NOTE = 'Another action is in progress: finish or cancel it first.';

  // confirmOwner is the call of confirmAction whose question the dialog
  // shows (null while it is closed). Owned by confirmAction.
  let confirmOwner = null;

  // confirmAction shows the confirmation dialog with body (nodes) and
  // resolves true on OK. okLabel names the action; with okLabel null only
  // Cancel is offered. The dialog answers one call at a time: a call made
  // while it is open for another is refused (resolves false at once and
  // leaves the dialog as it is), and the dialog's OK confirms only the call
  // that showed it (issue 36: it once confirmed every call that asked).
  function confirmAction(title, body, okLabel, danger = false) {
    const dlg = document.getElementById('confirm-dialog');
    const ok = document.getElementById('confirm-ok');
    if (confirmOwner !== null || dlg.open) {
      toast(BUSY_NOTE);
      return Promise.resolve(false);
    }
    const me = {};
    confirmOwner = me;
    document.getElementById('confirm-title').textContent = title;
    document.getElementById('confirm-body').replaceChildren(...body.filter(Boolean));
    ok.hidden = okLabel === null;
    ok.textContent = okLabel || 'OK';
    ok.className = danger ? 'danger' : 'primary';
    return new Promise((resolve) => {
      const closed = () => {
        const mine = confirmOwner === me;
        if (mine) confirmOwner = null;
        resolve(mine && dlg.returnValue === 'ok');
      };
      dlg.addEventListener('close', closed, { once: true });
      dlg.returnValue = '';
      try {
        dlg.showModal();
      } catch (e) {
        dlg.removeEventListener('close', closed);
        if (confirmOwner === me) confirmOwner = null;
        toast(e.message);
        resolve(false);
        return;
      }
      (okLabel === null ? dlg.querySelector('button[value=cancel]') : ok).focus();
    });
  }

  // acting is the action in progress (see action), or null. Owned by
  // action.
  let acting = null;

  // action makes fn (a flow that may ask for confirmation: a dry run, a
  // dialog, then its call) a button's click handler. Actions run one at a
  // time, from the click to the end of the flow: meanwhile the button is
  // busy (disabled, aria-busy), a click on any other action is refused
  // with a note instead of opening a dialog of its own or joining this
  // one, and the page does not redraw itself under it.
  function action(fn) {
    return async (ev) => {
      const button = ev && ev.currentTarget instanceof HTMLButtonElement ? ev.currentTarget : null;
      if (acting !== null) { toast(BUSY_NOTE); return; }
      const me = {};
      acting = me;
      if (button) { button.disabled = true; button.setAttribute('aria-busy', 'true'); }
      try {
        await fn();
      } catch (e) {
        toast(e.message);
      } finally {
        if (acting === me) acting = null;
        if (button) {
          button.disabled = false;
          button.removeAttribute('aria-busy');
          // A disabled button loses the focus; give it back if nothing
          // else took it (the dialog returns it to where it was: nowhere).
          const a = document.activeElement;
          if (button.isConnected && (!a || a === document.body)) button.focus({ preventScroll: true });
        }
      }
    };
  }

  // ---------------------------------------------------------------- DOM

  // h builds an element: h('a', {href: '/x'}, 'text', child...). Text is
  // always set as text, never parsed as HTML.
  function h(tag, attrs = {}, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'class') el.className = v;
      else if (k in el && typeof v !== 'string') el[k] = v;
      else el.setAttribute(k, v === true ? '' : v);
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : String(c));
    }
    return el;
  }

  function table(caption, headers, rows) {
    return h('table', {},
      h('caption', {}, caption),
      h('thead', {}, h('tr', {}, headers.map((x) => {
        const [label, cls] = Array.isArray(x) ? x : [x, ''];
        return h('th', { scope: 'col', class: cls }, label);
      }))),
      h('tbody', {}, rows));
  }

  function show(...nodes) {
    main.replaceChildren(...nodes.flat().filter((n) => n !== null && n !== undefined && n !== false));
  }

  function toast(msg) {
    const el = document.getElementById('status');
    el.textContent = msg;
    el.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { el.hidden = true; }, 6000);
  }

  function errorBox(e) {
    const box = h('div', { class: 'error-box', role: 'alert' }, e.message || String(e));
    if (e.status === 401) {
      box.append(' ', h('button', { type: 'button', class: 'link', onclick: () => askKey('Enter an API key.').then(render) }, 'Enter an API key'));
    }
    return box;
  }

  // ---------------------------------------------------------------- charts

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

  // ---------------------------------------------------------------- formats

  const num = (v) => Number(v || 0);
  const fmt = (v) => num(v).toLocaleString('en-US');
  const enc = encodeURIComponent;
  // iid is the id to name an item by: its first id, which stays for its
  // whole life in the queue (ADR 0031; every lookup by id takes it), or its
  // id from a server that does not send one.
  const iid = (it) => it.first_id || it.id;
  const plural = (n, one, many) => `${fmt(n)} ${num(n) === 1 ? one : many}`;

  // unset: an omitted time, or Go's zero time, which the server sends for
  // Querator's time fields that are not set.
  function unset(ts) { return !ts || ts.startsWith('0001-01-01T'); }

  // ago says how long ago ts was ("7m26s ago"), or, for a time to come,
  // how long until it ("in 13d23h").
  function ago(ts) {
    if (unset(ts)) return '–';
    const t = Date.parse(ts);
    if (Number.isNaN(t)) return '–';
    const ms = Date.now() - t;
    return ms < -999 ? 'in ' + dur(-ms) : dur(ms) + ' ago';
  }

  // goDur rounds a Go duration string ("7m26.123456s", "1h2m3.5s",
  // "350.2ms") as dur does; anything else is returned as it is.
  function goDur(s) {
    if (!s) return '–';
    const unit = { h: 36e5, m: 6e4, s: 1e3, ms: 1, us: 1e-3, 'µs': 1e-3, ns: 1e-6 };
    const parts = [...String(s).matchAll(/(\d+(?:\.\d+)?)(h|ms|m|s|us|µs|ns)/g)];
    if (parts.length === 0 || parts.map((p) => p[0]).join('') !== String(s)) return s;
    const ms = parts.reduce((a, p) => a + Number(p[1]) * unit[p[2]], 0);
    return ms < 1000 && ms > 0 ? '<1s' : dur(ms);
  }

  // dur formats a duration in ms rounded to its two largest units:
  // "45s", "7m26s", "2h05m", "3d4h".
  function dur(ms) {
    let s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return s + 's';
    const d = Math.floor(s / 86400), hh = Math.floor((s % 86400) / 3600), mm = Math.floor((s % 3600) / 60);
    s %= 60;
    if (d > 0) return `${d}d${hh}h`;
    if (hh > 0) return `${hh}h${String(mm).padStart(2, '0')}m`;
    return `${mm}m${String(s).padStart(2, '0')}s`;
  }

  function when(ts) {
    if (unset(ts)) return '–';
    return h('time', { datetime: ts, title: ts }, new Date(ts).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z') + ' (' + ago(ts) + ')');
  }

  // sinceToTime turns "90m", "2h", "3d" or an RFC 3339 time into an ISO time.
  function sinceToTime(s) {
    const m = /^(\d+(?:\.\d+)?)(s|m|h|d)$/.exec(s.trim());
    if (m) {
      const mult = { s: 1e3, m: 6e4, h: 36e5, d: 864e5 }[m[2]];
      return new Date(Date.now() - Number(m[1]) * mult).toISOString();
    }
    const t = Date.parse(s);
    if (Number.isNaN(t)) throw new APIError(400, `"since": "${s}" is neither a duration such as 2h nor a time such as 2026-01-02T15:04:05Z`);
    return new Date(t).toISOString();
  }

  // describeFilter says a DeadFilter in words. pattern, when known, is the
  // error pattern of f.fingerprint's group: people read it, not the
  // fingerprint.
  function describeFilter(f, pattern) {
    const parts = [];
    if (!f) return 'every item';
    if (f.ids && f.ids.length) parts.push(f.ids.length > 5 ? `${fmt(f.ids.length)} items (${f.ids.slice(0, 3).join(', ')} …)` : 'item ' + f.ids.join(', '));
    if (f.fingerprint) parts.push(pattern ? `error "${pattern}"` : 'error group ' + f.fingerprint);
    if (f.source_queue) parts.push('source ' + f.source_queue);
    if (f.reason) parts.push('reason ' + f.reason);
    if (f.kind) parts.push('kind ' + f.kind);
    if (f.error_contains) parts.push(`error contains "${f.error_contains}"`);
    if (f.reference) parts.push('reference ' + f.reference);
    if (f.payload_contains) parts.push(`payload contains "${f.payload_contains}"`);
    if (f.dead_after) parts.push('dead since ' + f.dead_after);
    return parts.length ? parts.join(', ') : 'every item';
  }

  // SHOW_BYTES is how much of a payload the item page shows before "Show
  // all".
  const SHOW_BYTES = 64 * 1024;
  const shownAll = new Set(); // payloads (by file name) shown whole

  // payloadView renders a payload (base64 from the API): JSON pretty
  // printed, text as is, anything else as a hex dump; past SHOW_BYTES only
  // its start, with "Show all" and "Download" (name is the file's name),
  // unless all.
  function payloadView(b64, name = 'payload', all = false) {
    const bytes = Uint8Array.from(atob(b64 || ''), (c) => c.charCodeAt(0));
    if (bytes.length === 0) return [h('p', { class: 'muted' }, 'Empty payload.')];
    if (bytes.length > SHOW_BYTES && !all && !shownAll.has(name)) {
      // A large payload: its start, and the whole on demand (kept shown
      // across live updates).
      const box = h('div', { id: 'payload' });
      const download = h('button', { type: 'button', onclick: () => {
        const a = h('a', { download: name, href: URL.createObjectURL(new Blob([bytes])) });
        a.click();
        setTimeout(() => URL.revokeObjectURL(a.href), 10000);
      } }, 'Download');
      const head = bytes.slice(0, SHOW_BYTES);
      let text = null;
      try { text = new TextDecoder('utf-8', { fatal: false }).decode(head); } catch { text = null; }
      box.append(h('p', { class: 'muted', id: 'payload-truncated' }, `${fmt(bytes.length)} bytes; the first ${fmt(SHOW_BYTES)} are shown.`),
        h('div', { class: 'actions' },
          h('button', { type: 'button', onclick: () => { shownAll.add(name); box.replaceChildren(...payloadView(b64, name, true)); } }, 'Show all'), download),
        h('pre', { 'aria-label': 'Payload (start)' }, text !== null ? text : ''));
      return [box];
    }
    let text = null;
    try { text = new TextDecoder('utf-8', { fatal: true }).decode(bytes); } catch { text = null; }
    if (text !== null && !/[\u0000-\u0008\u000e-\u001f\u007f]/.test(text)) {
      try {
        const pretty = JSON.stringify(JSON.parse(text), null, 2);
        return [h('p', { class: 'muted' }, `JSON, ${fmt(bytes.length)} bytes`), h('pre', { 'aria-label': 'Payload (JSON)' }, pretty)];
      } catch {
        return [h('p', { class: 'muted' }, `Text, ${fmt(bytes.length)} bytes`), h('pre', { 'aria-label': 'Payload (text)' }, text)];
      }
    }
    const lines = [];
    for (let off = 0; off < bytes.length; off += 16) {
      const row = bytes.slice(off, off + 16);
      const hex = Array.from(row, (b) => b.toString(16).padStart(2, '0')).join(' ');
      const ascii = Array.from(row, (b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : '.')).join('');
      lines.push(off.toString(16).padStart(8, '0') + '  ' + hex.padEnd(48) + ' ' + ascii);
    }
    return [h('p', { class: 'muted' }, `Binary, ${fmt(bytes.length)} bytes (hex)`), h('pre', { 'aria-label': 'Payload (hex)' }, lines.join('\n'))];
  }

  // SKIP_WORDS says why a redrive leaves an item in the dead-letter queue
  // (RedriveTask.skip_reasons keys).
  const SKIP_WORDS = {
    source_gone: 'destination queue does not exist',
    not_covered: 'your API key may not reach the destination',
    loop_cap: 'already redriven too many times',
    leased: 'leased by a consumer',
    other_task: 'held by another redrive task',
  };

  // skipReasons says a skip_reasons map in words: "3 destination queue
  // does not exist, 1 already redriven too many times".
  function skipReasons(m) {
    return Object.entries(m || {}).sort((a, b) => num(b[1]) - num(a[1]))
      .map(([k, v]) => `${fmt(v)} ${SKIP_WORDS[k] || k}`).join(', ');
  }

  // ---------------------------------------------------------------- actions

  // everything reports whether filter is empty: it selects every dead item,
  // which dead.delete and dead.redrive act on only with all: true (sent
  // after the user confirmed the count).
  const everything = (filter) => Object.keys(filter).length === 0;

  // countGuard is what a dead.delete or dead.redrive sends with the count
  // the user confirmed, from the dry run that counted (issue 48): up_to,
  // the newest item it saw (the items that die while the dialog is open
  // have later ids and are left out), and expect_matched, the count (the
  // server refuses with 409, acting on none, when the items up to up_to are
  // no longer as many). An estimated dry run (a large queue) gives no up_to
  // and so no guard, unless the count is known otherwise (count: an error
  // group's, which the server checks against all the items matching).
  function countGuard(dry, count) {
    if (dry.up_to) return { up_to: dry.up_to, expect_matched: num(dry.matched) };
    return count === undefined ? {} : { expect_matched: count };
  }

  // changedNote is the note of a dialog asked again because the set its
  // first asking counted changed before OK (again.was: the guard sent).
  const changedNote = (again, done) => again ? h('p', { class: 'warn', id: 'changed-note' },
    `Nothing was ${done}: the items changed while the dialog was open (${fmt(again.was.expect_matched)} confirmed). The count below is as it is now.`) : null;

  // sameGuard reports whether two guards name the same set.
  const sameGuard = (a, b) => a.up_to === b.up_to && a.expect_matched === b.expect_matched;

  // refusedGuard reports whether an action that sent guard was refused
  // (409) maybe because the set changed: the flow asks again with a new
  // count, and says the refusal when that count is the same (another
  // conflict).
  const refusedGuard = (e, guard) => e.status === 409 && guard.expect_matched !== undefined;

  // liveBanner shows the unfinished redrive tasks of a dead-letter queue
  // (several may run at once, issue 39), oldest first, each with its
  // status as it is (running, pausing, paused, cancelling), what it moves,
  // its progress and a link to it.
  function liveBanner(tasks) {
    const live = tasks.filter(isLive).sort((a, b) => (a.task_id < b.task_id ? -1 : 1));
    const line = (t) => {
      const matched = num(t.matched), done = num(t.moved) + num(t.failed) + num(t.skipped);
      return h('li', { id: 'live-' + t.task_id },
        h('a', { href: '/ui/redrives/' + enc(t.task_id) }, t.task_id), ' ', h('span', { class: 'badge ' + t.status }, t.status),
        ` (${describeFilter(t.filter, t.error_pattern)}) `,
        h('progress', { max: String(Math.max(matched, 1)), value: String(matched ? done : 1), 'aria-label': `Progress of ${t.task_id}` }),
        ` ${fmt(t.moved)} of ${fmt(matched)} moved`, num(t.skipped) ? ` · ${fmt(t.skipped)} skipped` : '');
    };
    const paused = live.filter((t) => t.status === 'paused').length;
    const head = live.length === 1 ? (live[0].status === 'paused' ? 'A redrive is paused:' : live[0].status === 'cancelling' ? 'A redrive is being cancelled:'
      : live[0].status === 'pausing' ? 'A redrive is pausing:' : 'A redrive is running:')
      : `${live.length} redrives are unfinished${paused ? ` (${paused} paused)` : ''}:`;
    return h('div', { class: 'banner', role: 'status', id: 'running-redrive' },
      h('strong', {}, head), h('ul', { class: 'live-tasks' }, live.map(line)),
      h('p', { class: 'muted' }, 'A new redrive leaves the items these tasks have not reached yet to them (a redrive naming items by id takes them).'));
  }

  // redriveFlow counts the items filter selects (a dry run), says where
  // they will go, and on confirmation starts the redrive of those items
  // (countGuard) and opens its progress. A redrive already running on the
  // queue is said first. When the items changed before OK, the server
  // refuses and the flow asks again (again: what was refused) with the new
  // count. It resolves true when the redrive started.
  async function redriveFlow(queue, filter, pattern, again) {
    let dry;
    const my = page;
    const tasks = await soft(api('redrives.list', { queue_name: queue }));
    if (my !== page) return; // the user left the page meanwhile
    // Several redrives of a queue may run at once: a new one leaves the
    // items an unfinished task has not reached yet to it (except a redrive
    // of items by id), which the dry run counts (left_to). The unfinished
    // ones are said, with their status, not in the way.
    const live = (tasks.tasks || []).filter(isLive);
    const runningNote = live.length ? h('p', { class: 'note', id: 'redrive-running' },
      ...live.flatMap((t, i) => [i ? '; ' : '', i ? 'redrive ' : 'Redrive ', h('a', { href: '/ui/redrives/' + enc(t.task_id) }, t.task_id),
        ` is ${t.status} on ${queue} (${fmt(t.moved)} of ${fmt(t.matched)} moved)`]),
      '. A redrive leaves the items they have not reached yet to them; a redrive of single items by id takes them.') : null;
    const statusOf = Object.fromEntries(live.map((t) => [t.task_id, t.status]));
    try {
      dry = await api('dead.redrive', { queue_name: queue, filter, dry_run: true });
    } catch (e) { toast(e.message); return; }
    if (my !== page) return;
    const guard = countGuard(dry);
    if (again && sameGuard(again.was, guard)) { toast(again.error.message); return; } // refused for another reason
    const n = num(dry.matched);
    // The server's dry run says what will happen: would_move of the
    // matched items move, would_skip stay (by destination, with reasons).
    const move = dry.would_move === undefined && dry.would_skip === undefined ? n : num(dry.would_move);
    const skip = num(dry.would_skip);
    // Where the items go: the destination, or each item's source queue
    // ("its" for one item, "their" for several).
    const dest = dry.destination || (move === 1 ? 'its source queue' : 'their source queue');
    // The server's rate is whole items per second (RedriveTask.rate_limit):
    // the dialog's default is a safe one, no limit a choice; a canary is
    // optional; the destinations' depth and consumers are shown (redrive.js).
    const rate = R.rateFields(h), canary = R.canaryFields(h);
    const destinations = move === 0 ? null : await R.destinationsNote(h,
      dry.destination ? [dry.destination] : Object.entries(dry.by_destination || {}).filter(([, p]) => num(p.would_move) > 0)
        .sort((a, b) => num(b[1].would_move) - num(a[1].would_move)).map(([q]) => q),
      (q) => soft(api('queue.stats', { queue_name: q })), counts);
    if (my !== page) return;
    const byDest = Object.entries(dry.by_destination || {}).sort((a, b) => (num(b[1].would_move) + num(b[1].would_skip)) - (num(a[1].would_move) + num(a[1].would_skip)));
    const plan = byDest.length === 0 ? null : table('By destination queue', ['Destination', ['Will move', 'num'], ['Will stay', 'num'], 'Why they stay'],
      byDest.map(([q, p]) => h('tr', {},
        h('th', { scope: 'row' }, q || '(no source queue)'), h('td', { class: 'num' }, fmt(p.would_move)),
        h('td', { class: 'num' }, fmt(p.would_skip)), h('td', {}, skipReasons(p.skip_reasons) || '–'))));
    // Which tasks hold some of the items (left to them: they stay here
    // until those tasks move them).
    const leftTo = Object.entries(dry.left_to || {});
    const leftNote = leftTo.length === 0 ? null : h('p', { class: 'note', id: 'redrive-left' },
      ...leftTo.flatMap(([id, k], i) => [i ? '; ' : '', `${fmt(k)} ${num(k) === 1 ? 'is' : 'are'} held by redrive `, h('a', { href: '/ui/redrives/' + enc(id) }, id),
        ` (${statusOf[id] || 'unfinished'})`]),
      leftTo.length === 1 ? ': this redrive leaves them to it' : ': this redrive leaves them to those tasks', leftTo.some(([id]) => statusOf[id] === 'paused') ? ' (a paused task moves them once resumed)' : '',
      '. To move one now, redrive it by id from its page.');
    let body;
    pattern = dry.error_pattern || pattern;
    if (n === 0) body = [h('p', {}, `No dead items match ${describeFilter(filter, pattern)}.`)];
    else if (move === 0) {
      body = [h('p', { id: 'redrive-summary' }, `None of the ${plural(n, 'matching item', 'matching items')} can be redriven: ${skipReasons(dry.skip_reasons)}.`), leftNote, plan];
    } else {
      const summary = skip === 0 ? `This will move ${fmt(move)} ${move === 1 ? 'item' : 'items'} to ${dest}.`
        : `This will move ${fmt(move)} of ${fmt(n)} items to ${dest}; ${fmt(skip)} will stay in the dead-letter queue (${skipReasons(dry.skip_reasons)}).`;
      body = [h('p', { id: 'redrive-summary', class: skip ? 'warn' : '' }, summary), leftNote, plan,
        h('p', { class: 'muted' }, 'Selected: ' + describeFilter(filter, pattern) + '.'), destinations,
        ...rate.nodes, ...canary.nodes];
    }
    if (!await confirmAction('Redrive dead items', [changedNote(again, 'redriven'), runningNote, ...body], move === 0 ? null : `Redrive ${fmt(move)} ${move === 1 ? 'item' : 'items'}`)) return;
    try {
      const task = await api('dead.redrive', { queue_name: queue, filter, all: everything(filter), rate_limit: rate.value(), ...canary.value(), ...guard });
      navigate('/ui/redrives?task=' + enc(task.task_id));
      return true;
    } catch (e) {
      if (refusedGuard(e, guard)) return redriveFlow(queue, filter, pattern, { was: guard, error: e });
      toast(e.message);
    }
  }

  // deleteFlow deletes the items filter selects after confirmation: those
  // a dry run of a redrive counted (countGuard). count, when known (a
  // group's, from the counts the queue keeps), is the count when the dry
  // run could only estimate it. When the items changed before OK, the
  // server refuses and the flow asks again (again: what was refused) with
  // the new count. It resolves true when items were deleted.
  async function deleteFlow(queue, filter, count, pattern, again) {
    const my = page;
    let dry;
    try {
      dry = await api('dead.redrive', { queue_name: queue, filter, dry_run: true });
    } catch (e) { toast(e.message); return false; }
    if (my !== page) return false; // the user left the page meanwhile
    const guard = countGuard(dry, count);
    if (again && sameGuard(again.was, guard)) { toast(again.error.message); return false; } // refused for another reason
    const n = dry.up_to || count === undefined ? num(dry.matched) : count;
    const body = [changedNote(again, 'deleted'), h('p', { id: 'delete-summary' }, `This will delete ${fmt(n)} ${n === 1 ? 'item' : 'items'} of ${queue} for good.`),
      h('p', { class: 'muted' }, 'Selected: ' + describeFilter(filter, pattern) + '.')];
    if (!await confirmAction('Delete dead items', body, n === 0 ? null : `Delete ${fmt(n)} ${n === 1 ? 'item' : 'items'}`, true)) return false;
    try {
      const res = await api('dead.delete', { queue_name: queue, filter, all: everything(filter), ...guard });
      toast(`Deleted ${fmt(res.deleted)} ${num(res.deleted) === 1 ? 'item' : 'items'}.`);
      return true;
    } catch (e) {
      // Asked again without count: a group's count is as old as the page.
      if (refusedGuard(e, guard)) return deleteFlow(queue, filter, undefined, pattern, { was: guard, error: e });
      toast(e.message);
      return false;
    }
  }

  // ---------------------------------------------------------------- bulk selection

  // BULK_MAX_IDS is the most ids one dead.delete or dead.redrive takes in
  // filter.ids (service.MaxBatch, 1,000): a larger selection is acted on
  // only as "all matching this filter", which sends the filter itself.
  const BULK_MAX_IDS = 1000;

  // bulk is the dead-letter queue page's selection: the ticked items (ids)
  // of one queue and filter (key), or every item matching the filter (all).
  // It is kept here, not in the page, so it survives the page's live
  // updates and its pages; it is cleared when the queue or the filter
  // changes and after an action on it completes, and items that vanished
  // (redriven, deleted, consumed, no longer matching) leave it at the next
  // update. count is the filter's count (N of "all N matching") when known,
  // with estimated when a dry run estimated it. view is what the page drawn
  // last needs to redraw the bar. Owned by the bulk* functions.
  const bulk = { key: '', ids: new Set(), all: false, count: null, estimated: false, counting: false, view: null };

  function bulkClear() {
    bulk.ids = new Set();
    bulk.all = false;
    bulk.count = null;
    bulk.estimated = false;
  }

  // bulkSync starts a drawing of the dead-letter queue page (call my) of
  // queue name, filter and the page's items: a new queue or filter clears
  // the selection, and selected items neither on the page nor listed again
  // by dead.list (ids and filter) are dropped. total is the filter's count
  // when the page knows it (null otherwise).
  async function bulkSync(my, name, filter, items, total) {
    const key = name + '\n' + JSON.stringify(filter);
    if (key !== bulk.key) {
      bulk.key = key;
      bulkClear();
      bulk.counting = false;
    }
    if (total !== null) { bulk.count = total; bulk.estimated = false; }
    const shown = new Set(items.map(iid));
    const elsewhere = [...bulk.ids].filter((id) => !shown.has(id));
    const kept = new Set();
    for (let i = 0; i < elsewhere.length; i += BULK_MAX_IDS) {
      const ids = elsewhere.slice(i, i + BULK_MAX_IDS);
      let pivot = '';
      do { // a page may stop short (dead.list reads a bounded number of bytes)
        const res = await soft(api('dead.list', { queue_name: name, filter: { ...filter, ids }, pivot, limit: ids.length, without_payload: true }));
        if (res.error) return; // keep the selection as it is; the page says what failed
        for (const it of res.items || []) kept.add(iid(it));
        pivot = res.next_pivot || '';
      } while (pivot);
    }
    if (my !== page || key !== bulk.key) return;
    for (const id of elsewhere) if (!kept.has(id)) bulk.ids.delete(id);
  }

  // bulkFilter is the filter an action on the selection sends: the
  // page's filter for "all matching", else the ticked ids.
  const bulkFilter = () => (bulk.all ? bulk.view.filter : { ids: [...bulk.ids] });

  // bulkBox is the checkbox that selects item it (a real input, named by
  // its label for assistive technology).
  function bulkBox(it) {
    return h('input', { type: 'checkbox', class: 'select', id: 'sel-' + iid(it), 'data-id': iid(it), 'aria-label': 'Select dead item ' + iid(it),
      checked: bulk.all || bulk.ids.has(iid(it)), onchange: (ev) => {
        if (bulk.all) { // unticking one of "all matching": the page's items but it
          bulk.all = false;
          bulk.ids = new Set(bulk.view.items.map(iid));
        }
        if (ev.currentTarget.checked) bulk.ids.add(iid(it)); else bulk.ids.delete(iid(it));
        bulkUpdate();
      } });
  }

  // bulkHead is the header checkbox of the page's items: it selects (or
  // unselects) every one; mixed while some are.
  function bulkHead(items) {
    const onPage = items.filter((it) => bulk.ids.has(iid(it))).length;
    return h('input', { type: 'checkbox', class: 'select', id: 'sel-page', 'aria-label': 'Select every dead item on this page',
      checked: items.length > 0 && (bulk.all || onPage === items.length), indeterminate: !bulk.all && onPage > 0 && onPage < items.length, onchange: (ev) => {
      const on = ev.currentTarget.checked;
      if (bulk.all) { bulk.all = false; bulk.ids = new Set(); }
      for (const it of bulk.view.items) { if (on) bulk.ids.add(iid(it)); else bulk.ids.delete(iid(it)); }
      bulkUpdate();
    } });
  }

  // bulkBar is the bar over the items that says what is selected and acts
  // on it: "Redrive selected…" and "Delete selected…" (the dry run and the
  // confirmation of the group actions: redriveFlow, deleteFlow), "Select all
  // N matching this filter", "Clear selection". view: { name, filter,
  // pattern (of filter.fingerprint), items (the page's) }.
  function bulkBar(view) {
    bulk.view = view;
    const bar = h('div', { class: 'bulk', id: 'bulk', role: 'group', 'aria-label': 'Selected dead items' });
    bulkDraw(bar);
    return bar;
  }

  // bulkUpdate redraws the bar and the checkboxes after a change of the
  // selection (no call to the server).
  function bulkUpdate() {
    const bar = document.getElementById('bulk');
    if (!bar || !bulk.view) return;
    for (const box of main.querySelectorAll('input.select[data-id]')) box.checked = bulk.all || bulk.ids.has(box.dataset.id);
    bulkDraw(bar);
  }

  function bulkDraw(bar) {
    const { name, filter, pattern, items } = bulk.view;
    const head = document.getElementById('sel-page');
    const onPage = items.filter((it) => bulk.ids.has(iid(it))).length;
    if (head) {
      head.checked = items.length > 0 && (bulk.all || onPage === items.length);
      head.indeterminate = !bulk.all && onPage > 0 && onPage < items.length;
    }
    const n = bulk.all ? bulk.count : bulk.ids.size;
    const filtered = !everything(filter);
    const about = bulk.estimated ? 'about ' : '';
    const over = !bulk.all && bulk.ids.size > BULK_MAX_IDS;
    let words;
    if (bulk.all) words = n === null ? (filtered ? 'All dead items matching this filter selected.' : 'All dead items selected.') : `All ${about}${plural(n, filtered ? 'item matching this filter' : 'dead item', filtered ? 'items matching this filter' : 'dead items')} selected.`;
    else if (bulk.ids.size === 0) words = 'No items selected: tick items to redrive or delete several at once.';
    else words = `${plural(bulk.ids.size, 'item', 'items')} selected${bulk.ids.size > onPage ? ` (${fmt(bulk.ids.size - onPage)} on other pages)` : ''}.`;
    const none = !bulk.all && bulk.ids.size === 0;
    // "All N matching": N from the filter's count; counted by a dry run when
    // the page does not know it.
    if (!bulk.all && !none && bulk.count === null && !bulk.counting) bulkCount(name, filter);
    const allLabel = bulk.count === null ? (filtered ? 'Select all matching this filter (counting…)' : 'Select all dead items (counting…)')
      : filtered ? `Select all ${about}${fmt(bulk.count)} matching this filter` : `Select all ${about}${fmt(bulk.count)} dead items`;
    // The count is a live region, kept across redraws of the bar so that
    // a change is announced.
    const count = bar.querySelector('#bulk-count') || bar.appendChild(h('span', { id: 'bulk-count', role: 'status' }));
    count.textContent = words;
    const rest = bar.querySelector('.bulk-actions') || bar.appendChild(h('span', { class: 'bulk-actions' }));
    rest.replaceChildren(...[
      over ? h('span', { class: 'warn', id: 'bulk-over' }, ` That is over the limit of ${fmt(BULK_MAX_IDS)} items an action takes by id: untick some, or select all matching this filter.`) : null,
      !bulk.all && !none ? h('button', { type: 'button', id: 'bulk-all', class: 'link', onclick: () => { bulk.all = true; bulkUpdate(); } }, allLabel) : null,
      h('button', { type: 'button', id: 'bulk-redrive', disabled: none || over,
        onclick: action(async () => { if (await redriveFlow(name, bulkFilter(), bulk.all ? pattern : undefined)) bulkClear(); }) }, 'Redrive selected…'),
      h('button', { type: 'button', id: 'bulk-delete', class: 'danger', disabled: none || over,
        onclick: action(async () => { if (await deleteFlow(name, bulkFilter(), undefined, bulk.all ? pattern : undefined)) { bulkClear(); render(); } }) }, 'Delete selected…'),
      none ? null : h('button', { type: 'button', id: 'bulk-clear', class: 'link', onclick: () => { bulkClear(); bulkUpdate(); } }, 'Clear selection'),
    ].filter(Boolean));
  }

  // bulkCount counts the items filter matches (a dry run, as the group
  // actions count) when the page does not know it, for "all N matching".
  async function bulkCount(name, filter) {
    const key = bulk.key;
    bulk.counting = true;
    try {
      const dry = await api('dead.redrive', { queue_name: name, filter, dry_run: true });
      if (key !== bulk.key) return;
      bulk.count = num(dry.matched);
      bulk.estimated = /^estimate\b/.test(dry.warning || ''); // the dry run read part of a large queue
    } catch (e) {
      if (key === bulk.key) toast(e.message);
      return;
    } finally {
      if (key === bulk.key) bulk.counting = false;
    }
    bulkUpdate();
  }

  // ---------------------------------------------------------------- pages

  // soft turns a failed call into { error }: the section it feeds shows a
  // note (notShown) instead of the whole page failing, so that a key
  // without some scope sees what it may. A 401 still fails the page (it
  // asks for a key).
  const soft = (p) => p.catch((e) => { if (e.status === 401) throw e; return { error: e }; });

  // notShown is the note a section shows when its call failed, as a
  // sentence: "<what> are not shown: <why>." (one: what is one thing,
  // "… is not shown", and the key "may not see it").
  function notShown(what, e, one = false) {
    const why = e.status === 403 ? `your API key may not see ${one ? 'it' : 'them'} (${e.message})` : e.message;
    return h('p', { class: 'note', role: 'note' }, `${what} ${one ? 'is' : 'are'} not shown: ${why}.`);
  }

  // NO_ERROR is what the console says for a dead item that died without
  // an error text (noError: as a muted note).
  const NO_ERROR = 'no error recorded';
  const noError = () => h('span', { class: 'muted no-error' }, NO_ERROR);

  // counts sums a queue.stats reply's partitions: ready, leased, scheduled.
  function counts(s) {
    let ready = 0, leased = 0, scheduled = 0;
    const parts = [];
    for (const lq of s.logicalQueues || s.logical_queues || []) {
      for (const p of lq.partitions || []) {
        parts.push(p);
        leased += num(p.total_leased);
        scheduled += num(p.scheduled);
        ready += num(p.total) - num(p.total_leased) - num(p.scheduled);
      }
    }
    return { ready, leased, scheduled, parts };
  }

  const sum = (m) => Object.values(m || {}).reduce((a, b) => a + num(b), 0);

  // deadLetterQueues returns the names of the dead-letter queues among
  // queues (a queues.list answer's items) as a Set, by the server's rule
  // (queue.DeadLetterQueue in internal/queue): a queue is a dead-letter
  // queue while some queue names it as its dead_queue or while it holds
  // dead items (statsOf(name): its queue.stats answer, when known, whose
  // dead_by_reason counts them), so a DLQ no queue names any more still
  // shows its dead items as held, not ready. The UI decides it here only;
  // it sees the queues its key may read, up to 1000.
  const deadLetterQueues = (queues, statsOf = () => null) => new Set([
    ...queues.map((q) => q.dead_queue).filter(Boolean),
    ...queues.map((q) => q.queue_name).filter((name) => { const s = statsOf(name); return s && !s.error && sum(s.dead_by_reason) > 0; })]);

  // deadOf returns the dead items of queue q (those its dead-letter queue
  // holds for it: dead_by_source of the DLQ's stats) as a cell: a link to
  // the DLQ page filtered by source, 0, or – when unknown.
  function deadOf(q, dlqStats) {
    if (!q.dead_queue) return h('span', { title: 'no dead-letter queue' }, '–');
    if (!dlqStats || dlqStats.error) return h('span', { title: `the stats of ${q.dead_queue} are not available` }, '?');
    const n = num((dlqStats.dead_by_source || {})[q.queue_name]);
    if (!n) return '0';
    return h('a', { href: '/ui/queues/' + enc(q.dead_queue) + '/dead?' + new URLSearchParams({ source: q.queue_name }),
      'aria-label': `${fmt(n)} dead items of ${q.queue_name} in ${q.dead_queue}` }, fmt(n));
  }

  // RATE_POINTS is how many minutes of queues.history the overview's
  // per-queue counts add up (the current minute among them).
  const RATE_POINTS = 5;

  // rates sums the last RATE_POINTS minutes of a queue's history:
  // produced, completed and dead-lettered items; null when unknown.
  function rates(hist) {
    if (!hist || hist.error) return null;
    const pts = (hist.points || []).slice(-RATE_POINTS);
    const add = (k) => pts.reduce((a, p) => a + num(p[k]), 0);
    return { produced: add('produced'), completed: add('completed'), dead: add('dead_lettered') };
  }

  // liveDepth returns the summed history hist with each minute's depth the
  // sum over the live queues' histories (hists, by queue), leaving out the
  // dead-letter queues (dlqs): their items are dead items held, not work
  // waiting. A minute no live queue sampled has no depth (-1).
  function liveDepth(hist, queues, hists, dlqs) {
    const depth = new Map();
    queues.forEach((q, i) => {
      const qh = hists[i];
      if (dlqs.has(q.queue_name) || !qh || qh.error) return;
      for (const p of qh.points || []) {
        if (num(p.depth) < 0) continue;
        depth.set(p.at, (depth.get(p.at) || 0) + num(p.depth));
      }
    });
    return { ...hist, points: (hist.points || []).map((p) => ({ ...p, depth: depth.has(p.at) ? depth.get(p.at) : -1 })) };
  }

  async function overview(my) {
    document.title = 'Queues · Styx';
    const [list, tasks, hist] = await Promise.all([soft(api('queues.list', { limit: 1000 })), soft(api('redrives.list', {})), soft(api('queues.history', {}))]);
    const queues = list.items || [];
    const [stats, hists] = await Promise.all([
      Promise.all(queues.map((q) => soft(api('queue.stats', { queue_name: q.queue_name })))),
      Promise.all(queues.map((q) => soft(api('queues.history', { queue_name: q.queue_name }))))]);
    if (my !== page) return;
    slowLive = queues.length * 40; // 2 s up to 50 queues, 40 s for 1,000
    const byName = {};
    queues.forEach((q, i) => { byName[q.queue_name] = stats[i]; });
    const dlqs = deadLetterQueues(queues, (name) => byName[name]);
    const running = {};
    for (const t of tasks.tasks || []) {
      if (t.status === 'running' || t.status === 'cancelling') running[t.queue_name] = (running[t.queue_name] || 0) + 1;
    }
    const rows = queues.map((q, i) => {
      const s = stats[i];
      const c = counts(s);
      const held = sum(s.dead_by_reason);
      const name = q.queue_name;
      const r = rates(hists[i]);
      const rate = (k) => h('td', { class: 'num' }, r ? fmt(r[k]) : '?');
      return h('tr', {},
        h('th', { scope: 'row' }, h('a', { href: '/ui/queues/' + enc(name) }, name),
          // A paused queue hands out nothing (queues.pause): said where
          // its depth would otherwise look like stuck consumers.
          q.paused ? [' ', h('span', { class: 'badge paused', id: 'paused-' + name, title: 'consumption paused' + (q.paused_at ? ' ' + ago(q.paused_at) : '') }, 'paused')] : null),
        // A dead-letter queue's items are dead items held (their column),
        // not items ready for its consumers' work.
        h('td', { class: 'num' }, dlqs.has(name) ? h('span', { title: 'dead items held: see Dead held' }, '–') : s.error ? '?' : fmt(c.ready)),
        h('td', { class: 'num' }, s.error ? '?' : fmt(c.leased)),
        h('td', { class: 'num' }, s.error ? '?' : fmt(c.scheduled)),
        h('td', { class: 'num' }, deadOf(q, byName[q.dead_queue])),
        h('td', { class: 'num' }, !dlqs.has(name) ? '–' : s.error ? '?'
          : held ? h('a', { href: '/ui/queues/' + enc(name) + '/dead', 'aria-label': `${fmt(held)} dead items in ${name}` }, fmt(held)) : '0'),
        h('td', {}, s.oldest_created_at ? ago(s.oldest_created_at).replace(' ago', '') : '–'),
        h('td', {}, q.dead_queue ? h('a', { href: '/ui/queues/' + enc(q.dead_queue) + '/dead' }, q.dead_queue) : '–'),
        h('td', { class: 'num' }, tasks.error ? '?' : running[name] ? h('a', { href: '/ui/redrives' }, String(running[name])) : '0'),
        rate('produced'), rate('completed'), rate('dead'));
    });
    const failed = stats.filter((s) => s.error);
    show(h('h1', {}, 'Queues'),
      hist.error ? notShown('Charts', hist.error) : historyCharts(liveDepth(hist, queues, hists, dlqs), 'Depth (items in live queues), last hour'),
      list.error ? notShown('Queues', list.error) : queues.length === 0 ? h('p', { class: 'muted' }, 'No queues yet.')
        : table(`${fmt(queues.length)} queues`, ['Queue', ['Ready', 'num'], ['Leased', 'num'], ['Scheduled', 'num'],
          ['Dead', 'num'], ['Dead held', 'num'], 'Oldest item', 'Dead-letter queue', ['Redrives running', 'num'],
          ['Produced, 5 min', 'num'], ['Completed, 5 min', 'num'], ['Dead-lettered, 5 min', 'num']], rows),
      h('p', { class: 'muted' }, 'Dead: the queue\'s items in its dead-letter queue. Dead held: the dead items a dead-letter queue holds ' +
        '(not counted as ready, nor in the depth chart). Produced, completed and dead-lettered: items in the last 5 minutes, this one included.'),
      failed.length ? notShown(`Counts of ${plural(failed.length, 'queue', 'queues')} (?)`, failed[0].error) : null,
      tasks.error ? notShown('Running redrives (?)', tasks.error) : null);
  }

  async function queuePage(my, name) {
    document.title = name + ' · Styx';
    const [infoRes, s, list, hist, acts] = await Promise.all([soft(api('queues.info', { queue_name: name })), soft(api('queue.stats', { queue_name: name })),
      soft(api('queues.list', { limit: 1000 })), soft(api('queues.history', { queue_name: name })),
      soft(api('activity.list', { queue_name: name, limit: A.LIMIT }))]);
    if (infoRes.error && infoRes.error.status !== 403) throw infoRes.error; // no such queue
    const info = infoRes.error ? {} : infoRes;
    const dlqStats = info.dead_queue ? await soft(api('queue.stats', { queue_name: info.dead_queue })) : null;
    if (my !== page) return;
    const { ready, leased, scheduled, parts } = counts(s);
    const isDLQ = deadLetterQueues(list.items || [], (n) => (n === name ? s : null)).has(name);
    const held = sum(s.dead_by_reason);
    const card = (label, v) => h('div', { class: 'card' }, h('div', { class: 'muted' }, label), h('div', { class: 'n' }, v));
    const prop = (k, v) => [h('dt', {}, k), h('dd', {}, v === undefined || v === '' ? '–' : v)];
    const q = { queue_name: name, dead_queue: info.dead_queue };
    show(
      h('p', { class: 'crumbs' }, h('a', { href: '/ui/' }, 'Queues'), ' / ', name),
      h('h1', {}, name),
      L.banner(h, info, ago),
      s.error ? notShown('Counts', s.error)
        : h('div', { class: 'cards' }, card('Ready', fmt(ready)), card('Leased', fmt(leased)), card('Scheduled', fmt(scheduled)),
          info.dead_queue ? card('Dead (in ' + info.dead_queue + ')', deadOf(q, dlqStats)) : null,
          isDLQ ? card('Dead items held', fmt(held)) : null,
          card('Oldest item', s.oldest_created_at ? ago(s.oldest_created_at).replace(' ago', '') : '–')),
      hist.error ? notShown('Charts', hist.error) : historyCharts(hist),
      h('h2', { id: 'consumers' }, 'Consumers'),
      s.error ? notShown('Consumers', s.error) : consumersTable(name, s.consumers || []),
      s.error || !num(s.held_groups_total) ? null : heldGroupsTable(name, info.dead_queue, s),
      h('div', { class: 'actions' },
        isDLQ ? h('a', { class: 'button', href: '/ui/queues/' + enc(name) + '/dead' }, 'Dead items held by ' + name) : null,
        info.dead_queue ? h('a', { class: 'button', href: '/ui/queues/' + enc(info.dead_queue) + '/dead?' + new URLSearchParams({ source: name }) },
          'Its dead items in ' + info.dead_queue) : null,
        ...(infoRes.error ? [] : L.buttons(h, info, name, { api, action, confirmAction, toast, render })),
        h('a', { class: 'button', href: '/ui/queues/' + enc(name) + '/items' }, 'Browse items')),
      h('h2', {}, 'Configuration'),
      infoRes.error ? notShown('The configuration', infoRes.error, true) : h('dl', { class: 'props' },
        prop('Namespace', info.namespace), prop('Dead-letter queue', info.dead_queue ? h('a', { href: '/ui/queues/' + enc(info.dead_queue) }, info.dead_queue) : ''),
        prop('Lease timeout', info.lease_timeout), prop('Expire timeout', info.expire_timeout),
        prop('Max attempts', info.max_attempts ? String(info.max_attempts) : 'unlimited'),
        prop('Partitions', String(info.requested_partitions || parts.length)), prop('Reference', info.reference),
        prop('Ordered groups', info.ordered ? 'yes: a group\'s items are leased in order, one lease at a time' : 'no'),
        info.ordered ? prop('A dead item in a group', info.group_dead_policy === 'hold' ? 'holds its group until redriven or deleted' : 'leaves; the group goes on') : null,
        prop('Created', when(info.created_at)), prop('Updated', when(info.updated_at))),
      h('h2', {}, 'Partitions'),
      s.error ? notShown('Partitions', s.error)
        : table('Items by partition', [['Partition', 'num'], ['Items', 'num'], ['Leased', 'num'], ['Scheduled', 'num'], ['Failures', 'num'], 'Average age', 'Average leased age'],
          parts.map((p) => h('tr', {},
            h('th', { scope: 'row', class: 'num' }, String(p.partition || 0)), h('td', { class: 'num' }, fmt(p.total)),
            h('td', { class: 'num' }, fmt(p.total_leased)), h('td', { class: 'num' }, fmt(p.scheduled)),
            h('td', { class: 'num' }, fmt(p.failures)), h('td', {}, goDur(p.average_age)), h('td', {}, goDur(p.average_leased_age))))),
      A.panel(h, acts, name, { table, ago, notShown }));
  }

  // heldGroupsTable lists the groups of an ordered queue that wait for
  // their dead item (group_dead_policy hold; queue.stats' held_groups).
  function heldGroupsTable(name, dlq, s) {
    const total = num(s.held_groups_total);
    const gs = s.held_groups || [];
    return h('section', { id: 'held-groups' },
      h('h2', {}, 'Held groups'),
      h('p', {}, `${plural(total, 'group waits', 'groups wait')} for a dead item: nothing more of ${total === 1 ? 'it' : 'them'} is leased until the dead item is redriven (it goes first) or deleted from ${dlq || 'the dead-letter queue'}.`,
        gs.length < total ? ` The ${fmt(gs.length)} held longest:` : ''),
      table(`${plural(total, 'held group', 'held groups')}, longest held first`, ['Group', ['Partition', 'num'], 'Dead item', 'Held since'],
        gs.map((g) => h('tr', {},
          h('th', { scope: 'row' }, h('code', {}, g.group)), h('td', { class: 'num' }, String(g.partition || 0)),
          h('td', {}, dlq ? h('a', { href: '/ui/queues/' + enc(dlq) + '/dead?' + new URLSearchParams({ source: name }) }, h('code', {}, g.dead_key)) : h('code', {}, g.dead_key)),
          h('td', { title: g.held_at || '' }, ago(g.held_at))))));
  }

  // consumersTable lists a queue's consumers (queue.stats' consumers): who
  // leased in the last 5 minutes or holds leases now, with the leases held
  // (each a link to its item) and when each was last seen.
  function consumersTable(name, cs) {
    if (cs.length === 0) return h('p', { class: 'muted', id: 'no-consumers' }, 'No consumer leased from this queue in the last 5 minutes.');
    const items = (c) => {
      const ids = c.held_ids || [];
      if (ids.length === 0) return '–';
      const links = ids.slice(0, 5).flatMap((id, k) => [k ? ', ' : '', h('a', { href: '/ui/queues/' + enc(name) + '/items/' + enc(id) }, h('code', {}, id))]);
      return h('span', {}, ...links, num(c.held) > 5 ? ` and ${fmt(num(c.held) - 5)} more` : '');
    };
    return table(`${plural(cs.length, 'consumer', 'consumers')}: client ids that leased in the last 5 minutes or hold leases, most recently seen first`,
      ['Client id', 'API key', ['Leases held', 'num'], ['Items leased', 'num'], 'Last seen', 'First seen', 'Held items'],
      cs.map((c) => h('tr', {},
        h('th', { scope: 'row', class: 'client-id' }, c.client_id ? h('code', {}, c.client_id) : '–'), h('td', {}, c.key_name || '–'),
        h('td', { class: 'num' }, fmt(c.held)), h('td', { class: 'num' }, fmt(c.leased)),
        h('td', { title: c.last_seen_at || '' }, ago(c.last_seen_at)), h('td', { title: c.first_seen_at || '' }, ago(c.first_seen_at)),
        h('td', {}, items(c)))));
  }

  // filterFromURL reads the DLQ page's filters from the query string.
  function filterFromURL(params) {
    const f = {};
    if (params.get('reason')) f.reason = params.get('reason');
    if (params.get('source')) f.source_queue = params.get('source');
    if (params.get('kind')) f.kind = params.get('kind');
    if (params.get('error')) f.error_contains = params.get('error');
    if (params.get('fingerprint')) f.fingerprint = params.get('fingerprint');
    if (params.get('reference')) f.reference = params.get('reference');
    if (params.get('payload')) f.payload_contains = params.get('payload');
    if (params.get('since')) f.dead_after = sinceToTime(params.get('since'));
    return f;
  }

  async function deadPage(my, name) {
    document.title = 'Dead items of ' + name + ' · Styx';
    const params = new URLSearchParams(location.search);
    const base = '/ui/queues/' + enc(name) + '/dead';
    const crumbs = h('p', { class: 'crumbs' }, h('a', { href: '/ui/' }, 'Queues'), ' / ', h('a', { href: '/ui/queues/' + enc(name) }, name), ' / dead items');
    let filter;
    try { filter = filterFromURL(params); } catch (e) { show(crumbs, h('h1', {}, 'Dead items of ' + name), errorBox(e)); return; }
    const gFilter = {};
    for (const k of ['source_queue', 'reason', 'fingerprint']) if (filter[k]) gFilter[k] = filter[k];
    // dead.groups answers from the counts the queue keeps, by source,
    // reason and fingerprint only: the filter's other fields (named as the
    // form names them) do not narrow the groups, and the page says so.
    const FILTER_NAMES = { kind: 'kind', error_contains: 'error text', reference: 'reference', payload_contains: 'payload text',
      dead_after: 'dead since', dead_before: 'dead before', ids: 'ids' };
    const unfiltered = Object.keys(filter).filter((k) => !(k in gFilter)).map((k) => FILTER_NAMES[k] || k);
    const pivot = params.get('pivot') || '';
    const [groups, list, tasks, hist, acts, stats] = await Promise.all([
      soft(api('dead.groups', { queue_name: name, filter: gFilter, limit: 50 })),
      soft(api('dead.list', { queue_name: name, filter, pivot, limit: PAGE_SIZE, without_payload: true })),
      soft(api('redrives.list', { queue_name: name })),
      soft(api('queues.history', { queue_name: name })),
      soft(api('activity.list', { queue_name: name, limit: A.LIMIT })),
      soft(api('queue.stats', { queue_name: name })),
    ]);
    if (my !== page) return;
    if (groups.error && list.error && groups.error.message === list.error.message) {
      // Both calls failed alike (a queue that is no dead-letter queue, a
      // key without the dead scope): say it once.
      show(crumbs, h('h1', {}, 'Dead items of ' + name), notShown('Dead items', list.error),
        h('p', {}, h('a', { href: '/ui/queues/' + enc(name) }, 'Back to ' + name)));
      return;
    }
    const running = (tasks.tasks || []).some(isLive);
    if (running) fastLive = true;

    const groupRows = (groups.groups || []).map((g) => {
      // A source the key does not cover reads HIDDEN_QUEUE, which no request
      // may name: the group's items are found by reason and pattern alone.
      const hidden = g.source_queue === HIDDEN_QUEUE;
      const gf = hidden ? { fingerprint: g.fingerprint, reason: g.reason } : { fingerprint: g.fingerprint, source_queue: g.source_queue, reason: g.reason };
      const link = base + '?' + new URLSearchParams(hidden ? { fingerprint: g.fingerprint, reason: g.reason }
        : { fingerprint: g.fingerprint, source: g.source_queue, reason: g.reason });
      const label = g.pattern || NO_ERROR;
      return h('tr', { 'data-fingerprint': g.fingerprint },
        h('td', { class: 'num' }, fmt(g.count)), h('td', {}, g.reason), h('td', {}, hidden ? HIDDEN_TEXT : g.source_queue),
        h('td', { class: 'pattern', title: g.sample_error || '' }, g.pattern || noError()),
        h('td', {}, ago(g.last_dead_at)),
        h('td', {}, h('div', { class: 'actions' },
          h('a', { href: link, 'aria-label': `Items of group ${label}` }, 'Items'),
          h('button', { type: 'button', onclick: action(() => redriveFlow(name, gf, g.pattern)), 'aria-label': `Redrive group ${label}` }, 'Redrive…'),
          h('button', { type: 'button', class: 'danger', 'aria-label': `Delete group ${label}`,
            onclick: action(async () => { if (await deleteFlow(name, gf, num(g.count), g.pattern)) render(); }) }, 'Delete…'))));
    });

    const field = (id, label, input) => h('label', { for: id }, label, input);
    const form = h('form', { class: 'filters', role: 'search', 'aria-label': 'Filter dead items' },
      field('f-reason', 'Reason', h('select', { id: 'f-reason', name: 'reason' },
        h('option', { value: '' }, 'any'), REASONS.map((r) => h('option', { value: r, selected: params.get('reason') === r }, r)))),
      field('f-source', 'Source queue', h('input', { id: 'f-source', name: 'source', value: params.get('source') || '' })),
      field('f-kind', 'Kind', h('input', { id: 'f-kind', name: 'kind', value: params.get('kind') || '' })),
      field('f-error', 'Error contains', h('input', { id: 'f-error', name: 'error', value: params.get('error') || '' })),
      field('f-reference', 'Reference', h('input', { id: 'f-reference', name: 'reference', value: params.get('reference') || '' })),
      field('f-payload', 'Payload contains', h('input', { id: 'f-payload', name: 'payload', value: params.get('payload') || '' })),
      field('f-since', 'Dead since (2h, or a time)', h('input', { id: 'f-since', name: 'since', value: params.get('since') || '', placeholder: '2h' })),
      field('f-fingerprint', 'Fingerprint', h('input', { id: 'f-fingerprint', name: 'fingerprint', value: params.get('fingerprint') || '', size: 18 })),
      h('button', { type: 'submit', class: 'primary' }, 'Apply'),
      h('a', { href: base }, 'Clear'));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const q = new URLSearchParams();
      for (const [k, v] of new FormData(form)) if (String(v).trim() !== '') q.set(k, String(v).trim());
      navigate(base + (q.toString() ? '?' + q : ''));
    });

    const items = list.items || [];
    const itemRows = items.map((it) => h('tr', {},
      h('th', { scope: 'row' }, bulkBox(it), h('a', { href: base + '/' + enc(iid(it)) }, iid(it))),
      h('td', {}, it.source_queue === HIDDEN_QUEUE ? HIDDEN_TEXT : it.source_queue || '–'), h('td', {}, it.reference || '–'), h('td', {}, it.dead_reason || '–'), h('td', {}, it.kind || '–'),
      h('td', { class: 'num' }, String(it.attempts || 0)), h('td', {}, ago(it.dead_at)),
      h('td', { class: 'error' }, it.last_error || noError())));
    const filtered = Object.keys(filter).length > 0;
    const fpPattern = filter.fingerprint ? ((groups.groups || []).find((g) => g.fingerprint === filter.fingerprint) || {}).pattern : undefined;
    // The pager: the items' positions (at, kept in the URL), their total
    // when the counts the groups keep give it (a filter of source, reason
    // and fingerprint only), and the way back (trail: the pivot and
    // position of each page before this one).
    const at = Number(params.get('at') || 0);
    const trail = (params.get('trail') || '').split(',').filter(Boolean);
    const countable = Object.keys(filter).every((k) => ['source_queue', 'reason', 'fingerprint'].includes(k)) && !groups.error;
    const total = countable ? num(groups.total_items) : null;
    const pageURL = (pv, pos, tr) => {
      const q = new URLSearchParams(params);
      for (const [k, v] of [['pivot', pv], ['at', pos ? String(pos) : ''], ['trail', tr.join(',')]]) { if (v) q.set(k, v); else q.delete(k); }
      return base + (q.toString() ? '?' + q : '');
    };
    let prevURL = null;
    if (trail.length) {
      const [pv, pos] = trail[trail.length - 1].split(':');
      prevURL = pageURL(pv === '-' ? '' : pv, Number(pos || 0), trail.slice(0, -1));
    }
    const pager = h('nav', { class: 'pager', 'aria-label': 'Pages' },
      items.length ? h('span', { id: 'page-range' }, `Items ${fmt(at + 1)}–${fmt(at + items.length)}${total !== null ? ' of ' + fmt(total) : ''}`)
        : total !== null && total > 0 ? h('span', { id: 'page-range' }, `${fmt(total)} in all`) : null,
      prevURL ? h('a', { href: prevURL, rel: 'prev' }, '← Previous page') : null,
      trail.length > 1 ? h('a', { href: pageURL('', 0, []) }, 'First page') : null,
      list.next_pivot ? h('a', { href: pageURL(list.next_pivot, at + items.length, [...trail, `${pivot || '-'}:${at}`]), rel: 'next' }, 'Next page →') : null);

    await bulkSync(my, name, filter, items, total !== null ? total : !list.next_pivot && at === 0 && !list.error ? items.length : null);
    if (my !== page) return;
    show(crumbs, h('h1', {}, 'Dead items of ' + name),
      running ? liveBanner(tasks.tasks) : null,
      stats.error ? null : A.expiringBanner(h, stats, name),
      hist.error ? null : groupChart(hist, groups.groups || []),
      h('h2', { id: 'groups' }, 'Error groups'),
      unfiltered.length && !groups.error ? h('p', { class: 'note', id: 'groups-unfiltered' },
        `These groups are not narrowed by the filter's ${unfiltered.join(', ')}: they count every dead item` +
        (Object.keys(gFilter).length ? ' of the filter\'s source queue, reason and fingerprint' : ' of the queue') +
        '. The items below follow the whole filter.') : null,
      groups.error ? notShown('Error groups', groups.error) : (groups.groups || []).length === 0 ? h('p', { class: 'muted' }, 'No dead items in groups.')
        : table(`${plural(groups.total_items, 'dead item', 'dead items')} in ${plural(groups.total_groups, 'group', 'groups')}, by the shape of their last error`,
          [['Count', 'num'], 'Reason', 'Source', 'Error pattern', 'Last dead', 'Actions'], groupRows),
      h('h2', { id: 'items' }, 'Items'),
      form,
      list.error ? notShown('Dead items', list.error) : h('div', { class: 'actions' },
        h('button', { type: 'button', onclick: action(() => redriveFlow(name, filter, fpPattern)) }, filtered ? 'Redrive matching…' : 'Redrive all…'),
        h('button', { type: 'button', class: 'danger', onclick: action(async () => { if (await deleteFlow(name, filter, undefined, fpPattern)) render(); }) },
          filtered ? 'Delete matching…' : 'Delete all…')),
      list.error || (items.length === 0 && bulk.ids.size === 0 && !bulk.all) ? null : bulkBar({ name, filter, pattern: fpPattern, items }),
      list.error ? null : items.length === 0 ? h('p', { class: 'muted', id: 'no-items' }, filtered ? 'No dead items match these filters on this page.' : 'No dead items.')
        : table(`Dead items${filtered ? ' matching ' + describeFilter(filter, fpPattern) : ''}, oldest first`,
          [h('span', { class: 'select-head' }, bulkHead(items), 'ID'), 'Source', 'Reference', 'Reason', 'Kind', ['Attempts', 'num'], 'Dead', 'Last error'], itemRows),
      pager,
      A.panel(h, acts, name, { table, ago, notShown }));
  }

  // preview is the start of a payload (base64 from the API) as text, for a
  // table cell: at most 80 characters, binary shown as its size.
  function preview(b64) {
    const bytes = Uint8Array.from(atob(b64 || ''), (c) => c.charCodeAt(0));
    if (bytes.length === 0) return '–';
    let text;
    try { text = new TextDecoder('utf-8', { fatal: true }).decode(bytes); } catch { return `(${fmt(bytes.length)} bytes, binary)`; }
    text = text.replace(/\s+/g, ' ');
    return text.length > 80 ? text.slice(0, 79) + '…' : text;
  }

  // itemsPage lists a queue's items, read-only: one partition at a time
  // (storage/items.list), with a tab per partition and pages of PAGE_SIZE.
  async function itemsPage(my, name) {
    document.title = 'Items of ' + name + ' · Styx';
    const params = new URLSearchParams(location.search);
    const base = '/ui/queues/' + enc(name) + '/items';
    const part = Number(params.get('partition') || 0);
    const pivot = params.get('pivot') || '';
    const [s, res] = await Promise.all([soft(api('queue.stats', { queue_name: name })),
      soft(api('storage/items.list', { queue_name: name, partition: part, pivot, limit: PAGE_SIZE + (pivot ? 1 : 0) }))]);
    if (my !== page) return;
    const { parts } = counts(s);
    let items = res.items || [];
    if (pivot && items.length && items[0].id === pivot) items = items.slice(1); // the pivot is inclusive
    items = items.slice(0, PAGE_SIZE);
    const more = (res.items || []).length > PAGE_SIZE || (!pivot && (res.items || []).length === PAGE_SIZE);
    const total = parts.find((p) => num(p.partition) === part);
    const tabs = h('nav', { class: 'tabs', 'aria-label': 'Partitions' }, parts.map((p) => {
      const n = num(p.partition);
      return h('a', { href: base + '?' + new URLSearchParams({ partition: n }), 'aria-current': n === part ? 'page' : null },
        `Partition ${n} (${fmt(p.total)})`);
    }));
    const rows = items.map((it) => h('tr', {},
      h('th', { scope: 'row' }, h('a', { href: base + '/' + enc(iid(it)) + '?' + new URLSearchParams({ partition: part }) }, h('code', {}, iid(it)))),
      h('td', {}, it.reference || '–'), h('td', {}, it.kind || '–'),
      h('td', { class: 'num' }, String(it.attempts || 0)), h('td', {}, it.is_leased ? 'leased' : 'ready'),
      h('td', {}, ago(it.created_at)), h('td', { class: 'error' }, preview(it.payload))));
    show(h('p', { class: 'crumbs' }, h('a', { href: '/ui/' }, 'Queues'), ' / ', h('a', { href: '/ui/queues/' + enc(name) }, name), ' / items'),
      h('h1', {}, 'Items of ' + name),
      h('p', { class: 'muted' }, 'Read-only: the items as they are stored, oldest first. Leasing, completing and deleting are for workers and the CLI.'),
      s.error ? null : tabs,
      res.error ? notShown('Items', res.error)
        : items.length === 0 ? h('p', { class: 'muted', id: 'no-items' }, `No items in partition ${part}${pivot ? ' after this point' : ''}.`)
          : table(`Items of partition ${part}${total ? ` (${plural(total.total, 'item', 'items')})` : ''}, oldest first`,
            ['ID', 'Reference', 'Kind', ['Attempts', 'num'], 'State', 'Created', 'Payload'], rows),
      h('nav', { class: 'pager', 'aria-label': 'Pages' },
        pivot ? h('a', { href: base + '?' + withParam(params, 'pivot', '') }, '← First page') : null,
        more && items.length ? h('a', { href: base + '?' + withParam(params, 'pivot', items[items.length - 1].id), rel: 'next' }, 'Next page →') : null));
  }

  function withParam(params, k, v) {
    const q = new URLSearchParams(params);
    if (v) q.set(k, v); else q.delete(k);
    return q.toString();
  }

  async function itemPage(my, name, id) {
    document.title = id + ' · ' + name + ' · Styx';
    const base = '/ui/queues/' + enc(name) + '/dead';
    const crumbs = h('p', { class: 'crumbs' }, h('a', { href: '/ui/' }, 'Queues'), ' / ', h('a', { href: '/ui/queues/' + enc(name) }, name),
      ' / ', h('a', { href: base }, 'dead items'), ' / ', id);
    const res = await soft(api('dead.list', { queue_name: name, filter: { ids: [id] }, limit: 1 }));
    if (my !== page) return;
    if (res.error) {
      show(crumbs, h('h1', {}, 'Dead item ' + id), notShown('The item', res.error, true));
      return;
    }
    const it = (res.items || [])[0];
    slowLive = 5000 + Math.min(55000, (it && it.payload ? it.payload.length : 0) / 20); // 5 s, a minute for a 1 MB payload
    if (!it) {
      show(crumbs, h('h1', {}, id), h('p', {}, `No item ${id} in ${name}: it was redriven, deleted or consumed.`));
      return;
    }
    const prop = (k, v) => [h('dt', {}, k), h('dd', {}, v === undefined || v === '' || v === null ? '–' : v)];
    const errors = it.errors || [];
    const dlqErrors = it.dead_letter_errors || [];
    const filter = { ids: [iid(it)] };
    show(crumbs, h('h1', {}, 'Dead item ' + iid(it)),
      h('div', { class: 'actions' },
        h('button', { type: 'button', onclick: action(() => redriveFlow(name, filter)) }, 'Redrive this item…'),
        decodeText(it.payload) === null ? h('span', { class: 'muted' }, 'Binary payload: edit it with styx dead edit --payload-file.')
          : h('button', { type: 'button', id: 'edit-button', onclick: action(async () => { if (await editFlow(name, it)) render(true); }) }, 'Edit…'),
        h('button', { type: 'button', class: 'danger', onclick: action(async () => { if (await deleteFlow(name, filter, 1)) navigate(base); }) }, 'Delete this item…')),
      h('dl', { class: 'props' },
        prop('Source queue', it.source_queue === HIDDEN_QUEUE ? HIDDEN_TEXT
          : it.source_queue ? h('a', { href: '/ui/queues/' + enc(it.source_queue) }, it.source_queue) : ''),
        prop('Id in source', it.source_id), prop('Reason', it.dead_reason),
        prop('Attempts', String(it.attempts || 0) + (it.max_attempts ? ' of ' + it.max_attempts : '') +
          (it.dead_letter_attempts ? ` (${it.dead_letter_attempts} in this dead-letter queue)` : '')),
        prop('Dead at', when(it.dead_at)), prop('Created at', when(it.created_at)),
        prop('Expires at', when(it.expire_deadline)), prop('Kind', it.kind), prop('Reference', it.reference), prop('Group', it.group),
        prop('Encoding', it.encoding), prop('Redrive count', String(it.redrive_count || 0)),
        // An item that died without an error text (an SQS message whose
        // visibility was set to 0, a retry without --error) has no error
        // to group by: no group link, and its last error says so.
        prop('Error group', it.fingerprint && it.last_error ? h('a', { href: base + '?' + new URLSearchParams({ fingerprint: it.fingerprint }) }, it.fingerprint) : ''),
        prop('Last error', it.last_error ? h('code', {}, it.last_error) : noError()),
        prop('DLQ attempts', String(it.dead_letter_attempts || 0))),
      h('h2', {}, 'Payload'), ...payloadView(it.payload, it.id + (/json/i.test(it.encoding || '') ? '.json' : '.bin')),
      ...attributesView(it.attributes || []),
      h('h2', {}, 'Attempt errors, redrives and edits'),
      errors.length === 0 ? h('p', { class: 'muted' }, 'No attempt errors were recorded.')
        : h('ol', { class: 'timeline', 'aria-label': 'Attempt errors, oldest first' }, errors.map((e) => h('li', {},
          h('div', { class: 'when' }, historyEntry(e), when(e.at)),
          h('code', {}, e.error || '')))),
      // Leases in this dead-letter queue (styx lease, an SQS receive) are
      // DLQ attempts: kept apart, they never change why the item died.
      h('h2', { id: 'dlq-attempts' }, 'Attempts in this dead-letter queue'),
      dlqErrors.length === 0 ? h('p', { class: 'muted' }, 'None: no lease of this item ended here without a complete.')
        : h('ol', { class: 'timeline', 'aria-label': 'DLQ attempts, oldest first' }, dlqErrors.map((e) => h('li', {},
          h('div', { class: 'when' }, `DLQ attempt ${e.attempt || '?'} · `, when(e.at)),
          e.error ? h('code', {}, e.error) : noError()))));
  }

  // historyEntry names an entry of an item's attempt history: an attempt
  // (or a redrive's entry) by its number, a payload edit (kind "edit",
  // which is no attempt) as an edit.
  function historyEntry(e) {
    return e.kind === 'edit' ? 'Payload edit · ' : `Attempt ${e.attempt || '?'} · `;
  }

  // attributesView shows an item's attributes as the API that produced it
  // describes them (the server decodes them: an SQS message's MessageId,
  // SentTimestamp and message attributes), one row each; nothing when the
  // item has none. Values are user data: text nodes, never markup.
  function attributesView(attrs) {
    if (attrs.length === 0) return [];
    return [h('h2', { id: 'attributes' }, 'Attributes'),
      table(plural(attrs.length, 'attribute', 'attributes') + ', as the API that produced the item keeps them',
        ['Set', 'Name', 'Type', 'Value'], attrs.map((a) => h('tr', {},
          h('td', {}, a.group || ''), h('th', { scope: 'row' }, a.name || ''), h('td', {}, a.data_type || '–'),
          h('td', {}, h('code', {}, a.value || '')))))];
  }

  // findLiveItem returns the item id of queue name as storage lists it,
  // with scheduled true when it is scheduled: in partition part when given
  // (a number), else in each of the queue's parts; null when no partition
  // holds it. The lists' pivots are inclusive: a page of one from the id
  // starts with the item when it is there.
  async function findLiveItem(name, id, part, parts) {
    // id may be the item's first id (its id for its life in the queue),
    // which the lists' pivots do not know: ask for the item by id first,
    // for its current id.
    const byId = ((await api('storage/items.list', { queue_name: name, ids: [id] })).items || [])[0];
    const cur = byId && (byId.id === id || byId.first_id === id) ? byId.id : id;
    const look = parts.length && part === null ? parts.map((p) => num(p.partition)) : [part === null ? 0 : part];
    for (const n of look) {
      for (const [call, scheduled] of [['storage/items.list', false], ['storage/scheduled.list', true]]) {
        const res = await api(call, { queue_name: name, partition: n, pivot: cur, limit: 1 });
        const it = (res.items || [])[0];
        if (it && it.id === cur) return { it, scheduled, partition: n };
      }
    }
    return null;
  }

  // liveItemPage shows one item of a queue, read-only: its state (ready,
  // leased until its lease deadline and by which consumer when the queue
  // knows, scheduled), attempts, kind, reference and payload. Nothing on it
  // changes the item: leasing, completing and deleting are for workers and
  // the CLI; a dead item has its own page, with its actions.
  async function liveItemPage(my, name, id) {
    document.title = id + ' · ' + name + ' · Styx';
    const params = new URLSearchParams(location.search);
    const part = params.get('partition') === null ? null : Number(params.get('partition'));
    const crumbs = h('p', { class: 'crumbs' }, h('a', { href: '/ui/' }, 'Queues'), ' / ', h('a', { href: '/ui/queues/' + enc(name) }, name),
      ' / ', h('a', { href: '/ui/queues/' + enc(name) + '/items' + (part === null ? '' : '?' + new URLSearchParams({ partition: part })) }, 'items'), ' / ', id);
    const s = await soft(api('queue.stats', { queue_name: name }));
    let found;
    try { found = await findLiveItem(name, id, part, counts(s).parts); } catch (e) {
      if (e.status === 401) throw e;
      if (my !== page) return;
      show(crumbs, h('h1', {}, 'Item ' + id), notShown('The item', e, true));
      return;
    }
    if (my !== page) return;
    if (!found) {
      show(crumbs, h('h1', {}, 'Item ' + id), h('p', { id: 'item-gone' }, `No item ${id} in ${name}: it was completed, retried under a new id, dead-lettered or deleted.`));
      return;
    }
    const { it, scheduled, partition } = found;
    slowLive = 5000 + Math.min(55000, (it.payload ? it.payload.length : 0) / 20);
    // The lease's consumer, stored with it (issue 49); else the one whose
    // held leases name it (a server before that).
    const holder = it.lease_client_id ? { client_id: it.lease_client_id, key_name: it.lease_key_name }
      : (s.consumers || []).find((c) => (c.held_ids || []).includes(it.id));
    const state = it.is_leased
      ? h('span', {}, h('span', { class: 'badge running' }, 'leased'), ' until ', when(it.lease_deadline),
        holder ? [' by consumer ', h('code', {}, holder.client_id), holder.key_name ? ` (key ${holder.key_name})` : ''] : ' (consumer not known)')
      : scheduled ? h('span', {}, h('span', { class: 'badge' }, 'scheduled'), ' for ', when(it.enqueue_at))
        : h('span', {}, h('span', { class: 'badge' }, it.dead_reason ? 'dead' : 'ready'));
    const prop = (k, v) => [h('dt', {}, k), h('dd', {}, v === undefined || v === '' || v === null ? '–' : v)];
    const errors = it.errors || [];
    show(crumbs, h('h1', {}, 'Item ' + iid(it)),
      h('p', { class: 'muted', id: 'read-only' }, 'Read-only: the item as it is stored now. Leasing, completing and deleting are for workers and the CLI.'),
      it.dead_reason ? h('p', {}, h('a', { href: '/ui/queues/' + enc(name) + '/dead/' + enc(iid(it)) }, 'Open it as a dead item')) : null,
      h('dl', { class: 'props', id: 'item-props' },
        prop('State', state), prop('Partition', String(partition)),
        prop('Attempts', String(it.attempts || 0) + (it.max_attempts ? ' of ' + it.max_attempts : '')),
        prop('Kind', it.kind), prop('Reference', it.reference), prop('Group', it.group), prop('Encoding', it.encoding),
        prop('Created at', when(it.created_at)), prop('Expires at', when(it.expire_deadline)),
        prop('Redrive count', String(it.redrive_count || 0)),
        prop('Last error', it.last_error ? h('code', {}, it.last_error) : '')),
      h('h2', {}, 'Payload'), ...payloadView(it.payload, it.id + (/json/i.test(it.encoding || '') ? '.json' : '.bin')),
      h('h2', {}, 'Attempt errors'),
      errors.length === 0 ? h('p', { class: 'muted' }, 'No attempt errors were recorded.')
        : h('ol', { class: 'timeline', 'aria-label': 'Attempt errors, oldest first' }, errors.map((e) => h('li', {},
          h('div', { class: 'when' }, historyEntry(e), when(e.at)),
          h('code', {}, e.error || '')))));
  }

  // decodeText returns a payload (base64 from the API) as text, or null
  // when it is not UTF-8 text.
  function decodeText(b64) {
    const bytes = Uint8Array.from(atob(b64 || ''), (c) => c.charCodeAt(0));
    try { return new TextDecoder('utf-8', { fatal: true }).decode(bytes); } catch { return null; }
  }

  // encodeText returns text as UTF-8 in base64 (the API's bytes).
  function encodeText(text) {
    const bytes = new TextEncoder().encode(text);
    let bin = '';
    for (let i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
    return btoa(bin);
  }

  // editFlow opens the edit dialog on a dead item's payload (text), checks
  // it as JSON while it is typed (when the JSON box is ticked), and saves
  // it with dead.edit. It resolves true when the item was saved.
  function editFlow(queue, it) {
    const dlg = document.getElementById('edit-dialog');
    if (dlg.open) { toast(BUSY_NOTE); return Promise.resolve(false); }
    const area = document.getElementById('edit-payload');
    const json = document.getElementById('edit-json');
    const check = document.getElementById('edit-check');
    const save = document.getElementById('edit-save');
    const kind = document.getElementById('edit-kind');
    const ref = document.getElementById('edit-reference');
    const text = decodeText(it.payload) || '';
    let isJSON = false;
    try { JSON.parse(text); isJSON = text.trim() !== ''; } catch { isJSON = false; }
    area.value = isJSON ? JSON.stringify(JSON.parse(text), null, 2) : text;
    json.checked = isJSON || /json/i.test(it.encoding || '');
    kind.value = it.kind || '';
    ref.value = it.reference || '';
    const validate = () => {
      if (!json.checked) { check.textContent = ''; check.className = ''; save.disabled = false; return true; }
      try {
        JSON.parse(area.value);
        check.textContent = 'Valid JSON.'; check.className = 'good'; save.disabled = false;
        return true;
      } catch (e) {
        check.textContent = 'Not valid JSON: ' + e.message; check.className = 'bad'; save.disabled = true;
        return false;
      }
    };
    area.oninput = validate;
    json.onchange = validate;
    validate();
    return new Promise((resolve) => {
      dlg.addEventListener('close', async () => {
        if (dlg.returnValue !== 'save' || !validate()) { resolve(false); return; }
        const body = { queue_name: queue, id: iid(it), payload: encodeText(area.value) };
        if (kind.value !== (it.kind || '')) body.kind = kind.value;
        if (ref.value !== (it.reference || '')) body.reference = ref.value;
        try {
          await api('dead.edit', body);
          toast(`Saved ${iid(it)}: its history records the old payload's size and hash.`);
          resolve(true);
        } catch (e) { toast(e.message); resolve(false); }
      }, { once: true });
      dlg.returnValue = '';
      dlg.showModal();
      area.focus();
    });
  }

  async function redrivesPage(my) {
    document.title = 'Redrives · Styx';
    const highlight = new URLSearchParams(location.search).get('task');
    const res = await soft(api('redrives.list', {}));
    if (my !== page) return;
    if (res.error) {
      show(h('h1', {}, 'Redrives'), notShown('Redrive tasks', res.error));
      return;
    }
    const tasks = res.tasks || [];
    const rows = tasks.map((t) => {
      const matched = num(t.matched), moved = num(t.moved), failed = num(t.failed), skipped = num(t.skipped);
      const done = moved + failed + skipped;
      const live = isLive(t);
      return h('tr', { id: 'task-' + t.task_id, class: t.task_id === highlight ? 'current' : '', 'aria-current': t.task_id === highlight ? 'true' : null },
        h('th', { scope: 'row' }, h('a', { href: '/ui/redrives/' + enc(t.task_id) }, h('code', {}, t.task_id))),
        h('td', {}, h('a', { href: '/ui/queues/' + enc(t.queue_name) + '/dead' }, t.queue_name)),
        h('td', {}, t.destination || 'source queues'),
        h('td', {}, describeFilter(t.filter, t.error_pattern)),
        h('td', {}, t.warning && t.status === 'completed' ? h('span', { class: 'badge warning', title: t.warning }, 'completed with warnings')
          : h('span', { class: 'badge ' + t.status }, t.status)),
        h('td', { class: 'progress' }, h('progress', { max: String(Math.max(matched, 1)), value: String(matched ? done : 1), 'aria-label': `Progress of ${t.task_id}` }),
          ' ', h('span', { class: 'progress-text' }, `${fmt(moved)} of ${fmt(matched)} moved`,
            failed ? ` · ${fmt(failed)} failed` : '', skipped ? ` · ${fmt(skipped)} skipped` : '',
            t.rate_limit ? h('span', { class: 'muted' }, ` · ${fmt(t.rate_limit)}/s`) : '')),
        h('td', {}, ago(t.started_at), h('div', { class: 'muted task-times' }, taskTimesText(t, live)), R.outcomesNode(h, t)),
        h('td', {}, live ? taskButtons(t)
          : (t.failure_reason ? h('span', { class: 'muted' }, t.failure_reason)
            : t.warning ? h('span', { class: 'warn' }, t.warning) : '')));
    });
    show(h('h1', {}, 'Redrives'),
      tasks.length === 0 ? h('p', { class: 'muted' }, 'No redrive tasks.')
        : table('Redrive tasks, newest first', ['Task', 'Dead-letter queue', 'Destination', 'Items', 'Status', 'Progress', 'Started', ''], rows));
    if (tasks.some(isLive)) fastLive = true;
  }

  // taskTimes returns, as text, a task's duration (so far, while it is
  // unfinished), its running time (the duration less its pauses:
  // paused_ms, and the current one since paused_at), how long its current
  // pause has lasted (paused, '' unless paused) and, while it runs and
  // has made progress, its ETA at its rate over its running time. A paused
  // or pausing task has no ETA: it moves nothing until resumed.
  function taskTimes(t) {
    const start = Date.parse(t.started_at);
    const end = t.finished_at ? Date.parse(t.finished_at) : Date.now();
    if (Number.isNaN(start)) return { took: '', ran: '', paused: '', eta: '' };
    const pausedAt = t.paused_at ? Date.parse(t.paused_at) : NaN;
    const current = Number.isNaN(pausedAt) ? 0 : Math.max(end - pausedAt, 0);
    const ranMs = Math.max(end - start - num(t.paused_ms) - current, 0);
    const matched = num(t.matched), done = num(t.moved) + num(t.failed) + num(t.skipped);
    let eta = '';
    // A task waiting for its canary's outcome moves nothing meanwhile: no ETA.
    if ((t.status === 'running' || t.status === 'cancelling') && t.canary_status !== 'waiting' && done > 0 && done < matched && ranMs > 0) eta = dur((matched - done) * ranMs / done);
    return { took: dur(end - start), ran: dur(ranMs), paused: Number.isNaN(pausedAt) ? '' : dur(current), eta };
  }

  // taskTimesText says a task's times in a line of the redrives list:
  // "running 40s · ETA 1m 2s", "paused for 17s · ran 5s", "took 2m".
  function taskTimesText(t, live) {
    const { took, ran, paused, eta } = taskTimes(t);
    if (!live) return 'took ' + took;
    if (t.status === 'paused') return `paused for ${paused} · ran ${ran}`;
    return `${t.status} ${ran}` + (eta ? ' · ETA ' + eta : '');
  }

  // redrivePage is one redrive task: what it moves, its progress, duration
  // and ETA, its results by queue, and why items stayed.
  async function redrivePage(my, id) {
    document.title = id + ' · Redrives · Styx';
    const crumbs = h('p', { class: 'crumbs' }, h('a', { href: '/ui/redrives' }, 'Redrives'), ' / ', id);
    const t = await soft(api('redrives.get', { task_id: id }));
    if (my !== page) return;
    if (t.error) { show(crumbs, h('h1', {}, 'Redrive ' + id), notShown('The task', t.error, true)); return; }
    if (isLive(t)) fastLive = true;
    const matched = num(t.matched), done = num(t.moved) + num(t.failed) + num(t.skipped);
    const { took, ran, paused, eta } = taskTimes(t);
    const prop = (k, v) => [h('dt', {}, k), h('dd', {}, v === undefined || v === '' || v === null ? '–' : v)];
    const byQueue = Object.entries(t.by_queue || {});
    show(crumbs, h('h1', {}, 'Redrive ' + id),
      isLive(t) ? taskButtons(t) : null,
      t.warning ? h('p', { class: 'note', role: 'note' }, t.warning) : null,
      h('dl', { class: 'props' },
        prop('Status', h('span', { class: 'badge ' + (t.warning && t.status === 'completed' ? 'warning' : t.status) },
          t.warning && t.status === 'completed' ? 'completed with warnings' : t.status)),
        prop('Dead-letter queue', h('a', { href: '/ui/queues/' + enc(t.queue_name) + '/dead' }, t.queue_name)),
        prop('Destination', t.destination || 'each item\'s source queue'), prop('Items', describeFilter(t.filter, t.error_pattern)),
        prop('Progress', [h('progress', { max: String(Math.max(matched, 1)), value: String(matched ? done : 1), 'aria-label': `Progress of ${t.task_id}` }),
          ` ${fmt(t.moved)} of ${fmt(matched)} moved`, num(t.failed) ? ` · ${fmt(t.failed)} failed` : '', num(t.skipped) ? ` · ${fmt(t.skipped)} skipped` : '']),
        prop('Rate limit', t.rate_limit ? plural(t.rate_limit, 'item per second', 'items per second') : 'none'),
        prop('Started', when(t.started_at)), prop('Finished', t.finished_at ? when(t.finished_at) : ''),
        prop('Duration', took), prop('Running time', num(t.paused_ms) || t.paused_at ? ran + ' (pauses left out)' : ran),
        t.status === 'paused' ? prop('Paused', [`for ${paused}, since `, when(t.paused_at)]) : null,
        prop('ETA', t.status === 'paused' || t.status === 'pausing' ? 'none while paused' : eta),
        prop('Failure', t.failure_reason), prop('Started by key', t.key_name),
        t.outcomes ? prop('Outcomes', [R.outcomesText(t.outcomes), t.outcomes_until ? h('span', { class: 'muted' }, ' (counted until ', when(t.outcomes_until), ')') : '']) : null,
        num(t.canary) ? prop('Canary', R.canaryText(t)) : null),
      h('h2', {}, 'By queue'),
      byQueue.length === 0 ? h('p', { class: 'muted' }, 'Nothing moved yet.')
        : table('Results by destination queue', ['Queue', ['Moved', 'num'], ['Failed', 'num'], ['Skipped', 'num'], 'Why skipped'],
          byQueue.map(([q, c]) => h('tr', {}, h('th', { scope: 'row' }, q || '(no source queue)'), h('td', { class: 'num' }, fmt(c.moved)),
            h('td', { class: 'num' }, fmt(c.failed)), h('td', { class: 'num' }, fmt(c.skipped)), h('td', {}, skipReasons(c.skip_reasons) || '–')))));
  }

  // taskButtons are the actions on an unfinished task: pause or resume,
  // change its rate, cancel.
  function taskButtons(t) {
    const changing = t.status === 'running' || t.status === 'pausing' || t.status === 'paused';
    const id = t.task_id;
    return h('div', { class: 'actions task-actions' },
      t.status === 'running' ? h('button', { type: 'button', 'aria-label': `Pause ${id}`, onclick: action(() => changeTask(t, 'redrives.pause', `Pausing ${id}.`)) }, 'Pause') : null,
      t.status === 'paused' || t.status === 'pausing' ? h('button', { type: 'button', class: 'primary', 'aria-label': `Resume ${id}`, onclick: action(() => changeTask(t, 'redrives.resume', `Resumed ${id}.`)) }, 'Resume') : null,
      changing ? h('button', { type: 'button', 'aria-label': `Change the rate of ${id}`, onclick: action(() => rateTask(t)) }, 'Rate…') : null,
      t.status !== 'cancelling' ? h('button', { type: 'button', class: 'danger', 'aria-label': `Cancel ${id}`, onclick: action(() => cancelTask(t)) }, 'Cancel…') : null);
  }

  async function changeTask(t, call, note) {
    try {
      await api(call, { task_id: t.task_id });
      toast(note);
    } catch (e) { toast(e.message); }
    render(true);
  }

  // rateTask asks for a task's new rate limit and sets it: the task moves
  // at it from its next step.
  async function rateTask(t) {
    const rate = h('input', { id: 'task-rate', type: 'number', min: '0', max: '1000000', step: '1', value: String(num(t.rate_limit)), inputmode: 'numeric' });
    if (!await confirmAction('Change the rate', [h('p', {}, `Redrive ${t.task_id} of ${t.queue_name} moves ${t.rate_limit ? plural(t.rate_limit, 'item per second', 'items per second') : 'with no rate limit'} now; the new rate applies from its next step.`),
      h('label', { for: 'task-rate' }, 'Rate limit (items per second, 0 for no limit)'), rate], 'Set rate')) return;
    try {
      const u = await api('redrives.update', { task_id: t.task_id, rate_limit: Number(rate.value) || 0 });
      toast(`${t.task_id} now moves ${u.rate_limit ? plural(u.rate_limit, 'item per second', 'items per second') : 'with no rate limit'}.`);
    } catch (e) { toast(e.message); }
    render(true);
  }

  async function cancelTask(t) {
    if (!await confirmAction('Cancel redrive', [h('p', {}, `Stop redrive ${t.task_id} of ${t.queue_name}? Items already moved stay moved.`)], 'Cancel redrive', true)) return;
    try {
      await api('redrives.cancel', { task_id: t.task_id });
      toast(`Cancelling ${t.task_id}.`);
    } catch (e) { toast(e.message); }
    render(true);
  }

  // ---------------------------------------------------------------- routing

  // route returns the page function and its arguments for a path.
  function route(path) {
    const p = path.replace(/\/+$/, '');
    let m;
    if (p === '/ui') return [overview];
    if (p === '/ui/redrives') return [redrivesPage];
    if ((m = /^\/ui\/redrives\/([^/]+)$/.exec(p))) return [redrivePage, decodeURIComponent(m[1])];
    if ((m = /^\/ui\/queues\/([^/]+)\/dead\/([^/]+)$/.exec(p))) return [itemPage, decodeURIComponent(m[1]), decodeURIComponent(m[2])];
    if ((m = /^\/ui\/queues\/([^/]+)\/dead$/.exec(p))) return [deadPage, decodeURIComponent(m[1])];
    if ((m = /^\/ui\/queues\/([^/]+)\/items$/.exec(p))) return [itemsPage, decodeURIComponent(m[1])];
    if ((m = /^\/ui\/queues\/([^/]+)\/items\/([^/]+)$/.exec(p))) return [liveItemPage, decodeURIComponent(m[1]), decodeURIComponent(m[2])];
    if ((m = /^\/ui\/queues\/([^/]+)$/.exec(p))) return [queuePage, decodeURIComponent(m[1])];
    return [async () => show(h('h1', {}, 'Not found'), h('p', {}, 'No page at ' + path + '. '), h('a', { href: '/ui/' }, 'Back to the queues'))];
  }

  // render draws the page of the current URL. refresh keeps the focus
  // where it is (a live update); a navigation moves it to the page.
  // ---------------------------------------------------------------- live updates

  // Every page redraws itself every LIVE_MS (FAST_MS while it shows a
  // running redrive: fastLive), from fresh calls, keeping the focus. A
  // redraw waits while a dialog is open or an action is in progress (its
  // dry run: see action), the tab is hidden, the keyboard is in one of the
  // page's form fields, or the user paused live updates (the header's
  // button; kept for the tab).
  const LIVE_MS = 2000, FAST_MS = 1000;
  const LIVE_STORAGE = 'styx.live';
  let liveTimer = null;
  let fastLive = false;
  // slowLive, when a page sets it, is a longer interval for a page whose
  // update is costly (the overview calls queue.stats once per queue; an
  // item page reads the item's payload).
  let slowLive = 0;
  const liveButton = document.getElementById('live-button');
  const livePaused = () => sessionStorage.getItem(LIVE_STORAGE) === 'paused';
  const isLive = (t) => t.status === 'running' || t.status === 'cancelling' || t.status === 'pausing' || t.status === 'paused';

  function showLive(note) {
    const paused = livePaused();
    liveButton.setAttribute('aria-pressed', String(!paused));
    liveButton.textContent = paused ? 'Live updates: paused' : 'Live updates: on';
    liveButton.title = note || (paused ? 'Click to update the page on its own again' : 'The page updates itself every few seconds; click to pause');
    liveButton.classList.toggle('stale', Boolean(note));
  }

  function scheduleLive(my) {
    clearTimeout(liveTimer);
    liveTimer = setTimeout(() => {
      if (my !== page) return;
      const a = document.activeElement;
      const typing = a && main.contains(a) && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName) && a.type !== 'checkbox';
      if (livePaused() || acting !== null || document.querySelector('dialog[open]') || document.hidden || typing) { scheduleLive(my); return; }
      render(true);
    }, fastLive ? FAST_MS : Math.max(LIVE_MS, slowLive));
  }

  liveButton.addEventListener('click', () => {
    sessionStorage.setItem(LIVE_STORAGE, livePaused() ? 'on' : 'paused');
    showLive();
  });
  showLive();

  async function render(refresh = false) {
    const my = ++page;
    fastLive = false;
    slowLive = 0;
    const [fn, ...args] = route(location.pathname);
    // A live update redraws the page: keep the keyboard focus on the same
    // control (found again by its label or id).
    const active = document.activeElement;
    const focusKey = refresh && active && main.contains(active) ? (active.tagName === 'H1' ? 'h1' : active.getAttribute('aria-label') || active.id) : '';
    try {
      await fn(my, ...args);
      if (my === page && refresh) showLive();
    } catch (e) {
      // A live update that fails keeps the page as it was and says so.
      if (my === page && refresh && e.status !== 401) showLive('Last update failed: ' + e.message);
      else if (my === page) show(h('h1', {}, 'Error'), errorBox(e));
    }
    if (my === page && !refresh) {
      const h1 = main.querySelector('h1');
      if (h1) { h1.tabIndex = -1; h1.focus({ preventScroll: true }); }
    }
    if (my === page && focusKey) {
      const again = focusKey === 'h1' ? main.querySelector('h1')
        : [...main.querySelectorAll('[aria-label], [id]')].find((el) => (el.getAttribute('aria-label') || el.id) === focusKey);
      if (again) {
        if (focusKey === 'h1') again.tabIndex = -1;
        again.focus({ preventScroll: true });
      }
    }
    if (my === page) {
      main.dataset.ready = String(my);
      scheduleLive(my);
    }
  }

  function navigate(url) {
    history.pushState(null, '', url);
    render();
  }

  document.addEventListener('click', (ev) => {
    const a = ev.target.closest && ev.target.closest('a[href]');
    if (!a || ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey || a.target) return;
    const url = new URL(a.href, location.href);
    if (url.origin !== location.origin || !url.pathname.startsWith('/ui')) return;
    ev.preventDefault();
    navigate(url.pathname + url.search + url.hash);
  });
  window.addEventListener('popstate', () => render());
  document.getElementById('key-button').addEventListener('click', () => askKey('Enter the API key to send with every call.').then((ok) => { if (ok) render(); }));
  render();
})();
