// Drives the Daytona emulator with the vendor's own TypeScript SDK
// (@daytonaio/sdk, pinned by package-lock.json), configured only through
// its documented variables (DAYTONA_API_KEY, DAYTONA_API_URL,
// DAYTONA_TARGET). Every call must succeed: a failure is an emulator bug.
import { Daytona } from '@daytonaio/sdk'

const fail = (msg) => { console.error('FAIL: ' + msg); process.exit(1) }
const step = (msg) => console.log('step: ' + msg)

const daytona = new Daytona()
step('create from snapshot ' + process.env.SDK_SNAPSHOT)
const sb = await daytona.create({ snapshot: process.env.SDK_SNAPSHOT, labels: { 'open-bot-sdk': 'yes' }, autoStopInterval: 30 }, { timeout: 180 })
if (sb.state !== 'started') fail('created sandbox is ' + sb.state)

step('list by label')
let found = false
for await (const s of daytona.list({ labels: { 'open-bot-sdk': 'yes' } })) { if (s.id === sb.id) found = true }
if (!found) fail('the sandbox is not listed by its label')

step('execute a command')
const r = await sb.process.executeCommand('echo hello from daytona')
if (r.exitCode !== 0 || r.result.trim() !== 'hello from daytona') fail('execute: ' + JSON.stringify(r))
const bad = await sb.process.executeCommand('sh -c "echo oops >&2; exit 3"')
if (bad.exitCode !== 3 || bad.result.trim() !== 'oops') fail('execute (exit 3): ' + JSON.stringify(bad))

step('upload and download a file')
const payload = Buffer.from('bytes through the toolbox\n' + 'x'.repeat(5000))
await sb.fs.uploadFile(payload, '/tmp/sdk/note.txt')
const got = await sb.fs.downloadFile('/tmp/sdk/note.txt')
if (!Buffer.from(got).equals(payload)) fail('downloaded file differs (' + got.length + ' bytes)')
const cat = await sb.process.executeCommand('wc -c /tmp/sdk/note.txt')
if (!cat.result.startsWith(String(payload.length))) fail('the shell sees ' + cat.result)

step('computer use: start, status, display, screenshot, click')
const started = await sb.computerUse.start()
if (!started.status || !started.status.xvfb || !started.status.xvfb.running) fail('computer use did not start: ' + JSON.stringify(started))
const cuStatus = await sb.computerUse.getStatus()
if (cuStatus.status !== 'active') fail('computer use status: ' + JSON.stringify(cuStatus))
const info = await sb.computerUse.display.getInfo()
if (!info.displays || info.displays.length < 1 || !(info.displays[0].width > 0)) fail('display info: ' + JSON.stringify(info))
const shot = await sb.computerUse.screenshot.takeFullScreen(true)
const png = Buffer.from(shot.screenshot, 'base64')
if (png.subarray(1, 4).toString() !== 'PNG') fail('the screenshot is not a PNG')
await sb.computerUse.mouse.click(40, 30)
const pos = await sb.computerUse.mouse.getPosition()
if (pos.x !== 40 || pos.y !== 30) fail('the pointer is at ' + JSON.stringify(pos) + ' after a click at 40,30')

step('computer use: compressed screenshot, drag, scroll, key, hotkey, type')
const jshot = await sb.computerUse.screenshot.takeCompressed({ format: 'jpeg', quality: 60, showCursor: true })
const jpg = Buffer.from(jshot.screenshot, 'base64')
if (jpg[0] !== 0xff || jpg[1] !== 0xd8) fail('the compressed screenshot is not a JPEG')
const dragged = await sb.computerUse.mouse.drag(50, 60, 70, 80)
if (dragged.x !== 70 || dragged.y !== 80) fail('drag answered ' + JSON.stringify(dragged))
const pos2 = await sb.computerUse.mouse.getPosition()
if (pos2.x !== 70 || pos2.y !== 80) fail('the pointer is at ' + JSON.stringify(pos2) + ' after a drag to 70,80')
const scrolled = await sb.computerUse.mouse.scroll(100, 100, 'down', 2)
if (scrolled !== true && !(scrolled && scrolled.success)) fail('scroll answered ' + JSON.stringify(scrolled))
await sb.computerUse.keyboard.press('enter')
await sb.computerUse.keyboard.press('a', ['shift'])
await sb.computerUse.keyboard.hotkey('ctrl+c')
await sb.computerUse.keyboard.type('hi')

step('sessions: exec, async exec with input and logs, delete')
await sb.process.createSession('sdk-session')
const sx = await sb.process.executeSessionCommand('sdk-session', { command: 'echo out; echo err >&2; exit 4' })
if (sx.exitCode !== 4 || sx.stdout.trim() !== 'out' || sx.stderr.trim() !== 'err') fail('session exec: ' + JSON.stringify(sx))
const ax = await sb.process.executeSessionCommand('sdk-session', { command: 'read line; echo "got $line"', runAsync: true })
if (!ax.cmdId) fail('async exec names no command: ' + JSON.stringify(ax))
await sb.process.sendSessionCommandInput('sdk-session', ax.cmdId, 'hello\n')
let cmd
for (let i = 0; i < 100; i++) {
  cmd = await sb.process.getSessionCommand('sdk-session', ax.cmdId)
  if (cmd.exitCode !== undefined && cmd.exitCode !== null) break
  await new Promise((r) => setTimeout(r, 100))
}
if (cmd.exitCode !== 0) fail('the async command: ' + JSON.stringify(cmd))
const logs = await sb.process.getSessionCommandLogs('sdk-session', ax.cmdId)
if (logs.stdout.trim() !== 'got hello') fail('session logs: ' + JSON.stringify(logs))
await sb.process.deleteSession('sdk-session')

step('preview URL')
await sb.process.executeCommand('sh -c "mkdir -p /tmp/www && echo preview-ok > /tmp/www/index.html && cd /tmp/www && nohup python3 -m http.server 8080 >/dev/null 2>&1 &"')
const link = await sb.getPreviewLink(8080)
let body = ''
for (let i = 0; i < 50; i++) {
  const res = await fetch(link.url + '/index.html', { headers: { 'x-daytona-preview-token': link.token } })
  body = await res.text()
  if (res.status === 200) break
  await new Promise((r) => setTimeout(r, 200))
}
if (body.trim() !== 'preview-ok') fail('preview answered ' + body)
const denied = await fetch(link.url + '/index.html')
if (denied.status !== 401) fail('a preview without its token answered ' + denied.status)

step('stop, start')
await sb.stop(180)
if (sb.state !== 'stopped') fail('stopped sandbox is ' + sb.state)
await sb.start(180)
if (sb.state !== 'started') fail('started sandbox is ' + sb.state)
const back = await sb.process.executeCommand('echo back')
if (back.exitCode !== 0 || back.result.trim() !== 'back') fail('execute after start: ' + JSON.stringify(back))

step('delete')
await sb.delete()
const gone = await daytona.get(sb.id).then(() => null, (e) => e)
if (!gone || gone.statusCode !== 404) fail('a deleted sandbox is still there: ' + (gone && gone.message))
console.log('SDK OK')
