#!/bin/bash
# sysprof beside perf on a real program: Debian's python3 (no frame
# pointers) doing JSON, regex and sorting work with a 10 ms sleep per round,
# pinned to CPU 0 beside a spinner pinned there too (preemption), 999 Hz.
# Both profilers watch the same execution, so run-to-run variation of the
# program (its leaf shares move by several points between runs) is out:
#   CPU: `perf record --call-graph dwarf,16384` of `sysprof record` (16 KiB
#   copies) and the program it runs; perf samples the program by
#   inheritance. Top-10 leaf symbols and stacks that reach the entry.
#   Off-CPU: `perf sched record -a` around a second sysprof run; the waits
#   of the program's thread by the state it left the CPU in.
# Usage (root): benches/compare/run.sh [ROUNDS]; python3 benches/compare/compare.py
set -e
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/sysprof-compare}
mkdir -p "$out" && cd "$out"
sysprof=${SYSPROF:-$here/../../target/release/sysprof}
rounds=${1:-200}
W="taskset -c 0 /usr/bin/python3 $here/work.py $rounds"
taskset -c 0 sh -c 'while :; do :; done' & spin=$!
trap 'kill $spin 2>/dev/null' EXIT
perf record -q -F 999 --call-graph dwarf,16384 -o perf.data -- "$sysprof" record -q -F 999 -o sysprof-cpu.json.gz -- $W > /dev/null
perf sched record -q -o sched.data -a -- "$sysprof" record -q -F 999 -o sysprof-offcpu.json.gz -- $W > /dev/null
perf script -i perf.data -F tid,ip,sym 2>/dev/null > perf.stacks
perf script -i sched.data -F time,trace 2>/dev/null | grep prev_comm= > sched.txt || true
echo "wrote $out"
