// Times the vendor's SDK's own screenshot call (npm @daytonaio/sdk:
// sandbox.computerUse.screenshot.takeCompressed(), as a JPEG of quality 72
// with the pointer: what an observation is) on an existing sandbox, for
// the Go benchmark beside it (vendorkit/emukit/deskbench): configured only
// through the SDK's documented environment (DAYTONA_API_KEY,
// DAYTONA_API_URL, DAYTONA_TARGET) plus SHOT_SANDBOX_ID. Prints
// {"ready":true} once connected and warmed up, then one {"ms","bytes"}
// line per "shot" line on stdin; exits at the end of stdin. Any failure
// exits non-zero.
import { Daytona } from '@daytonaio/sdk'
import readline from 'node:readline'

const id = process.env.SHOT_SANDBOX_ID
if (!id) throw new Error('SHOT_SANDBOX_ID is not set')
const sb = await new Daytona().get(id)

const shot = async () => {
  const t0 = performance.now()
  const r = await sb.computerUse.screenshot.takeCompressed({ format: 'jpeg', quality: 72, showCursor: true })
  const ms = performance.now() - t0
  const jpg = Buffer.from(r.screenshot, 'base64')
  if (jpg.length < 1000 || jpg[0] !== 0xff || jpg[1] !== 0xd8) throw new Error(`not a JPEG screenshot (${jpg.length} bytes)`)
  return { ms, bytes: jpg.length }
}
await shot() // warm-up: the SDK's connections, untimed
console.log(JSON.stringify({ ready: true }))
for await (const line of readline.createInterface({ input: process.stdin })) {
  if (line.trim() !== 'shot') throw new Error(`unknown request ${JSON.stringify(line)}`)
  console.log(JSON.stringify(await shot()))
}
