// Styx UI: the redrive tasks: the list (/ui/redrives) and one task's page
// (/ui/redrives/{id}) with progress, times and ETA, and the actions on an
// unfinished task (pause, resume, rate, cancel).
'use strict';

(() => {
  const S = window.styx;
  const { api, confirmAction, action, h, table, show, toast, num, fmt, enc, plural, ago, dur, when, soft,
    notShown, isLive, describeFilter, skipReasons } = S;
  // R is the redrive outcomes, canary and dialog defaults (redrive.js).
  const R = window.styxRedrive;

  async function redrivesPage(my) {
    document.title = 'Redrives · Styx';
    const highlight = new URLSearchParams(location.search).get('task');
    const res = await soft(api('redrives.list', {}));
    if (my !== S.page) return;
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
    if (tasks.some(isLive)) S.live.fast = true;
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
    if (my !== S.page) return;
    if (t.error) { show(crumbs, h('h1', {}, 'Redrive ' + id), notShown('The task', t.error, true)); return; }
    if (isLive(t)) S.live.fast = true;
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
    S.render(true);
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
    S.render(true);
  }

  async function cancelTask(t) {
    if (!await confirmAction('Cancel redrive', [h('p', {}, `Stop redrive ${t.task_id} of ${t.queue_name}? Items already moved stay moved.`)], 'Cancel redrive', true)) return;
    try {
      await api('redrives.cancel', { task_id: t.task_id });
      toast(`Cancelling ${t.task_id}.`);
    } catch (e) { toast(e.message); }
    S.render(true);
  }

  Object.assign(S, { redrivesPage, redrivePage });
})();
