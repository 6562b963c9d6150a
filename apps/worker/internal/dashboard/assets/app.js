// The dashboard: polls api/state, draws computers, bots and runs, keeps one
// live view-only noVNC thumbnail per running screen (its websocket is the
// worker's relay, never botd itself), and asks the worker to take or
// release control, showing the worker's answer as is.
import RFB from './novnc/core/rfb.js';

const base = location.pathname.replace(/[^/]*$/, '');
const root = document.getElementById('computers');
// window.dashboard is read by tests (and is handy in a console).
const dash = window.dashboard = { thumbs: {}, messages: {}, polls: 0 };
const thumbs = new Map(); // key -> {el, rfb, retry}
const messages = new Map(); // bot key -> {kind, text, link}

function h(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'dataset') Object.assign(e.dataset, v);
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const kid of kids.flat()) if (kid != null) e.append(kid);
  return e;
}

async function call(method, path) {
  const res = await fetch(base + path, {
    method, cache: 'no-store', credentials: 'same-origin',
    headers: method === 'GET' ? {} : { 'X-Dashboard': '1' },
  });
  let data = null;
  try { data = await res.json(); } catch (e) { /* empty */ }
  return { ok: res.ok, status: res.status, data };
}

const enc = encodeURIComponent;

function fmtSize(n) {
  const u = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1000 && i < u.length - 1) { n /= 1000; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}

function fmtTime(t) { return t ? new Date(t).toLocaleString() : ''; }

// thumb returns the (kept) live thumbnail element of one screen.
function thumb(cid, screen) {
  const key = `${cid}/${screen}`;
  let t = thumbs.get(key);
  if (t) return t.el;
  const el = h('div', { class: 'thumb', dataset: { key } }, h('div', { class: 'placeholder' }, 'connecting…'));
  t = { el, rfb: null, retry: 0, alive: true };
  thumbs.set(key, t);
  dash.thumbs[key] = { connected: false, connects: 0, tries: 0, stalls: 0, disconnects: 0, lastView: 0 };
  connect(cid, screen, t, key);
  return el;
}

async function connect(cid, screen, t, key) {
  if (!t.alive || t.rfb) return;
  const r = await call('POST', `api/computers/${enc(cid)}/screens/${enc(screen)}/view`);
  if (dash.thumbs[key]) { dash.thumbs[key].tries++; dash.thumbs[key].lastView = r.status; }
  if (!r.ok) { t.retry = setTimeout(() => connect(cid, screen, t, key), 3000); return; }
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  const rfb = new RFB(t.el, `${scheme}://${location.host}${r.data.ws}`, { shared: true, wsProtocols: ['binary'] });
  rfb.viewOnly = true;
  rfb.scaleViewport = true;
  // A handshake still pending after 15 s (then 30 s, then 60 s) is dropped
  // and tried again: noVNC has no connect timeout, and a stalled one left
  // the thumbnail "connecting…" for good on a loaded host.
  const stalls = t.stalls || 0;
  const stalled = setTimeout(() => {
    if (t.rfb !== rfb || dash.thumbs[key].connected) return;
    t.stalls = stalls + 1;
    dash.thumbs[key].stalls++;
    t.rfb = null;
    try { rfb.disconnect(); } catch (e) { /* already closing */ }
    if (t.alive) connect(cid, screen, t, key);
  }, 15000 * 2 ** Math.min(stalls, 2));
  rfb.addEventListener('connect', () => {
    clearTimeout(stalled);
    if (t.rfb !== rfb) { rfb.disconnect(); return; }
    const ph = t.el.querySelector('.placeholder'); if (ph) ph.remove();
    dash.thumbs[key].connected = true; dash.thumbs[key].connects++;
  });
  rfb.addEventListener('disconnect', () => {
    clearTimeout(stalled);
    if (t.rfb !== rfb) return; // given up on: a newer connection holds the thumbnail
    dash.thumbs[key].connected = false; dash.thumbs[key].disconnects++;
    t.rfb = null;
    if (t.alive) t.retry = setTimeout(() => connect(cid, screen, t, key), 2000);
  });
  t.rfb = rfb;
}

function dropThumb(key) {
  const t = thumbs.get(key);
  if (!t) return;
  t.alive = false;
  clearTimeout(t.retry);
  if (t.rfb) t.rfb.disconnect();
  thumbs.delete(key);
  delete dash.thumbs[key];
}

function say(key, kind, text, link) {
  messages.set(key, { kind, text, link });
  dash.messages[key] = { kind, text };
  const el = document.querySelector(`.message[data-key="${CSS.escape(key)}"]`);
  if (el) paintMessage(el, key);
}

