// The control page: noVNC connected to this link's own relay (same path,
// websocket), with input enabled. The link in the address bar is the
// credential; nothing else is sent.
//
// A connection that fails before it is up (the relay answered 502: the
// screen's VNC server not listening yet, the machine briefly unreachable)
// is tried again while the link itself is still good (a plain GET of it
// answers 200; released or expired answers 410, invalid 401). A connection
// the relay ends (release, expiry) is not.
import RFB from '/control/novnc/core/rfb.js';

const status = document.getElementById('status');
const url = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + location.pathname;
const retryLimit = 20;
let tries = 0;
// window.control is read by tests (what happened, when a page stays
// "connecting…"), and is handy in a console.
const trace = window.control = { tries: 0, events: [] };
function note(what) { trace.events.push(`${Math.round(performance.now())}ms ${what}`); }

async function linkStillGood() {
  try {
    const r = await fetch(location.pathname, { cache: 'no-store', credentials: 'omit' });
    return r.status === 200;
  } catch (e) {
    return false;
  }
}

function connect() {
  tries++;
  trace.tries++;
  note('connect');
  const rfb = new RFB(document.getElementById('screen'), url, { wsProtocols: ['binary'] });
  rfb.viewOnly = false;
  rfb.scaleViewport = true;
  let up = false;
  rfb.addEventListener('connect', () => { note('connected'); up = true; tries = 0; status.textContent = 'connected'; });
  rfb.addEventListener('securityfailure', (e) => note(`security failure ${e.detail && e.detail.reason}`));
  rfb.addEventListener('disconnect', async (e) => {
    note(`disconnect clean=${!!(e.detail && e.detail.clean)}`);
    if (!up && !(e.detail && e.detail.clean) && tries < retryLimit && await linkStillGood()) {
      status.textContent = 'reconnecting…';
      setTimeout(connect, Math.min(500 * tries, 3000));
      return;
    }
    status.textContent = 'disconnected (released or expired)';
  });
}
connect();
