"""Two modules' functions of one name, called in turn for SECONDS (argv[1])
of this thread's CPU time; prints pid=."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import moda  # noqa: E402
import modb  # noqa: E402


def main(seconds):
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        moda.work(50)
        modb.work(50)


print(f"pid={os.getpid()}", flush=True)
main(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0)
