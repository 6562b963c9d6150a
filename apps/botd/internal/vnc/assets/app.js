// The viewer page: noVNC's RFB client (served by botd from Debian's novnc
// package) on /screens/{id}/vnc, and a bar that says whose screen this is,
// whether we watch or have control, and take/release buttons on a control
// link. The link token stays in this page: it is sent only to botd, in a
// header for the JSON routes and in the websocket URL (browsers cannot set
// headers there).
import RFB from './novnc/core/rfb.js';

const body = document.body;
const screenID = body.dataset.screen;
const mode = body.dataset.mode;
const token = new URLSearchParams(location.search).get('token') || '';
const el = (id) => document.getElementById(id);
const statusEl = el('status');
const messageEl = el('message');
const takeBtn = el('take');
const releaseBtn = el('release');

// window.viewer is read by tests (and is handy in a console).
const viewer = window.viewer = { connected: false, inControl: false, running: false, connects: 0, expired: false };
let rfb = null;
// How long a connection may stay in its handshake before it is dropped and
// tried again: 15 s, then 30 s, then 60 s for every later try, so that a
// handshake that is only slow (a loaded host) still gets through.
const CONNECT_TIMEOUT_MS = 15000;
let lastRenew = 0;

function setStatus(kind, text) {
  statusEl.dataset.status = kind;
  statusEl.textContent = text;
}

function say(text) { messageEl.textContent = text || ''; }

async function api(method, suffix) {
  const res = await fetch(`/screens/${encodeURIComponent(screenID)}/${suffix}`, {
    method, headers: { 'X-Viewer-Token': token }, cache: 'no-store', referrerPolicy: 'no-referrer',
  });
  let data = null;
  try { data = await res.json(); } catch (e) { /* empty body */ }
  return { ok: res.ok, status: res.status, data };
}

function connect() {
  if (rfb) return;
  const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
  const url = `${scheme}://${location.host}/screens/${encodeURIComponent(screenID)}/vnc?mode=${mode}&token=${encodeURIComponent(token)}`;
  const r = new RFB(el('screen'), url, { shared: true, wsProtocols: ['binary'] });
  r.scaleViewport = true;
  r.viewOnly = !viewer.inControl;
  // A handshake that neither connects nor fails (seen on a loaded host:
  // the page said "connecting…" for a minute) is dropped and tried again;
  // noVNC itself has no connect timeout.
  const stalled = setTimeout(() => {
    if (rfb !== r || viewer.connected) return;
    viewer.stalls = (viewer.stalls || 0) + 1;
    rfb = null;
    try { r.disconnect(); } catch (e) { /* already closing */ }
    refresh();
  }, CONNECT_TIMEOUT_MS * 2 ** Math.min(viewer.stalls || 0, 2));
  r.addEventListener('connect', () => {
    clearTimeout(stalled);
    if (rfb !== r) { r.disconnect(); return; }
    viewer.connectedAt = performance.now(); viewer.connected = true; viewer.connects++; render();
  });
  r.addEventListener('disconnect', () => {
    clearTimeout(stalled);
    if (rfb !== r) return; // one given up on: a newer connection holds the page
    viewer.connected = false;
    rfb = null;
    render();
    setTimeout(refresh, 500);
  });
  rfb = r;
}

function render() {
  if (viewer.expired) {
    setStatus('expired', 'link expired');
  } else if (!viewer.running) {
    setStatus('stopped', 'screen stopped');
  } else if (!viewer.connected) {
    setStatus('connecting', 'connecting…');
  } else if (viewer.inControl) {
    setStatus('control', 'in control');
  } else {
    setStatus('watching', 'watching');
  }
  if (rfb) rfb.viewOnly = !viewer.inControl;
  if (takeBtn) {
    takeBtn.hidden = viewer.expired || viewer.inControl;
    releaseBtn.hidden = viewer.expired || !viewer.inControl;
  }
}

async function refresh() {
  if (viewer.expired) return;
  let st;
  try { st = await api('GET', 'viewer-state'); } catch (e) { return; }
  if (st.status === 401) {
    viewer.expired = true;
    say('Ask for a new link to keep watching.');
    render();
    return;
  }
  if (!st.ok) return;
  const s = st.data;
  viewer.running = s.running;
  viewer.inControl = s.inControl;
  viewer.lease = s.lease;
  if (s.running) {
    connect();
  } else if (rfb) {
    rfb.disconnect();
  }
  if (!s.running) say('Nobody sees this screen until it starts again; watching never starts it.');
  else if (mode === 'control' && !s.inControl && s.lease && s.lease.kind === 'user') say(`${s.lease.holder} has control`);
  else if (mode === 'control' && !s.inControl && s.lease && s.lease.kind === 'agent') say('the agent is working');
  else if (messageEl.dataset.sticky !== '1') say('');
  // While we have control, keep the user lease alive even when idle.
  if (s.inControl && Date.now() - lastRenew > 30000) {
    lastRenew = Date.now();
    api('POST', 'viewer-lease');
  }
  render();
}

if (takeBtn) {
  takeBtn.addEventListener('click', async () => {
    const res = await api('POST', 'viewer-lease');
    messageEl.dataset.sticky = res.ok ? '' : '1';
    say(res.ok ? '' : (res.data && res.data.error ? res.data.error.message : 'could not take control'));
    lastRenew = Date.now();
    await refresh();
    if (rfb) rfb.focus();
  });
  releaseBtn.addEventListener('click', async () => {
    await api('DELETE', 'viewer-lease');
    await refresh();
  });
}

// Connect at once (the common case is a running screen); the state tells
// the rest, and a refused connection only leads back to refresh.
viewer.running = true;
connect();
render();
refresh();
setInterval(refresh, 2000);
