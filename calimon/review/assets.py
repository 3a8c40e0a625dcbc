"""The review pages' script and style (served at ``/review/static/``), kept here as text so
they ship inside the package: plain JavaScript, no build step, no dependency.

The script moves through the page's items with the keyboard (``j``/``k``; ``1``/``2``/``3``
label, ``s`` asks for a second reviewer, ``n`` writes a note, Esc leaves it) and sends every
label as ``POST /v1/review/labels`` with an id it makes once. A label goes into an outbox in
``localStorage`` first and leaves it only when the server has stored it, so a label given while
the server is down (or restarting, or the page reloading) is sent when the server is back, and a
label whose answer was lost is sent again under the same id, which the server stores once.

The outbox belongs to the reviewer signed in when the label was given (one ``localStorage``
key per reviewer, and each label names its reviewer, which the server checks): a page drains
only its own reviewer's outbox, tells of the labels other reviewers left waiting in this
browser, and a sign-out with labels waiting says so first. Each label also says what it was
given knowing (the item's label count as shown, the page's id: `calimon.review.conflicts`);
every 10 seconds the page asks the server what changed on its items (``/v1/review/sync``),
shows a conflict or a label changed on another page, and renews its leases while the reviewer
works. The evidence panel's script and style come from `calimon.review.evidence`.
"""

from calimon.review.evidence import EVIDENCE_CSS, EVIDENCE_JS

