// Node worker threads that never name themselves (their kernel name is
// "node", as every thread of node's). Each worker spins ~400 ms of CPU and
// says which OS thread it ran on, from /proc/thread-self/stat: the line
// `worker thread_id=K tid=T` ties node's own numbering (threadId, 1, 2, 3
// in the order created) to the thread sysprof names.
'use strict';
const { Worker, isMainThread, threadId } = require('worker_threads');
const fs = require('fs');

const WORKERS = 3;

if (isMainThread) {
  console.log(`pid=${process.pid}`);
  let left = WORKERS;
  for (let i = 0; i < WORKERS; i++) {
    const w = new Worker(__filename);
    w.on('message', (line) => console.log(line));
    w.on('exit', () => { if (--left === 0) process.exit(0); });
  }
} else {
  const { parentPort } = require('worker_threads');
  const tid = Number(fs.readFileSync('/proc/thread-self/stat', 'utf8').split(' ')[0]);
  const cpuMs = () => {
    // utime + stime of this thread, in clock ticks (100 a second).
    const f = fs.readFileSync('/proc/thread-self/stat', 'utf8');
    const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
    return (Number(rest[11]) + Number(rest[12])) * 10;
  };
  let x = 0;
  const start = cpuMs();
  while (cpuMs() - start < 400) {
    for (let i = 0; i < 100000; i++) x += Math.sqrt(i + x);
  }
  parentPort.postMessage(`worker thread_id=${threadId} tid=${tid} x=${x > 0}`);
}
