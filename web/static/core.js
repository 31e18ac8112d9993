// Styx UI, the core every page file builds on (window.styx): api(), the
// one place that calls the server, adds the API key (Authorization:
// Bearer) and asks for one when the server answers 401; the API key and
// confirmation dialogs, action() and toasts; the h() element builder and
// table(); the formats (counts, times, durations); the state the pages
// share with the render loop (page, live). Loaded first; each page file
// adds its functions to window.styx, and app.js routes to them.
'use strict';

window.styx = (() => {
  const KEY_STORAGE = 'styx.apiKey';
  // PAGE_SIZE is how many items a list page shows (dead items, items).
  const PAGE_SIZE = 50;
  // HIDDEN_QUEUE stands for a queue the key does not cover in every answer
  // (internal/auth/hidden.go); no request may name it.
  const HIDDEN_QUEUE = '~hidden';
  const HIDDEN_TEXT = 'a queue this key cannot see';
  const main = document.getElementById('main');

  let page = 0; // bumped on each navigation; stale async work checks it

  // live is what the page drawn last asks of the live updates (app.js):
  // fast while it shows a running redrive, slow (ms, when not 0) for a
  // page whose update is costly (the overview calls queue.stats once per
  // queue; an item page reads the item's payload). render resets both
  // before each drawing; the pages set them.
  const live = { fast: false, slow: 0 };

  // nextPage starts a drawing (render): the number its async work checks
  // against styx.page before touching the page.
  const nextPage = () => ++page;

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
  // busy reports whether an action is in progress (the live updates wait).
  const busy = () => acting !== null;

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
      box.append(' ', h('button', { type: 'button', class: 'link', onclick: () => askKey('Enter an API key.').then(window.styx.render) }, 'Enter an API key'));
    }
    return box;
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


  // ---------------------------------------------------------------- page sections

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

  // isLive reports whether a redrive task is unfinished.
  const isLive = (t) => t.status === 'running' || t.status === 'cancelling' || t.status === 'pausing' || t.status === 'paused';

  return {
    PAGE_SIZE, HIDDEN_QUEUE, HIDDEN_TEXT, main,
    // page is the number of the drawing in progress (nextPage); async work
    // started for an earlier one (my !== styx.page) leaves the page alone.
    get page() { return page; },
    nextPage, live, busy,
    APIError, api, askKey, BUSY_NOTE, confirmAction, action,
    h, table, show, toast, errorBox,
    num, fmt, enc, iid, plural, unset, ago, goDur, dur, when, sinceToTime,
    soft, notShown, NO_ERROR, noError, counts, sum, isLive,
  };
})();
