// Styx UI: the actions on dead items, shared by the dead-letter queue
// page, its bulk selection and a dead item's page: the redrive and delete
// flows (a dry run counts, the dialog says what will happen, the call
// sends the count confirmed), a filter and skip reasons in words, and the
// banner of a queue's unfinished redrives.
'use strict';

(() => {
  const S = window.styx;
  const { api, confirmAction, h, table, toast, num, fmt, enc, plural, soft, counts, isLive } = S;
  // R is the redrive outcomes, canary and dialog defaults (redrive.js).
  const R = window.styxRedrive;

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
    const my = S.page;
    const tasks = await soft(api('redrives.list', { queue_name: queue }));
    if (my !== S.page) return; // the user left the page meanwhile
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
    if (my !== S.page) return;
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
    if (my !== S.page) return;
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
      S.navigate('/ui/redrives?task=' + enc(task.task_id));
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
    const my = S.page;
    let dry;
    try {
      dry = await api('dead.redrive', { queue_name: queue, filter, dry_run: true });
    } catch (e) { toast(e.message); return false; }
    if (my !== S.page) return false; // the user left the page meanwhile
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

  Object.assign(S, { describeFilter, skipReasons, everything, liveBanner, redriveFlow, deleteFlow });
})();
