// A run's replay: its screen recording beside its tool calls and events on
// one timeline. The video's time 0 is the recording's startedAt; an event
// at wall time T sits at T - startedAt. Each tool call is a mark on the
// timeline; a click on a mark or on an event's row seeks the video there.
const base = location.pathname.replace(/[^/]*$/, '');
const params = new URLSearchParams(location.search);
const computer = params.get('computer') || '';
const run = params.get('run') || '';
// window.replay is read by tests (and is handy in a console).
const state = window.replay = { ready: false, marks: [], events: [], duration: 0, error: '' };

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

const fmt = (s) => {
  const m = Math.floor(s / 60);
  return `${m}:${(s - 60 * m).toFixed(1).padStart(4, '0')}`;
};

async function load() {
  const res = await fetch(`${base}api/computers/${encodeURIComponent(computer)}/runs/${encodeURIComponent(run)}/replay`, { cache: 'no-store', credentials: 'same-origin' });
  const data = await res.json();
  if (!res.ok) throw new Error(data?.error?.message || res.statusText);
  return data;
}

function draw(data) {
  const video = document.getElementById('video');
  const rec = data.recording;
  document.getElementById('title').textContent = `run ${data.run.id} · ${data.run.botId} · ${data.run.state}`;
  const t0 = rec ? Date.parse(rec.startedAt) : (data.run.events[0] ? Date.parse(data.run.events[0].at) : 0);
  const end = rec && rec.endedAt && !rec.endedAt.startsWith('0001') ? Date.parse(rec.endedAt) : 0;
  const last = data.run.events.length ? Date.parse(data.run.events[data.run.events.length - 1].at) : t0;
  // The timeline's length: the recording's, else the run's.
  state.duration = Math.max(((end || last) - t0) / 1000, rec && rec.seconds ? rec.seconds : 0, 0.001);
  if (data.video) {
    video.src = base + data.video;
  } else {
    video.hidden = true;
    const p = document.getElementById('novideo');
    p.hidden = false;
    p.textContent = 'This run was not recorded (start a run with record: true to replay it).';
  }
  const seek = (t) => {
    if (!data.video) return;
    video.currentTime = Math.max(0, t);
    state.seeked = t;
  };
  const line = document.getElementById('timeline');
  const list = document.getElementById('events');
  state.events = data.run.events.map((e) => ({ ...e, t: (Date.parse(e.at) - t0) / 1000 }));
  for (const e of state.events) {
    const row = h('li', { class: 'ev', dataset: { kind: e.kind, t: e.t.toFixed(3) }, onclick: () => seek(e.t) },
      h('span', { class: 'at' }, fmt(Math.max(e.t, 0))), ' ', h('span', { class: 'kind' }, e.kind), ' ', e.text);
    list.append(row);
    if (e.kind !== 'tool_call') continue;
    const left = Math.min(Math.max(e.t / state.duration, 0), 1) * 100;
    const mark = h('button', { class: 'mark', title: `${fmt(Math.max(e.t, 0))} ${e.text}`, style: `left:${left}%`,
      dataset: { t: e.t.toFixed(3), tool: e.text }, onclick: () => seek(e.t) });
    line.append(mark);
    state.marks.push({ t: e.t, tool: e.text, left });
  }
  const head = document.getElementById('playhead');
  const clock = document.getElementById('clock');
  const tick = () => {
    head.style.left = `${Math.min(video.currentTime / state.duration, 1) * 100}%`;
    clock.textContent = `${fmt(video.currentTime)} / ${fmt(state.duration)}`;
    for (const row of list.children) row.classList.toggle('past', Number(row.dataset.t) <= video.currentTime);
  };
  video.addEventListener('timeupdate', tick);
  video.addEventListener('seeked', tick);
  tick();
  state.ready = true;
}

load().then(draw).catch((err) => {
  state.error = String(err.message || err);
  document.getElementById('title').textContent = state.error;
});