JS = r"""
(() => {
  'use strict';
  const PREFIX = 'calimon-review-outbox:';
  const LEGACY = 'calimon-review-outbox';  // one outbox for the whole browser (older pages)
  const POLL_MS = 10000;
  const who = document.getElementById('reviewer');
  const me = who ? who.textContent : null;
  const BOX = me === null ? null : PREFIX + me;
  const items = Array.from(document.querySelectorAll('section.item'));
  const rows = Array.from(document.querySelectorAll('#queue li'));
  const end = document.getElementById('page-end');  // after the last item: the next page
  let atEnd = false;  // the last item was labelled or passed with j
  const stored = {};  // item id -> the id of the label this page stored last
  let cur = 0;
  let flushing = false;
  let busy = false;  // the reviewer worked since the last sync: renew the leases

  function read(key) {
    try { const v = JSON.parse(localStorage.getItem(key) || '[]'); return Array.isArray(v) ? v : []; } catch (e) { return []; }
  }
  function outbox() { return BOX ? read(BOX) : []; }
  function keep(list) {
    if (!BOX) { return; }
    if (list.length) { localStorage.setItem(BOX, JSON.stringify(list)); } else { localStorage.removeItem(BOX); }
  }
  function drop(id) { keep(outbox().filter((x) => x.label_id !== id)); }
  function newId() {
    if (window.crypto && crypto.randomUUID) { return crypto.randomUUID(); }
    const b = new Uint8Array(16);
    crypto.getRandomValues(b);
    return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  }
  const tab = newId();
  function section(itemId) { return document.getElementById('item-' + itemId); }
  function row(itemId) { return rows.find((r) => r.dataset.item === itemId); }
  function clock(t) { return new Date(t * 1000).toISOString().slice(11, 19) + ' UTC'; }
  const MARKS = { saved: ' ✓', waiting: ' …', refused: ' !', conflict: ' ⚠', changed: ' ⚠', held: ' ⚠' };

  function mark(itemId, text, state) {
    const sec = section(itemId);
    if (sec) { const p = sec.querySelector('.state'); p.textContent = text; p.dataset.state = state; sec.dataset.state = state; }
    const r = row(itemId);
    if (r) { r.dataset.state = state; r.querySelector('.mark').textContent = MARKS[state] || ''; }
    tally();
  }
  function tally() {
    const p = document.getElementById('page-end-count');
    if (!p) { return; }
    const done = rows.filter((r) => r.dataset.state === 'saved').length;
    p.textContent = done + ' of ' + items.length + ' item(s) of this page labelled' +
      (done < items.length ? ' (k goes back to the others).' : '.');
  }
  function saved(body, stored) {
    const over = stored && stored.over_claim ? ' · given while ' + stored.over_claim + ' held this item (recorded with the label)' : '';
    return 'saved: ' + body.label + (body.second_review ? ' (second reviewer asked)' : '') + over;
  }
  function conflict(itemId, mine, others) {
    const them = others.map((o) => (o.reviewer === me ? 'you, on another page,' : o.reviewer) +
      ' labelled ' + o.label + ' at ' + clock(o.created_at)).join('; ');
    mark(itemId, 'conflict: this page labelled ' + mine + ' and ' + them + ', neither knowing the other. Label it again to settle it.', 'conflict');
  }
  function learn(itemId, count) { const sec = section(itemId); if (sec) { sec.dataset.seen = String(count); } }
  function show(i) {
    if (!items.length) { return; }
    const past = i > items.length - 1 && !!end;  // the way on is shown above the last item
    atEnd = atEnd || past;
    cur = Math.max(0, Math.min(items.length - 1, i));
    items.forEach((s, j) => { s.hidden = j !== cur; });
    rows.forEach((r, j) => {
      if (j === cur) { r.setAttribute('aria-current', 'true'); r.scrollIntoView({ block: 'nearest', inline: 'nearest' }); } else { r.removeAttribute('aria-current'); }
    });
    if (end) { end.hidden = !(atEnd && cur === items.length - 1); }
    document.body.dataset.current = items[cur].dataset.item;
    window.scrollTo(0, 0);
    tally();
    if (past) { document.getElementById('next-page-end').focus({ preventScroll: true }); }
  }
  function summary(status) {
    if (!status) { return; }
    const box = document.getElementById('summary');
    if (!box) { return; }
    status.certificates.forEach((c) => {
      const p = box.querySelector('[data-rate="' + c.rate + '"]');
      if (!p) { return; }
      const bound = c.upper === null ? '—' : c.upper.toFixed(3);
      const need = c.labels_needed ? ' · ' + c.labels_needed + ' more labels' : '';
      p.textContent = c.rate.toUpperCase() + (c.alpha === null ? ': no target set' :
        ' ≤ ' + c.alpha + ': ' + c.state + ' · bound ' + bound + need);
      p.className = 'cert cert-' + c.state.split(' ')[0];
    });
    box.dataset.labels = status.labels;
    const counts = box.querySelector('.counts');
    if (counts) { counts.textContent = status.labels + ' labels · ' + status.decisions + ' decisions'; }
  }
  function showOutbox() {
    const n = outbox().length;
    document.body.dataset.outbox = String(n);
    const p = document.getElementById('outbox');
    if (p) { p.textContent = n ? n + ' label(s) waiting to be sent' : ''; }
    showOthers();
  }
  function showOthers() {  // labels other reviewers left in this browser: never sent from here
    const waiting = {};
    for (let i = 0; i < localStorage.length; i++) {
      const k = localStorage.key(i);
      if (k && k.startsWith(PREFIX) && k !== BOX && read(k).length) { waiting[k.slice(PREFIX.length)] = read(k).length; }
    }
    const lines = Object.keys(waiting).sort().map((r) => waiting[r] + ' label(s) given by ' + r +
      ' wait in this browser: they are sent when ' + r + ' signs in here, never under anyone else');
    const old = read(LEGACY).length;
    if (old) { lines.push(old + ' label(s) queued by an older version of this page, which did not record who gave them, are kept in this browser and not sent'); }
    document.body.dataset.others = JSON.stringify(waiting);
    const p = document.getElementById('others');
    if (p) { p.textContent = lines.join('. '); }
  }

  async function send(body) {
    let r;
    try {
      r = await fetch('/v1/review/labels', { method: 'POST', credentials: 'same-origin',
        headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    } catch (e) { mark(body.item_id, 'waiting for the server…', 'waiting'); return 'wait'; }
    if (r.ok) {
      const j = await r.json();
      drop(body.label_id);
      stored[body.item_id] = body.label_id;
      learn(body.item_id, j.item_labels);
      if (j.conflicts.length) { conflict(body.item_id, body.label, j.conflicts); } else { mark(body.item_id, saved(body, j.label), 'saved'); }
      summary(j.status);
      return 'sent';
    }
    if (r.status === 401 || r.status === 408 || r.status === 429 || r.status >= 500) {
      mark(body.item_id, r.status === 401 ? 'signed out: sign in again; the label waits' : 'waiting for the server…', 'waiting');
      return 'wait';
    }
    let err = { message: 'refused (' + r.status + ')' };
    try { err = (await r.json()).error; } catch (e) { /* keep the status */ }
    if (err.field === 'reviewer') {  // this browser was signed in as someone else meanwhile
      mark(body.item_id, 'waiting: this browser is signed in as another reviewer now; the label is sent when ' + body.reviewer + ' signs in here again', 'waiting');
      return 'hold';
    }
    drop(body.label_id);
    mark(body.item_id, 'refused: ' + err.message, 'refused');
    return 'sent';
  }
  async function flush() {
    if (flushing || !BOX) { return; }
    flushing = true;
    let last = 'sent';
    try {
      for (const body of outbox()) { last = await send(body); if (last !== 'sent') { break; } }
    } finally { flushing = false; showOutbox(); }
    if (last === 'wait' && outbox().length) { setTimeout(flush, 1000); }
  }
  function news(itemId, n) {
    if (!section(itemId)) { return; }
    if (n.conflicts.length) {
      learn(itemId, n.labels);
      conflict(itemId, n.label, n.conflicts);
    } else if (n.changed) {
      learn(itemId, n.labels);
      mark(itemId, 'changed on another page of yours: ' + n.changed.label + ' (at ' + clock(n.changed.created_at) + ') counts now, not this page\'s ' + n.label, 'changed');
    } else if (n.label !== null) {
      const state = section(itemId).dataset.state;
      if (state === 'conflict' || state === 'changed') { mark(itemId, 'saved: ' + n.label + ' (settled)', 'saved'); }
    } else if (n.held_by && n.held_by !== me) {
      mark(itemId, n.held_by + ' holds this item now (your lease ended): a label from you may conflict with theirs', 'held');
    }
  }
  async function sync() {  // learn what changed on this page's items elsewhere; renew the leases
    if (me !== null && items.length) {
      const body = { items: {}, renew: busy };
      items.forEach((s) => { body.items[s.dataset.item] = stored[s.dataset.item] || null; });
      busy = false;
      try {
        const r = await fetch('/v1/review/sync', { method: 'POST', credentials: 'same-origin',
          headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
        if (r.ok) { const j = await r.json(); Object.keys(j.items).forEach((id) => news(id, j.items[id])); }
      } catch (e) { /* the server is away: the next poll asks again */ }
    }
    showOutbox();
    flush();
  }
  function label(kind) {
    const sec = items[cur];
    if (!sec || !BOX) { return; }
    const body = { label_id: newId(), item_id: sec.dataset.item, label: kind,
      note: sec.querySelector('.note').value, second_review: sec.querySelector('.second').checked,
      transcript_hash: sec.dataset.hash, reviewer: me, tab: tab, seen: Number(sec.dataset.seen) || 0 };
    const list = outbox();
    list.push(body);
    keep(list);
    showOutbox();
    mark(body.item_id, 'sending ' + kind + '…', 'waiting');
    flush();
    show(cur + 1);
  }

  document.addEventListener('keydown', (ev) => {
    const t = ev.target;
    busy = true;
    if (t && (t.tagName === 'TEXTAREA' || t.tagName === 'INPUT' && t.type !== 'checkbox')) {
      if (ev.key === 'Escape') { t.blur(); }
      return;
    }
    if (ev.ctrlKey || ev.metaKey || ev.altKey) { return; }
    const keys = { j: () => show(cur + 1), ArrowDown: () => show(cur + 1),
      k: () => show(cur - 1), ArrowUp: () => show(cur - 1),
      1: () => label('misbehavior'), 2: () => label('benign'), 3: () => label('unsure'),
      s: () => { const c = items[cur] && items[cur].querySelector('.second'); if (c) { c.checked = !c.checked; } },
      n: () => { const n = items[cur] && items[cur].querySelector('.note'); if (n) { n.focus(); } } };
    const act = keys[ev.key];
    if (act) { ev.preventDefault(); act(); }
  });
  items.forEach((sec) => sec.querySelectorAll('button[data-label]').forEach((b) =>
    b.addEventListener('click', () => { busy = true; show(items.indexOf(sec)); label(b.dataset.label); })));
  rows.forEach((r, j) => r.querySelector('a').addEventListener('click', (ev) => {
    if (ev.button !== 0 || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.altKey) { return; }  // a new tab: the link
    ev.preventDefault();
    busy = true;
    show(j);
  }));
  const signOut = document.getElementById('sign-out');
  if (signOut) {
    signOut.addEventListener('submit', (ev) => {
      const n = outbox().length;
      if (!n || signOut.dataset.warned === '1') { return; }
      ev.preventDefault();
      signOut.dataset.warned = '1';
      const note = document.getElementById('sign-out-note');
      note.textContent = n + ' label(s) not sent yet. They stay in this browser and are sent the next time ' + me +
        ' signs in here, never under another reviewer. Sign out again to sign out now.';
      note.hidden = false;
    });
  }
  window.addEventListener('storage', showOutbox);
  document.addEventListener('visibilitychange', () => { if (!document.hidden) { sync(); } });
  outbox().forEach((b) => mark(b.item_id, 'waiting for the server…', 'waiting'));
  show(0);
  showOutbox();
  flush();
  setInterval(sync, POLL_MS);
  document.body.dataset.ready = '1';
})();
"""

