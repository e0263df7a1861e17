"""Run the stdlib's json.tool on argv[1] (to argv[2]) after printing pid=
and waiting for a line on stdin (an outside sampler attaches meanwhile);
then print the process's CPU time and its time waiting for a CPU (its
schedstat: cpu_ns=, run_delay_ns=), how loaded the machine was for it."""
import os
import runpy
import sys

print(f"pid={os.getpid()}", flush=True)
sys.stdin.readline()
sys.argv = ["json.tool", sys.argv[1], sys.argv[2]]
runpy.run_module("json.tool", run_name="__main__", alter_sys=True)
with open("/proc/self/schedstat") as f:
    cpu_ns, run_delay_ns = f.read().split()[:2]
print(f"cpu_ns={cpu_ns}\nrun_delay_ns={run_delay_ns}", flush=True)
