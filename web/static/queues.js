// Styx UI: the queue pages: the overview (/ui/: every queue, its counts,
// rates and charts) and a queue's page (/ui/queues/{name}: counts, charts,
// consumers, held groups, configuration, partitions, live-queue controls
// and activity).
'use strict';

(() => {
  const S = window.styx;
  const { api, confirmAction, action, h, table, show, toast, num, fmt, enc, plural, ago, goDur, when, soft,
    notShown, counts, sum, historyCharts } = S;
  // A is the Activity panel of the queue and DLQ pages (activity.js).
  const A = window.styxActivity;
  // L is the live-queue controls of a queue's page (livequeue.js).
  const L = window.styxLive;

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
    if (my !== S.page) return;
    S.live.slow = queues.length * 40; // 2 s up to 50 queues, 40 s for 1,000
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
    if (my !== S.page) return;
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
        ...(infoRes.error ? [] : L.buttons(h, info, name, { api, action, confirmAction, toast, render: S.render })),
        h('a', { class: 'button', href: '/ui/queues/' + enc(name) + '/items' }, 'Browse items')),
      h('h2', {}, 'Configuration'),
      infoRes.error ? notShown('The configuration', infoRes.error, true) : h('dl', { class: 'props' },
        prop('Namespace', info.namespace), prop('Dead-letter queue', info.dead_queue ? h('a', { href: '/ui/queues/' + enc(info.dead_queue) }, info.dead_queue) : ''),
        prop('Lease timeout', info.lease_timeout), prop('Expire timeout', info.expire_timeout),
        prop('Max attempts', info.max_attempts ? String(info.max_attempts) : 'unlimited'),
        prop('Partitions', String(info.requested_partitions || parts.length)), prop('Reference', info.reference),
        prop('Ordered groups', info.ordered ? 'yes: a group\'s items are leased in order, one lease at a time' : 'no'),
        info.ordered ? prop('A dead item in a group', info.group_dead_policy === 'hold' ? 'holds its group until redriven or deleted' : 'leaves; the group goes on') : null,
        info.cluster ? prop('PostgreSQL cluster', info.cluster) : null,
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

  Object.assign(S, { overview, queuePage });
})();
