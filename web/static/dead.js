// Styx UI: a dead-letter queue's page (/ui/queues/{name}/dead): error
// groups, the filters (kept in the URL), the dead items a page at a time,
// and the bulk selection of items to redrive or delete several at once.
'use strict';

(() => {
  const S = window.styx;
  const { PAGE_SIZE, HIDDEN_QUEUE, HIDDEN_TEXT, main, api, action, h, table, show, toast, errorBox, num, fmt,
    enc, iid, plural, ago, sinceToTime, soft, notShown, NO_ERROR, noError, isLive, groupChart, describeFilter,
    everything, liveBanner, redriveFlow, deleteFlow } = S;
  // A is the Activity panel of the queue and DLQ pages (activity.js).
  const A = window.styxActivity;

  const REASONS = ['max_attempts', 'expired', 'explicit'];

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
    if (my !== S.page || key !== bulk.key) return;
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
        onclick: action(async () => { if (await deleteFlow(name, bulkFilter(), undefined, bulk.all ? pattern : undefined)) { bulkClear(); S.render(); } }) }, 'Delete selected…'),
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

  // ---------------------------------------------------------------- the page

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
    if (my !== S.page) return;
    if (groups.error && list.error && groups.error.message === list.error.message) {
      // Both calls failed alike (a queue that is no dead-letter queue, a
      // key without the dead scope): say it once.
      show(crumbs, h('h1', {}, 'Dead items of ' + name), notShown('Dead items', list.error),
        h('p', {}, h('a', { href: '/ui/queues/' + enc(name) }, 'Back to ' + name)));
      return;
    }
    const running = (tasks.tasks || []).some(isLive);
    if (running) S.live.fast = true;

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
            onclick: action(async () => { if (await deleteFlow(name, gf, num(g.count), g.pattern)) S.render(); }) }, 'Delete…'))));
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
      S.navigate(base + (q.toString() ? '?' + q : ''));
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
    if (my !== S.page) return;
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
        h('button', { type: 'button', class: 'danger', onclick: action(async () => { if (await deleteFlow(name, filter, undefined, fpPattern)) S.render(); }) },
          filtered ? 'Delete matching…' : 'Delete all…')),
      list.error || (items.length === 0 && bulk.ids.size === 0 && !bulk.all) ? null : bulkBar({ name, filter, pattern: fpPattern, items }),
      list.error ? null : items.length === 0 ? h('p', { class: 'muted', id: 'no-items' }, filtered ? 'No dead items match these filters on this page.' : 'No dead items.')
        : table(`Dead items${filtered ? ' matching ' + describeFilter(filter, fpPattern) : ''}, oldest first`,
          [h('span', { class: 'select-head' }, bulkHead(items), 'ID'), 'Source', 'Reference', 'Reason', 'Kind', ['Attempts', 'num'], 'Dead', 'Last error'], itemRows),
      pager,
      A.panel(h, acts, name, { table, ago, notShown }));
  }

  Object.assign(S, { deadPage });
})();
