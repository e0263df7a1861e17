"""Python threads named by `threading`, which CPython before 3.14 never
tells the kernel (every thread is "python3" there). Each spins ~0.6 s of
its own CPU (time.thread_time) and records `thread name=NAME tid=NATIVE_ID`
(printed once all ended),
its name and the OS thread it ran on, for the profile to be checked
against. One name is longer than the kernel's 15 bytes, one is not ASCII.
"""
import os
import sys
import threading
import time

NAMES = ["hasher", "compressor-with-a-long-name", "träger"]


SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 0.6


def spin():
    start = time.thread_time()
    x = 0
    while time.thread_time() - start < SECONDS:
        for i in range(2000):
            x += i * i
    said.append((threading.current_thread().name, threading.get_native_id()))


print(f"pid={os.getpid()}", flush=True)
# Said by the main thread once they ended: threads printing at once mix
# their lines.
said = []
threads = [threading.Thread(target=spin, name=n) for n in NAMES]
for t in threads:
    t.start()
for t in threads:
    t.join()
for name, tid in said:
    print(f"thread name={name} tid={tid}")
