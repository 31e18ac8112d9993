// Styx UI. Plain JavaScript, no dependencies, no build step. Loaded last:
// core.js holds api(), the dialogs and h(); each page file adds its page to
// window.styx; this file routes a path to its page, redraws it (live
// updates) and starts the UI.
//
// Pages are rendered from the path (see route); links are ordinary links,
// so every page can be bookmarked, shared and opened in a new tab.
'use strict';

(() => {
  const S = window.styx;
  const { main, nextPage, live, busy, askKey, h, show, errorBox } = S;
  const { overview, queuePage, deadPage, itemsPage, itemPage, liveItemPage, redrivesPage, redrivePage } = S;

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

  // ---------------------------------------------------------------- live updates

  // Every page redraws itself every LIVE_MS (FAST_MS while it shows a
  // running redrive: live.fast), from fresh calls, keeping the focus. A
  // redraw waits while a dialog is open or an action is in progress (its
  // dry run: see action), the tab is hidden, the keyboard is in one of the
  // page's form fields, or the user paused live updates (the header's
  // button; kept for the tab).
  const LIVE_MS = 2000, FAST_MS = 1000;
  const LIVE_STORAGE = 'styx.live';
  let liveTimer = null;
  const liveButton = document.getElementById('live-button');
  const livePaused = () => sessionStorage.getItem(LIVE_STORAGE) === 'paused';

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
      if (my !== S.page) return;
      const a = document.activeElement;
      const typing = a && main.contains(a) && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName) && a.type !== 'checkbox';
      if (livePaused() || busy() || document.querySelector('dialog[open]') || document.hidden || typing) { scheduleLive(my); return; }
      render(true);
    }, live.fast ? FAST_MS : Math.max(LIVE_MS, live.slow));
  }

  liveButton.addEventListener('click', () => {
    sessionStorage.setItem(LIVE_STORAGE, livePaused() ? 'on' : 'paused');
    showLive();
  });
  showLive();

  // render draws the page of the current URL. refresh keeps the focus
  // where it is (a live update); a navigation moves it to the page.
  async function render(refresh = false) {
    const my = nextPage();
    live.fast = false;
    live.slow = 0;
    const [fn, ...args] = route(location.pathname);
    // A live update redraws the page: keep the keyboard focus on the same
    // control (found again by its label or id).
    const active = document.activeElement;
    const focusKey = refresh && active && main.contains(active) ? (active.tagName === 'H1' ? 'h1' : active.getAttribute('aria-label') || active.id) : '';
    try {
      await fn(my, ...args);
      if (my === S.page && refresh) showLive();
    } catch (e) {
      // A live update that fails keeps the page as it was and says so.
      if (my === S.page && refresh && e.status !== 401) showLive('Last update failed: ' + e.message);
      else if (my === S.page) show(h('h1', {}, 'Error'), errorBox(e));
    }
    if (my === S.page && !refresh) {
      const h1 = main.querySelector('h1');
      if (h1) { h1.tabIndex = -1; h1.focus({ preventScroll: true }); }
    }
    if (my === S.page && focusKey) {
      const again = focusKey === 'h1' ? main.querySelector('h1')
        : [...main.querySelectorAll('[aria-label], [id]')].find((el) => (el.getAttribute('aria-label') || el.id) === focusKey);
      if (again) {
        if (focusKey === 'h1') again.tabIndex = -1;
        again.focus({ preventScroll: true });
      }
    }
    if (my === S.page) {
      main.dataset.ready = String(my);
      scheduleLive(my);
    }
  }

  function navigate(url) {
    history.pushState(null, '', url);
    render();
  }

  // The page files call these back (a redraw after an action, a new page).
  Object.assign(S, { render, navigate });

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
