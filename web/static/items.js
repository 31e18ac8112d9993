// Styx UI: the item pages: the items browser (/ui/queues/{name}/items, a
// partition at a time, read-only), one live item (…/items/{id}), one
// dead item (…/dead/{id}) and its edit dialog, and the payload and
// attribute views they share.
'use strict';

(() => {
  const S = window.styx;
  const { PAGE_SIZE, HIDDEN_QUEUE, HIDDEN_TEXT, api, BUSY_NOTE, action, h, table, show, toast, num, fmt, enc,
    iid, plural, ago, when, soft, notShown, noError, counts, redriveFlow, deleteFlow } = S;

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
    if (my !== S.page) return;
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
    if (my !== S.page) return;
    if (res.error) {
      show(crumbs, h('h1', {}, 'Dead item ' + id), notShown('The item', res.error, true));
      return;
    }
    const it = (res.items || [])[0];
    S.live.slow = 5000 + Math.min(55000, (it && it.payload ? it.payload.length : 0) / 20); // 5 s, a minute for a 1 MB payload
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
          : h('button', { type: 'button', id: 'edit-button', onclick: action(async () => { if (await editFlow(name, it)) S.render(true); }) }, 'Edit…'),
        h('button', { type: 'button', class: 'danger', onclick: action(async () => { if (await deleteFlow(name, filter, 1)) S.navigate(base); }) }, 'Delete this item…')),
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
      if (my !== S.page) return;
      show(crumbs, h('h1', {}, 'Item ' + id), notShown('The item', e, true));
      return;
    }
    if (my !== S.page) return;
    if (!found) {
      show(crumbs, h('h1', {}, 'Item ' + id), h('p', { id: 'item-gone' }, `No item ${id} in ${name}: it was completed, retried under a new id, dead-lettered or deleted.`));
      return;
    }
    const { it, scheduled, partition } = found;
    S.live.slow = 5000 + Math.min(55000, (it.payload ? it.payload.length : 0) / 20);
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

  Object.assign(S, { itemsPage, itemPage, liveItemPage });
})();
