// The TypeScript SDK 1.x's experimental tasks client (SEP-1686, 2025-11-25), as VS Code uses it.
//
// Runs on Node with .interop/ts's `@modelcontextprotocol/sdk` 1.x from npm (imported by
// path: this file lives outside that tree). `client.experimental.tasks.callToolStream`
// creates the task with `params.task`, polls `tasks/get` and reads `tasks/result` (also on
// `input_required`, where the server's `elicitation/create` reaches the request handler);
// `getTask`, `getTaskResult`, `listTasks` and `cancelTask` are the manual controller.
// `progress` passes `onprogress` with the call: the SDK makes the request id the
// `progressToken` and keeps the handler once the answer is a `CreateTaskResult`
// (shared/protocol.js `_onresponse`, `_taskProgressTokens`).
//
//   node tests/interop/ts_client.mjs URL SCENARIO [--key KEY] [--peer TASK_ID] [--sdk DIR]
//
// One JSON object per stdout line, each with an `event`; the last is {"event": "done"}
// (tests/interop/common.py describes the same output for the Python clients).
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    key: { type: 'string', default: 'held' },
    peer: { type: 'string' },
    sdk: { type: 'string', default: resolve(dirname(fileURLToPath(import.meta.url)), '../../.interop/ts') },
  },
});
const [url, scenario] = positionals;
const ANSWER = { size: 'large', quantity: 3 };
const RELATED = 'io.modelcontextprotocol/related-task';
const root = join(values.sdk, 'node_modules/@modelcontextprotocol/sdk');
const load = (path) => import(pathToFileURL(join(root, 'dist/esm', path)).href);
const { Client } = await load('client/index.js');
const { StreamableHTTPClientTransport } = await load('client/streamableHttp.js');
const { CallToolResultSchema, ElicitRequestSchema, TaskStatusNotificationSchema } = await load('types.js');
const version = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version;

const emit = (event, fields = {}) => process.stdout.write(`${JSON.stringify({ event, ...fields })}\n`);
const failure = (error) => ({ type: error?.constructor?.name, message: String(error?.message ?? error), code: error?.code ?? null });
let stdin, lines; // a readline interface, opened by the first pause (closed at the end)
async function pause(at) { // `paused`, then one line on stdin (see common.py)
  emit('paused', { at });
  stdin ??= createInterface({ input: process.stdin });
  lines ??= stdin[Symbol.asyncIterator]();
  await lines.next();
}
const TERMINAL = ['completed', 'failed', 'cancelled'];
const notified = new Map(); // taskId -> statuses heard in notifications/tasks/status
const messages = new Map(); // taskId -> the statusMessages they carried
const ended = new Map(); // taskId -> resolve(), once a terminal status is heard
const heardEnd = (taskId) => new Promise((resolve) => ended.set(taskId, resolve));
async function reportNotified(taskId, waiting) { // `notified`, once the terminal one came (bounded)
  let timer;
  const within = new Promise((resolve) => { timer = setTimeout(resolve, 5000); });
  await Promise.race([waiting, within]);
  clearTimeout(timer);
  emit('notified', { statuses: notified.get(taskId) ?? [], messages: messages.get(taskId) ?? [] });
}
const TOOLS = {
  complete: ['double', { x: 21 }],
  error: ['refuse', { reason: 'no' }],
  cancel: ['hold', { key: values.key }],
  elicit: ['order', { item: 'tea' }],
  progress: ['steps', { key: values.key }],
  counted: ['counted', { key: values.key }],
};
const onprogress = ({ progress, total, message, _meta }) => // one line per call, as it comes
  emit('progress', { via: 'onprogress', progress, total, message, related: _meta?.[RELATED] ?? null });

async function run() {
  if (!(scenario in TOOLS) && scenario !== 'resume') throw new Error(`unknown scenario ${scenario}`);
  const client = new Client({ name: 'interop-ts', version: '1' }, { capabilities: { elicitation: { form: {} } } });
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    emit('elicited', { message: request.params.message, related: request.params._meta?.[RELATED] ?? null });
    await pause('elicitation');
    return { action: 'accept', content: { ...ANSWER } };
  });
  client.setNotificationHandler(TaskStatusNotificationSchema, ({ params }) => {
    notified.set(params.taskId, [...(notified.get(params.taskId) ?? []), params.status]);
    if (params.statusMessage !== undefined) messages.set(params.taskId, [...(messages.get(params.taskId) ?? []), params.statusMessage]);
    if (TERMINAL.includes(params.status)) ended.get(params.taskId)?.();
  });
  let closing = false; // closing aborts the standalone SSE stream: not an error of the run
  client.onerror = (error) => closing || emit('client-error', failure(error));
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  try {
    emit('initialized', {
      client: `@modelcontextprotocol/sdk ${version}`,
      protocol: transport.protocolVersion ?? null,
      tasks: client.getServerCapabilities()?.tasks ?? null,
    });
    const tasks = client.experimental.tasks;
    const tools = await client.listTools(); // callToolStream learns execution.taskSupport here
    emit('tools', { support: Object.fromEntries(tools.tools.map((t) => [t.name, t.execution?.taskSupport ?? null])) });
    if (values.peer) emit('peer', { task: await tasks.getTask(values.peer) });
    if (scenario === 'resume') { // another client's task: its input comes on this tasks/result
      emit('task-result', { result: await tasks.getTaskResult(values.peer, CallToolResultSchema) });
      emit('got', { task: await tasks.getTask(values.peer) });
      return;
    }
    const [name, args] = TOOLS[scenario];
    let taskId, waiting;
    const options = { task: { ttl: 60000 }, ...(['progress', 'counted'].includes(scenario) ? { onprogress } : {}) };
    const stream = tasks.callToolStream({ name, arguments: args }, CallToolResultSchema, options);
    for await (const message of stream) {
      if (message.type === 'taskCreated') {
        taskId = message.task.taskId;
        waiting = heardEnd(taskId);
        if (TERMINAL.some((status) => notified.get(taskId)?.includes(status))) ended.get(taskId)();
        emit('created', { task_id: taskId, task: message.task });
        if (scenario === 'cancel') {
          await pause('created');
          emit('cancelled', { task: await tasks.cancelTask(taskId) });
        }
      } else if (message.type === 'taskStatus') {
        emit('status', { task: message.task });
      } else if (message.type === 'result') {
        emit('result', { result: message.result });
      } else {
        emit('stream-error', failure(message.error));
      }
    }
    if (taskId === undefined) return;
    emit('got', { task: await tasks.getTask(taskId) });
    try {
      emit('task-result', { result: await tasks.getTaskResult(taskId, CallToolResultSchema) });
    } catch (error) {
      emit('raised', failure(error));
    }
    if (scenario === 'cancel') {
      try {
        await tasks.cancelTask(taskId);
        emit('cancelled-again');
      } catch (error) {
        emit('refused', failure(error));
      }
    }
    if (scenario === 'complete') emit('listed', { task_ids: (await tasks.listTasks()).tasks.map((t) => t.taskId) });
    await reportNotified(taskId, waiting);
  } finally {
    closing = true;
    await transport.terminateSession().catch(() => {});
    await client.close();
    stdin?.close();
    process.stdin.destroy();
  }
}

try {
  await run();
  emit('done');
} catch (error) {
  emit('crash', failure(error));
  process.exitCode = 1;
}
