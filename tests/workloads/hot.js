// hot.js: a hot JavaScript function with a known name, run with
// `node --perf-basic-prof` so V8 writes /tmp/perf-PID.map. argv[2] is the
// number of milliseconds of its own CPU time to run (the main thread's, from
// its schedstat: on a loaded machine wall time would give fewer samples
// than a test expects); argv[3], if given, tampers with the map at
// the end ("chown": give it to another user; "symlink": replace it by a
// symlink) so the profiler must refuse it.
const fs = require("fs");
function sysprofHotLoop(n) {
  let s = 0;
  for (let i = 0; i < n; i++) s += Math.sqrt(i) % 7;
  return s;
}
// The main thread's CPU time in ms (schedstat's first field is ns on a CPU).
function threadCpuMs() {
  return Number(fs.readFileSync("/proc/thread-self/schedstat", "utf8").split(" ")[0]) / 1e6;
}
const ms = Number(process.argv[2] || 1500);
const t = threadCpuMs();
let acc = 0;
// Each call ~10 ms of CPU: the schedstat read between two calls is then
// under 1 % of the loop's time. At 1 ms a call the reads (readFileSync, not
// in sysprofHotLoop) were ~5 %, and a test's 90 % bar had 1-3 % to spare.
while (threadCpuMs() - t < ms) acc += sysprofHotLoop(1000000);
// The loop's own CPU time: what a sample count is judged against (node's
// start-up before it is CPU time too, and takes longer on a busy machine).
const loopMs = threadCpuMs() - t;
// Tampering: first 300 ms of regular expressions, which V8 compiles to
// machine code of its own in anonymous memory once they run often. Their
// frames are named by the perf map alone (no JavaScript function to read),
// so the profiler must look at the map and refuse it; without them its
// samples may all be JavaScript named from V8's objects, and the map never
// looked at (a CI run saw no warning).
if (process.argv[3]) {
  const re = /([a-z]+)-(\d+)(x|y)*z?$/;
  let found = 0;
  const start = threadCpuMs();
  while (threadCpuMs() - start < 300) {
    for (let i = 0; i < 2000; i++) if (re.test(`item-${i}xyxy`)) found++;
  }
  acc += found;
}
const map = `/tmp/perf-${process.pid}.map`;
if (process.argv[3] === "chown") fs.chownSync(map, 65534, 65534);
if (process.argv[3] === "symlink") {
  fs.renameSync(map, map + ".real");
  fs.symlinkSync(map + ".real", map);
}
console.log(`pid=${process.pid}\nacc=${acc}\nloop_ms=${loopMs.toFixed(1)}`);
