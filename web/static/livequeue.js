// Styx UI: acting on a live queue (issue 49), on a queue's page: the
// banner of a paused queue, the Pause/Resume button (queues.pause,
// queues.resume) and the Clear… button, whose dialog shows what each clear
// would remove (queue.clear_dry_run) before anything is removed. Plain
// functions over app.js's h() and its dialog and action helpers, loaded
// before it (window.styxLive). The rules are the server's: a paused queue
// hands out nothing on every door until it is resumed.
'use strict';

window.styxLive = (() => {
  const num = (v) => Number(v || 0);
  const fmt = (v) => num(v).toLocaleString('en-US');
  const items = (n) => `${fmt(n)} ${num(n) === 1 ? 'item' : 'items'}`;

  // banner says, on a paused queue's page, that its leases get nothing
  // and since when; null while it runs. ago words a time ("5m ago").
  function banner(h, info, ago) {
    if (!info.paused) return null;
    return h('div', { class: 'banner', role: 'status', id: 'paused-banner' },
      h('strong', {}, 'Consumption is paused'), info.paused_at ? ` (it was paused ${ago(info.paused_at)})` : '',
      ': leases get nothing (a worker\'s long poll waits), on every door and node, until the queue is resumed.'
        + ' Produces go on, and so do the completes, retries and renewals of leases already held, and dead-letter moves.');
  }

  // CLEARS are what a clear removes, as the dialog offers them: the
  // queue.clear request and how the choice is worded.
  const CLEARS = [
    { id: 'ready', req: { queue: true }, label: 'Ready items', note: 'leased and scheduled items stay' },
    { id: 'scheduled', req: { scheduled: true }, label: 'Scheduled items', note: 'ready and leased items stay' },
    { id: 'all', req: { queue: true, scheduled: true, destructive: true }, label: 'Every item, leased ones included',
      note: 'their consumers\' completes will fail' },
  ];

  // buttons are the queue page's Pause/Resume and Clear… buttons. u holds
  // app.js's api, action, confirmAction, toast and render.
  function buttons(h, info, name, u) {
    const paused = !!info.paused;
    const pause = h('button', {
      type: 'button', id: 'pause-button',
      onclick: u.action(async () => {
        const ok = await u.confirmAction(paused ? `Resume ${name}?` : `Pause ${name}?`, paused
          ? [h('p', {}, `Leases of ${name} get its items again, the waiting ones at once.`)]
          : [h('p', {}, `Leases of ${name} will get nothing until you resume it: workers' long polls wait, on every door (SQS too) and every node.`),
            h('p', {}, 'Produces go on, and so do the completes, retries and renewals of leases already held, lease expiry and dead-letter moves.')],
        paused ? 'Resume' : 'Pause', !paused);
        if (!ok) return;
        await u.api(paused ? 'queues.resume' : 'queues.pause', { queue_name: name });
        u.toast(paused ? `Resumed ${name}: leases get its items again.` : `Paused ${name}: leases get nothing until you resume it.`);
        await u.render(true);
      }),
    }, paused ? 'Resume consumption…' : 'Pause consumption…');
    const clear = h('button', { type: 'button', id: 'clear-button', onclick: u.action(() => clearFlow(h, name, u)) }, 'Clear items…');
    return [pause, clear];
  }

  // clearFlow counts what each clear would remove (dry runs), shows the
  // counts in the dialog with a choice, and clears what was chosen.
  async function clearFlow(h, name, u) {
    const dry = await Promise.all(CLEARS.map((c) => u.api('queue.clear_dry_run', { queue_name: name, ...c.req })));
    const radios = CLEARS.map((c, i) => {
      const n = dry[i];
      const parts = [['ready', n.ready], ['scheduled', n.scheduled], ['leased', n.leased]].filter(([, v]) => num(v) > 0).map(([k, v]) => `${fmt(v)} ${k}`);
      const input = h('input', { type: 'radio', name: 'clear-what', value: c.id, id: 'clear-' + c.id });
      if (i === 0) input.checked = true;
      return {
        c, n, input,
        node: h('label', { class: 'inline', for: 'clear-' + c.id }, input,
          ` ${c.label}: `, h('strong', { class: 'clear-count', 'data-clear': c.id }, items(n.total)),
          c.id === 'all' && parts.length ? ` (${parts.join(', ')})` : '', h('span', { class: 'muted' }, `; ${c.note}`)),
      };
    });
    const ok = await u.confirmAction(`Clear items of ${name}?`, [
      h('p', { id: 'clear-summary' }, `${name} holds ${items(dry[2].total)} now. Choose what to remove; nothing is removed until you confirm, and what is removed is gone for good.`),
      h('fieldset', {}, h('legend', {}, 'Remove'), ...radios.map((r) => h('p', {}, r.node))),
    ], 'Clear', true);
    if (!ok) return;
    const chosen = radios.find((r) => r.input.checked) || radios[0];
    await u.api('queue.clear', { queue_name: name, ...chosen.c.req });
    u.toast(`Cleared ${chosen.c.label.toLowerCase().replace(', leased ones included', '')} of ${name}.`);
    await u.render(true);
  }

  return { banner, buttons };
})();
