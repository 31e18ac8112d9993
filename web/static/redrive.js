// Styx UI: what became of a redrive task's items (its outcomes), its
// canary, and the redrive dialog's safer defaults (issue 49). Plain
// functions over app.js's h(), loaded before it (window.styxRedrive).
'use strict';

window.styxRedrive = (() => {
  // DEFAULT_RATE is the redrive dialog's rate limit, items per second: the
  // CLI's too (styx.DefaultRedriveRate). No limit is a choice the user
  // makes (the checkbox, or 0).
  const DEFAULT_RATE = 100;
  // DEFAULT_CANARY is the dialog's canary size when the user turns one on.
  const DEFAULT_CANARY = 10;
  const num = (v) => Number(v || 0);
  const fmt = (v) => num(v).toLocaleString('en-US');

  // outcomesText says what became of the items a task moved
  // (RedriveTask.outcomes), the buckets that are not 0: "2 completed, 1
  // retried, 1 dead again, 2 pending"; '' without outcomes.
  function outcomesText(o) {
    if (!o) return '';
    const parts = [[o.completed, 'completed'], [o.retried, 'retried'], [o.dead_again, 'dead again'], [o.pending, 'pending']]
      .filter(([k]) => num(k) > 0).map(([k, w]) => `${fmt(k)} ${w}`);
    return parts.length ? parts.join(', ') : 'none yet';
  }

  // canaryText says where a task's canary is; '' without one.
  function canaryText(t) {
    const n = num(t.canary);
    if (!n) return '';
    const head = `${fmt(n)} ${n === 1 ? 'item' : 'items'}: `;
    switch (t.canary_status) {
      case 'waiting': return head + `waiting for the outcome of ${fmt(t.canary_moved)} moved ${num(t.canary_moved) === 1 ? 'item' : 'items'}`
        + (t.canary_deadline ? ` (until ${new Date(t.canary_deadline).toLocaleTimeString()})` : '');
      case 'passed': return head + 'passed: every canary item completed, the redrive went on';
      case 'failed': return head + 'failed: a canary item was retried or died again; the redrive paused (resume to go on, or cancel)';
      case 'timed_out': return head + `timed out: not every canary item completed within ${t.canary_timeout}; the redrive paused (resume to go on, or cancel)`;
      default: return head + 'moving its items';
    }
  }

  // outcomesNode is a task's outcomes (and canary) as a line of the
  // redrives list; null when it has neither.
  function outcomesNode(h, t) {
    const o = outcomesText(t.outcomes), c = canaryText(t);
    if (!o && !c) return null;
    return h('div', { class: 'muted task-outcomes' }, o ? 'Outcomes: ' + o : '', o && c ? ' · ' : '', c ? 'Canary ' + c : '');
  }

  // rateFields are the dialog's rate limit (DEFAULT_RATE) and its "No
  // rate limit" checkbox; value() is the rate_limit to send (0: none).
  function rateFields(h) {
    const rate = h('input', { id: 'redrive-rate', type: 'number', min: '0', max: '1000000', step: '1', value: String(DEFAULT_RATE), inputmode: 'numeric' });
    const none = h('input', { id: 'redrive-no-limit', type: 'checkbox' });
    none.addEventListener('change', () => { rate.disabled = none.checked; });
    return {
      nodes: [h('label', { for: 'redrive-rate' }, `Rate limit (items per second; ${DEFAULT_RATE} by default, 0 for no limit)`), rate,
        h('label', { class: 'inline' }, none, ' No rate limit: move as fast as the server can')],
      value: () => {
        if (none.checked) return 0;
        const v = Math.round(Number(rate.value));
        return Number.isFinite(v) && v >= 0 ? v : DEFAULT_RATE;
      },
    };
  }

  // canaryFields are the dialog's canary: off by default; on, the number
  // of items to move first; value() is the request's fields ({} when off).
  function canaryFields(h) {
    const on = h('input', { id: 'redrive-canary-on', type: 'checkbox' });
    const count = h('input', { id: 'redrive-canary', type: 'number', min: '1', max: '10000', step: '1', value: String(DEFAULT_CANARY), inputmode: 'numeric', disabled: '' });
    on.addEventListener('change', () => { count.disabled = !on.checked; });
    return {
      nodes: [h('label', { class: 'inline' }, on, ' Canary: move a few items first and wait for their outcome (5 minutes at most); go on if they all complete, pause if one fails again'),
        h('label', { for: 'redrive-canary' }, 'Canary items'), count],
      value: () => (on.checked ? { canary: Math.max(1, Math.round(Number(count.value)) || DEFAULT_CANARY) } : {}),
    };
  }

  // destinationsNote says, for each queue the redrive will move items to
  // (at most 5, the largest first), its depth and consumers, from
  // queue.stats: whether anything will take the items. stats(q) resolves
  // a queue.stats answer (or {error}); counts sums its depth (app.js).
  async function destinationsNote(h, queues, stats, counts) {
    const shown = queues.filter((q) => q && q !== '~hidden').slice(0, 5);
    if (shown.length === 0) return null;
    const all = await Promise.all(shown.map(stats));
    const line = (q, s) => {
      if (s.error) return h('li', {}, h('strong', {}, q), ': its depth and consumers are not shown to this key');
      const c = counts(s), consumers = (s.consumers || []).length;
      return h('li', {}, h('strong', {}, q), `: ${fmt(c.ready)} ready, ${fmt(c.leased)} leased, ${fmt(c.scheduled)} scheduled; `,
        consumers === 0 ? h('span', { class: 'warn' }, 'no consumer leased in the last 5 minutes')
          : `${fmt(consumers)} ${consumers === 1 ? 'consumer' : 'consumers'} in the last 5 minutes`);
    };
    return h('div', { id: 'redrive-destinations' }, h('p', {}, 'Destination now:'),
      h('ul', {}, ...shown.map((q, i) => line(q, all[i]))));
  }

  return { DEFAULT_RATE, outcomesText, canaryText, outcomesNode, rateFields, canaryFields, destinationsNote };
})();
