// Drives an E2B API with the vendor's desktop SDK (npm @e2b/desktop),
// configured only through its documented environment (E2B_API_KEY,
// E2B_API_URL, E2B_SANDBOX_URL, E2B_DOMAIN). sdk_test.go runs it against the
// emulator's `desktop` template. Every step that fails is a bug of the API
// (or the template) under test: exit non-zero.
import { Sandbox } from '@e2b/desktop'
import assert from 'node:assert/strict'

const step = (msg) => console.log(`step: ${msg}`)
const until = async (what, fn, ms = 60_000) => {
  const end = Date.now() + ms
  for (;;) {
    const v = await fn().catch(() => undefined)
    if (v) return v
    if (Date.now() > end) throw new Error(`timed out: ${what}`)
    await new Promise((r) => setTimeout(r, 250))
  }
}

step('create the desktop (Xvfb :0 and XFCE through commands)')
const desk = await Sandbox.create({ timeoutMs: 300_000, metadata: { suite: `desktop-${process.pid}` } })
try {
  step('screen size and a screenshot with the pointer')
  const size = await desk.getScreenSize()
  assert.deepEqual(size, { width: 1024, height: 768 })
  const png = await desk.screenshot()
  assert.ok(png.length > 1000, `a screenshot of ${png.length} bytes`)
  assert.deepEqual([...png.slice(0, 4)], [0x89, 0x50, 0x4e, 0x47], 'a PNG')

  step('move and click the mouse')
  await desk.moveMouse(100, 200)
  assert.deepEqual(await desk.getCursorPosition(), { x: 100, y: 200 })
  await desk.leftClick(300, 300)
  assert.deepEqual(await desk.getCursorPosition(), { x: 300, y: 300 })

  step('type into a window')
  const term = await desk.commands.run(
    `xfce4-terminal --disable-server --title=sdktest -x bash -c 'read -r line; printf "%s" "$line" > /tmp/typed.txt'`,
    { background: true, timeoutMs: 0 },
  )
  const wid = await until('the terminal window', async () => {
    const r = await desk.commands.run('xdotool search --onlyvisible --name sdktest')
    return r.stdout.trim().split('\n')[0]
  })
  await desk.commands.run(`xdotool windowactivate --sync ${wid}`)
  await desk.write('hello desktop')
  await desk.press('enter')
  const typed = await until('the typed line', async () => (await desk.files.exists('/tmp/typed.txt')) && desk.files.read('/tmp/typed.txt'))
  assert.equal(typed, 'hello desktop')
  await term.kill().catch(() => {})

  step('the live view: stream URL and noVNC through port routing')
  await desk.stream.start()
  const url = new URL(desk.stream.getUrl())
  assert.equal(url.host, `6080-${desk.sandboxId}.${process.env.E2B_DOMAIN}`)
  assert.equal(url.pathname, '/vnc.html')
  const res = await fetch(`${process.env.E2B_SANDBOX_URL}/vnc.html`, {
    headers: { 'E2b-Sandbox-Id': desk.sandboxId, 'E2b-Sandbox-Port': '6080' },
  })
  assert.equal(res.status, 200)
  assert.match(await res.text(), /noVNC/)
} finally {
  step('kill')
  await desk.kill()
}
console.log('DESKTOP SDK OK')
