// Times the vendor's desktop SDK's own screenshot call (npm @e2b/desktop:
// Sandbox.screenshot(), `scrot --pointer` through envd and the PNG read
// back) on an existing sandbox, for the Go benchmark beside it
// (vendorkit/emukit/deskbench): configured only through the SDK's
// documented environment (E2B_API_KEY, E2B_API_URL, E2B_SANDBOX_URL,
// E2B_DOMAIN) plus SHOT_SANDBOX_ID. Prints {"ready":true} once connected
// and warmed up, then one {"ms","bytes"} line per "shot" line on stdin;
// exits at the end of stdin. Any failure exits non-zero.
import { Sandbox } from '@e2b/desktop'
import readline from 'node:readline'

const id = process.env.SHOT_SANDBOX_ID
if (!id) throw new Error('SHOT_SANDBOX_ID is not set')
// timeoutMs: the worker's own (E2B_TIMEOUT_SECONDS' default, 10 min), so
// that connecting does not change the sandbox's life; and the published
// spec's connect body requires it.
const desk = await Sandbox.connect(id, { timeoutMs: 600_000 })
// Sandbox.create (which the worker does not use: it creates through the
// API) gives the sandbox DISPLAY=:0 as an env var, so the SDK's commands
// find the display; here the login shell that envd runs each command in
// gets the same from /etc/profile.d (setup, not timed).
await desk.commands.run(`echo 'export DISPLAY=:0' > /etc/profile.d/e2b-desktop-display.sh`, { user: 'root' })

const shot = async () => {
  const t0 = performance.now()
  const png = await desk.screenshot()
  const ms = performance.now() - t0
  if (png.length < 1000 || png[0] !== 0x89 || png[1] !== 0x50) throw new Error(`not a PNG screenshot (${png.length} bytes)`)
  return { ms, bytes: png.length }
}
await shot() // warm-up: the SDK's connections, untimed
console.log(JSON.stringify({ ready: true }))
for await (const line of readline.createInterface({ input: process.stdin })) {
  if (line.trim() !== 'shot') throw new Error(`unknown request ${JSON.stringify(line)}`)
  console.log(JSON.stringify(await shot()))
}
