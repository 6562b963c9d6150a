// Drives an E2B API with the vendor's own JS SDK (npm `e2b`), configured
// only through its documented environment: E2B_API_KEY, E2B_API_URL,
// E2B_SANDBOX_URL (and E2B_DOMAIN). sdk_test.go runs it against the emulator.
// Every step that fails is a bug of the API under test: exit non-zero.
import { Sandbox, CommandExitError } from 'e2b'
import assert from 'node:assert/strict'

const step = (msg) => console.log(`step: ${msg}`)
const template = process.env.SDKTEST_TEMPLATE || 'base'
const tag = `sdktest-${process.pid}-${Date.now()}`

step(`create from ${template}`)
const sbx = await Sandbox.create(template, { metadata: { suite: tag }, timeoutMs: 300_000 })
assert.ok(sbx.sandboxId, 'a sandbox ID')

try {
  step('list by metadata')
  const listed = await Sandbox.list({ query: { metadata: { suite: tag } } }).nextItems()
  assert.deepEqual(listed.map((s) => s.sandboxId), [sbx.sandboxId])
  assert.equal(listed[0].metadata.suite, tag)

  step('run a command and stream its output')
  const chunks = []
  const errChunks = []
  const res = await sbx.commands.run('for i in 1 2 3; do echo line$i; done; echo oops >&2', {
    onStdout: (d) => chunks.push(d),
    onStderr: (d) => errChunks.push(d),
  })
  assert.equal(res.exitCode, 0)
  assert.equal(res.stdout, 'line1\nline2\nline3\n')
  assert.equal(chunks.join(''), 'line1\nline2\nline3\n')
  assert.equal(errChunks.join(''), 'oops\n')

  step('a failing command')
  await assert.rejects(sbx.commands.run('exit 7'), (err) => err instanceof CommandExitError && err.exitCode === 7)

  step('a background command, stdin, kill')
  const cat = await sbx.commands.run('cat', { background: true, stdin: true })
  const procs = await sbx.commands.list()
  assert.ok(procs.some((p) => p.pid === cat.pid), 'the background command is listed')
  await sbx.commands.sendStdin(cat.pid, 'ping\n')
  assert.equal(await sbx.commands.kill(cat.pid), true)

  step('write, list, read files')
  await sbx.files.write('/root/sdk/hello.txt', 'hello from the SDK\n')
  await sbx.files.write([
    { path: '/root/sdk/a.txt', data: 'A' },
    { path: '/root/sdk/sub/b.txt', data: 'B' },
  ])
  const entries = await sbx.files.list('/root/sdk')
  assert.deepEqual(entries.map((e) => e.name).sort(), ['a.txt', 'hello.txt', 'sub'])
  assert.equal(entries.find((e) => e.name === 'hello.txt').type, 'file')
  assert.equal(await sbx.files.read('/root/sdk/hello.txt'), 'hello from the SDK\n')
  assert.equal(await sbx.files.read('/root/sdk/sub/b.txt'), 'B')
  assert.equal(await sbx.files.exists('/root/sdk/nope'), false)
  await sbx.files.makeDir('/root/sdk/made')
  await sbx.files.rename('/root/sdk/a.txt', '/root/sdk/made/a.txt')
  await sbx.files.remove('/root/sdk/sub')
  const after = await sbx.files.list('/root/sdk')
  assert.deepEqual(after.map((e) => e.name).sort(), ['hello.txt', 'made'])

  step('timeout, pause, connect')
  await sbx.setTimeout(600_000)
  assert.equal(await sbx.isRunning(), true)
  assert.equal(await sbx.pause(), true)
  const info = await Sandbox.getInfo(sbx.sandboxId)
  assert.equal(info.state, 'paused')
  const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 300_000 })
  assert.equal(await again.files.read('/root/sdk/hello.txt'), 'hello from the SDK\n')
  const who = await again.commands.run('id -un')
  assert.equal(who.stdout.trim(), 'root')
} finally {
  step('kill')
  await sbx.kill()
}
const gone = await Sandbox.list({ query: { metadata: { suite: tag } } }).nextItems()
assert.equal(gone.length, 0)
console.log('SDK OK')
