// npmwork.js: npm's own bundled packages (semver, diff, minimatch) doing
// what npm does with them -- range matching over many versions, line
// diffs, glob matching -- for argv[2] ms of the main thread's CPU time (its
// schedstat: wall time would give fewer samples on a busy machine). None
// of that code is ours: it is the "real program" a JavaScript profiler is
// checked on, against V8's own sampler (`node --cpu-prof`) in the same run.
const fs = require("fs");
const path = require("path");
const npm = process.argv[3] || "/usr/lib/node_modules/npm/node_modules";
const semver = require(path.join(npm, "semver"));
const diff = require(path.join(npm, "diff"));
const { minimatch } = require(path.join(npm, "minimatch"));

function threadCpuMs() {
  return Number(fs.readFileSync("/proc/thread-self/schedstat", "utf8").split(" ")[0]) / 1e6;
}

const versions = [];
for (let a = 0; a < 12; a++)
  for (let b = 0; b < 12; b++)
    for (let c = 0; c < 6; c++) versions.push(`${a}.${b}.${c}${c % 3 ? "" : "-beta." + c}`);
const ranges = ["^1.2.3", "~4.5.0", ">=2.0.0 <5.0.0-0", "1.x || >=7.1.2", "*", "^0.3.1 || ^6"];
const lines = [];
for (let i = 0; i < 400; i++) lines.push(`line ${i} ${(i * 7919) % 1000}`);
const a = lines.join("\n");
const b = lines.map((l, i) => (i % 17 ? l : l + " changed")).join("\n");
const files = [];
for (let i = 0; i < 300; i++) files.push(`src/dir${i % 9}/file${i}.${i % 2 ? "js" : "ts"}`);

const ms = Number(process.argv[2] || 3000);
const t = threadCpuMs();
let n = 0;
while (threadCpuMs() - t < ms) {
  for (const r of ranges) n += semver.maxSatisfying(versions, r) ? 1 : 0;
  n += semver.sort(versions.slice()).length;
  n += diff.diffLines(a, b).length;
  for (const f of files) n += minimatch(f, "src/**/*.js") ? 1 : 0;
}
console.log(`pid=${process.pid}`);
console.log(`n=${n}`);
