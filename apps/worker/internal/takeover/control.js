// The control page: noVNC connected to this link's own relay (same path,
// websocket), with input enabled. The link in the address bar is the
// credential; nothing else is sent.
import RFB from '/control/novnc/core/rfb.js';

const status = document.getElementById('status');
const url = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + location.pathname;
const rfb = new RFB(document.getElementById('screen'), url, { wsProtocols: ['binary'] });
rfb.viewOnly = false;
rfb.scaleViewport = true;
rfb.addEventListener('connect', () => { status.textContent = 'connected'; });
rfb.addEventListener('disconnect', () => { status.textContent = 'disconnected (released or expired)'; });