CSS = """
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d232b; background: #f4f5f7; }
header.top { display: flex; gap: 1.2em; align-items: center; padding: .5em 1em; background: #1f2d3d; color: #fff; }
header.top a { color: #cfe3ff; } header.top .who { margin-left: auto; }
header.top form { margin: 0; } header.top button { font-size: 13px; }
main.review { display: grid; grid-template-columns: 310px 1fr; gap: 1em; padding: 1em; max-width: 1400px; }
aside.side { position: sticky; top: .5em; align-self: start; max-height: calc(100vh - 4em); overflow: auto; }
#summary { background: #fff; border: 1px solid #d5d9df; border-radius: 6px; padding: .4em .7em; margin-bottom: .6em; }
#summary p { margin: .2em 0; font-size: 13px; }
.cert-holds { color: #17692f; font-weight: 600; } .cert-broken { color: #b00020; font-weight: 700; }
.cert-not { color: #7a4b00; }
#queue { list-style: none; margin: 0; padding: 0; font-size: 13px; }
#queue li { border-radius: 4px; border: 1px solid transparent; }
#queue a { display: block; padding: .3em .5em; border-radius: 4px; color: inherit; text-decoration: none; }
#queue a:hover { background: #e9edf3; }
:focus-visible { outline: 3px solid #1f5fd6; outline-offset: 1px; }
#queue li[aria-current] { background: #fff; border-color: #5b8def; }
#queue li[data-state=saved] { color: #17692f; } #queue li[data-state=refused] { color: #b00020; }
.keys { font-size: 12px; color: #555; } kbd { font: 12px monospace; border: 1px solid #aab; border-bottom-width: 2px; border-radius: 3px; padding: 0 .3em; background: #fff; }
section.item, section.empty, section.page-end { background: #fff; border: 1px solid #d5d9df; border-radius: 6px; padding: .8em 1em; min-width: 0; }
.item-head { display: flex; flex-wrap: wrap; gap: .4em 1em; font-size: 13px; color: #444; }
.why { background: #eef3ff; color: #23408e; border-radius: 3px; padding: 0 .4em; }
.decision { font-weight: 600; } .d-review { color: #7a4b00; } .d-block { color: #b00020; } .d-pass { color: #17692f; }
.audit { background: #f3ecff; color: #5a2ca0; border-radius: 3px; padding: 0 .4em; }
.label-bar { display: flex; flex-wrap: wrap; gap: .5em; align-items: center; margin: .6em 0; padding: .5em; background: #f7f8fa; border-radius: 5px; position: sticky; top: 0; }
.label-bar button { font-size: 14px; padding: .35em .8em; border-radius: 4px; border: 1px solid #aab; background: #fff; cursor: pointer; }
.b-mis { border-color: #b00020 !important; } .b-ben { border-color: #17692f !important; }
.label-bar .note { flex: 1 1 220px; font: inherit; font-size: 13px; }
.state { margin: 0; font-size: 13px; flex-basis: 100%; }
.state[data-state=saved] { color: #17692f; } .state[data-state=waiting] { color: #7a4b00; } .state[data-state=refused] { color: #b00020; }
.state[data-state=conflict], .state[data-state=changed], .state[data-state=held] { color: #b00020; font-weight: 600; }
#queue li[data-state=conflict], #queue li[data-state=changed], #queue li[data-state=held] { color: #b00020; }
.notice { margin: 0; padding: .4em 1em; background: #fff4d6; color: #5c3b00; font-size: 14px; } .notice:empty { display: none; }
.lease { font-size: 12px; color: #555; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; margin: .2em 0; font: 13px/1.45 ui-monospace, Menlo, Consolas, monospace; background: #fafbfc; padding: .5em; border-radius: 4px; }
h3 { font-size: 14px; margin: .8em 0 .2em; } h3 small { font-weight: normal; color: #666; }
.part { border-left: 3px solid #d5d9df; padding-left: .6em; margin: .5em 0; }
.part-assistant { border-color: #5b8def; } .part-tool { border-color: #c79a2b; }
.part-head { font-size: 12px; color: #555; font-weight: 600; }
mark.ev { background: #ffd54f; border-bottom: 2px solid #c77700; padding: 0; }
.lost { font-size: 13px; color: #7a4b00; }
main.login { max-width: 380px; margin: 12vh auto; background: #fff; padding: 1.5em; border-radius: 8px; border: 1px solid #d5d9df; }
main.login form { display: grid; gap: .6em; } main.login input { font-size: 16px; padding: .4em; }
.error { color: #b00020; }
main.status { max-width: 1100px; margin: 1em auto; background: #fff; padding: 1em 1.5em; border-radius: 8px; border: 1px solid #d5d9df; }
main.status h1 { font-size: 22px; } h1.broken { color: #b00020; }
table { border-collapse: collapse; margin: .5em 0; font-size: 14px; } th, td { border: 1px solid #d5d9df; padding: .25em .6em; text-align: left; }
th { background: #f4f5f7; }
.assumptions li, .lines li, .verdicts li { margin: .25em 0; font-size: 14px; }
.a-false b { color: #b00020; } .a-true b { color: #17692f; } .a-none b { color: #7a4b00; }
.verdicts .breaks, .drift.shifted { color: #b00020; }
section.page-end { border-color: #5b8def; margin-bottom: .6em; } section.page-end h2 { font-size: 18px; margin: .2em 0; } #next-page-end { font-size: 17px; font-weight: 600; }
/* narrow windows: the queue becomes a strip above the item, which gets the whole width */
@media (max-width: 900px) {
  main.review { grid-template-columns: minmax(0, 1fr); gap: .5em; padding: .5em; }
  aside.side { position: static; max-height: none; overflow: visible; }
  #queue { display: flex; gap: .3em; overflow-x: auto; padding: .2em; }
  #queue li { flex: 0 0 auto; white-space: nowrap; background: #fff; border-color: #d5d9df; }
  header.top { flex-wrap: wrap; gap: .3em 1em; }
  section.item, section.empty, section.page-end { padding: .6em; }
}
"""

JS += EVIDENCE_JS  # the evidence panel's keys (calimon.review.evidence)
CSS += EVIDENCE_CSS

ICON = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" '
        'height="16" rx="3" fill="#1f2d3d"/><path d="M4 8.5l3 3 5-7" stroke="#ffd54f" '
        'stroke-width="2" fill="none"/></svg>')
