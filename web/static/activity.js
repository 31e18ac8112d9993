// Styx UI: the Activity panel of a queue's page and a dead-letter queue's
// page (issue 49): who deleted, redrove, edited, paused, created, and
// when, from /v1/activity.list; and the DLQ page's warning of dead items
// that will expire within a day. Plain functions over app.js's h() and
// table(), loaded before it (window.styxActivity).
'use strict';

window.styxActivity = (() => {
  // LIMIT is how many records a panel shows, newest first.
  const LIMIT = 20;
  const num = (v) => Number(v || 0);
  const fmt = (v) => num(v).toLocaleString('en-US');
  const items = (n) => `${fmt(n)} ${num(n) === 1 ? 'item' : 'items'}`;

  // ACTIONS names each audited call as the panel says it.
  const ACTIONS = {
    'dead.delete': 'Deleted dead items', 'dead.redrive': 'Started a redrive', 'dead.edit': 'Edited a dead item',
    'redrives.pause': 'Paused a redrive', 'redrives.resume': 'Resumed a redrive', 'redrives.cancel': 'Cancelled a redrive',
    'redrives.update': 'Changed a redrive\'s rate', 'queues.create': 'Created the queue', 'queues.update': 'Changed the queue',
    'queues.delete': 'Deleted the queue', 'queues.pause': 'Paused consumption', 'queues.resume': 'Resumed consumption',
    'queue.clear': 'Cleared items', 'queue.reload': 'Reloaded the queue', 'storage/items.import': 'Imported items',
    'storage/items.delete': 'Deleted items',
  };

  // details is a record's details by name.
  function details(r) {
    const d = {};
    for (const x of r.details || []) d[x.name] = x.value;
    return d;
  }

  // what says what a record's call did, as nodes: "6 items", "3 items,
  // task rd-…" (linked), "item 33m…, payload 5 bytes".
  function what(h, r, queue) {
    const d = details(r);
    const out = [];
    if ('deleted' in d) out.push(items(d.deleted));
    if ('items' in d) out.push(items(d.items));
    if ('matched' in d) out.push(items(d.matched) + ' matched');
    if (d.task) out.push(h('span', {}, 'task ', h('a', { href: '/ui/redrives/' + encodeURIComponent(d.task) }, h('code', {}, d.task))));
    if (d.destination) out.push('to ' + (d.destination === '~hidden' ? 'a queue this key cannot see' : d.destination));
    if (d.item) {
      out.push(h('span', {}, 'item ', queue ? h('a', { href: '/ui/queues/' + encodeURIComponent(queue) + '/dead/' + encodeURIComponent(d.item) },
        h('code', {}, d.item)) : h('code', {}, d.item)));
    }
    if ('payload_bytes' in d) out.push(`payload now ${fmt(d.payload_bytes)} bytes`);
    const shown = new Set(['deleted', 'items', 'matched', 'task', 'destination', 'item', 'payload_bytes', 'dry_run']);
    for (const x of r.details || []) if (!shown.has(x.name)) out.push(`${x.name} ${x.value}`);
    if (out.length === 0) return ['–'];
    return out.flatMap((x, i) => (i ? [', ', x] : [x]));
  }

  // panel is the Activity section of queue's page: res is the
  // activity.list answer (or {error}); u holds app.js's table, ago and
  // notShown.
  function panel(h, res, queue, u) {
    const rs = res.records || [];
    return h('section', { id: 'activity' },
      h('h2', {}, 'Activity'),
      res.error ? u.notShown('The activity', res.error, true)
        : rs.length === 0 ? h('p', { class: 'muted', id: 'no-activity' }, 'Nobody changed this queue or its items in the last 30 days.')
          : u.table(`Who changed ${queue} or its items, newest first${res.next_pivot ? ` (the last ${rs.length}; styx activity ${queue} lists more)` : ''}`,
            ['When', 'API key', 'Action', 'What'],
            rs.map((r) => h('tr', { 'data-op': r.op },
              h('td', { title: r.at || '' }, u.ago(r.at)),
              h('td', {}, r.key_name || h('span', { class: 'muted' }, 'no key (auth off)')),
              h('th', { scope: 'row' }, (ACTIONS[r.op] || r.op) + (r.action ? ` (SQS ${r.action})` : '')),
              h('td', {}, ...what(h, r, queue))))));
  }

  // expiringBanner warns, on a dead-letter queue's page, of the dead items
  // that will expire within a day (queue.stats' expiring_within_day): they
  // are deleted at the end of the queue's retention (its expire timeout,
  // counted from each item's dead_at). null when none will.
  function expiringBanner(h, stats, queue) {
    const n = num(stats.expiring_within_day);
    if (n === 0) return null;
    return h('div', { class: 'banner', role: 'status', id: 'expiring-dead' },
      h('strong', {}, `${items(n)} will expire within a day.`),
      ` ${n === 1 ? 'It is' : 'They are'} deleted at the end of ${queue}'s retention (its expire timeout, counted from when each item died),`
        + ' and nothing else keeps them: redrive, fix or export what matters before then.');
  }

  return { LIMIT, panel, expiringBanner };
})();
