"""Run the stdlib's json.tool on argv[1] (to argv[2]) after printing pid=
and waiting for a line on stdin (an outside sampler attaches meanwhile)."""
import os
import runpy
import sys

print(f"pid={os.getpid()}", flush=True)
sys.stdin.readline()
sys.argv = ["json.tool", sys.argv[1], sys.argv[2]]
runpy.run_module("json.tool", run_name="__main__", alter_sys=True)