function paintMessage(el, key) {
  const m = messages.get(key);
  el.replaceChildren();
  if (!m) return;
  el.dataset.kind = m.kind;
  el.append(m.text);
  if (m.link) el.append(' ', h('a', { href: m.link, target: '_blank', rel: 'noopener noreferrer' }, 'open control'));
}

async function take(cid, bot) {
  const key = `${cid}/${bot}`;
  say(key, 'info', 'asking…');
  const r = await call('POST', `api/computers/${enc(cid)}/bots/${enc(bot)}/takeover`);
  if (r.ok) say(key, 'ok', `You have control until ${fmtTime(r.data.expiresAt)}.`, r.data.controlUrl);
  else say(key, 'error', (r.data && r.data.error && r.data.error.message) || `refused (${r.status})`);
}

async function release(cid, bot) {
  const key = `${cid}/${bot}`;
  const r = await call('DELETE', `api/computers/${enc(cid)}/bots/${enc(bot)}/takeover`);
  if (r.ok) say(key, 'ok', 'Released; the bot may continue.');
  else say(key, 'error', (r.data && r.data.error && r.data.error.message) || `refused (${r.status})`);
}

function render(state) {
  const live = new Set();
  const sections = state.computers.map((c) => {
    const cp = c.lastCheckpoint
      ? h('span', { class: 'checkpoint' }, `checkpoint #${c.lastCheckpoint.revision} · ${fmtSize(c.lastCheckpoint.size)} · ${fmtTime(c.lastCheckpoint.at)}`)
      : h('span', { class: 'checkpoint muted' }, 'no checkpoint yet');
    // What the provider can do (GET /v1/computers/{id} description).
    const k = c.capabilities;
    const caps = k
      ? h('div', { class: 'capabilities muted', dataset: { multiScreen: String(k.multiScreen) } },
        [k.multiScreen ? 'a screen per bot' : 'one screen: only one bot has a desktop; the others have shell and files',
          k.stop ? 'can stop' : 'cannot stop',
          k.persistent ? 'home persists' : 'home does not persist'].join(' · '))
      : null;
    const bots = c.bots.map((b) => {
      const key = `${c.id}/${b.id}`;
      let view;
      if (b.screenState === 'running') {
        live.add(`${c.id}/${b.screen}`);
        view = thumb(c.id, b.screen);
      } else {
        view = h('div', { class: 'thumb' }, h('div', { class: 'placeholder' }, `screen ${b.screenState || 'not started'}`));
      }
      const msg = h('div', { class: 'message', dataset: { key } });
      paintMessage(msg, key);
      return h('div', { class: 'bot', dataset: { bot: b.id } },
        h('div', {}, h('strong', {}, b.id), ' ', h('span', { class: 'muted' }, b.inControl ? 'a person has control' : `screen ${b.screen}`)),
        view,
        h('div', { class: 'actions' },
          h('button', { class: 'take', onclick: () => take(c.id, b.id) }, 'Take control'),
          h('button', { class: 'release', onclick: () => release(c.id, b.id) }, 'Release')),
        msg);
    });
    const runs = c.runs.map((r) => h('li', { dataset: { run: r.id } },
      h('strong', {}, r.botId), ' ', h('span', { class: 'state', dataset: { state: r.state } }, r.state), ' ', h('span', { class: 'muted' }, r.id), ' ',
      h('a', { class: 'replay', href: `replay?computer=${encodeURIComponent(c.id)}&run=${encodeURIComponent(r.id)}` }, 'replay'),
      h('div', { class: 'events' }, (r.events || []).slice(-30).map((e) => h('div', {}, `${fmtTime(e.at)} ${e.kind}: ${e.text}`)))));
    return h('section', { class: 'computer', dataset: { computer: c.id } },
      h('h2', {}, c.id, ' ', h('span', { class: 'state', dataset: { state: c.state } }, c.state), ' ',
        h('span', { class: 'muted' }, `${c.kind} · ${c.provider}`)),
      cp,
      caps,
      c.error ? h('p', { class: 'muted' }, c.error) : null,
      h('div', { class: 'bots' }, bots),
      runs.length ? h('ul', { class: 'runs' }, runs) : h('p', { class: 'muted' }, 'no runs'));
  });
  for (const key of [...thumbs.keys()]) if (!live.has(key)) dropThumb(key);
  root.replaceChildren(...(sections.length ? sections : [h('p', { class: 'muted' }, 'No computers yet.')]));
  document.getElementById('updated').textContent = `updated ${new Date().toLocaleTimeString()}`;
}

async function poll() {
  try {
    const r = await call('GET', 'api/state');
    if (r.status === 401) { location.reload(); return; }
    if (r.ok) { render(r.data); dash.polls++; }
  } catch (e) { /* the worker restarts; try again */ }
  setTimeout(poll, 3000);
}
poll();
