#!/usr/bin/env python3
"""Measure PHP 8.x's structure offsets sysprof's table holds
(`userspace/src/runtimes/php/binary.rs`), from a running script's memory.

In: the PHP binary (default /usr/bin/php8.2). It runs a script whose
`Box::spin_method` (declared at line 3) loops at line 5 forever, called by
`outer_fn` from the script's top level; this reads its memory through
/proc/PID/mem (as root) and kills it. Out: on stdout one line of
`name=value` pairs, each an offset (bytes) where the memory holds what the
field must: `current_execute_data` in executor_globals (by its exported
symbol), then in that zend_execute_data its func (a user function named
spin_method), its prev_execute_data (outer_fn's, then the script's), the
call info word (the script's frame with ZEND_CALL_TOP, 1 << 17), and in the
function its name, its class's name (scope), its file and first and last
lines, and the opline's line. A field found at no offset prints [].
"""
import os
import struct
import subprocess
import sys
import tempfile
import time

PHP = sys.argv[1] if len(sys.argv) > 1 else "/usr/bin/php8.2"
SCRIPT = """<?php
class Box {
    public function spin_method($n) {
        for ($i = 0; ; $i++) {
            $n = $n * 3 + 1;
        }
    }
}

function outer_fn() {
    $b = new Box();
    $b->spin_method(1);
}

outer_fn();
"""


def symbol(path, name):
    out = subprocess.run(["nm", "-D", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == name:
            return int(parts[0], 16)
    raise SystemExit(f"no {name} in {path}")


def main():
    eg_symbol = symbol(os.path.realpath(PHP), "executor_globals")
    with tempfile.NamedTemporaryFile("w", suffix=".php", delete=False) as f:
        f.write(SCRIPT)
    child = subprocess.Popen([PHP, "-n", f.name])
    try:
        time.sleep(0.4)
        real = os.path.realpath(PHP)
        base = min(int(l.split("-")[0], 16) for l in open(f"/proc/{child.pid}/maps")
                   if l.rstrip().endswith(real))
        mem = open(f"/proc/{child.pid}/mem", "rb", 0)

        def rd(a, n):
            try:
                mem.seek(a)
                return mem.read(n)
            except (OSError, ValueError, OverflowError):
                return None

        def word(a):
            b = rd(a, 8)
            return struct.unpack("<Q", b)[0] if b else 0

        def zstr(a):
            b = rd(a, 24) if a else None
            if not b:
                return None
            n = struct.unpack("<Q", b[16:24])[0]
            return rd(a + 24, n) if n < 4096 else None

        found = {}
        eg = base + eg_symbol
        for off in range(0, 4096, 8):
            ex = word(eg + off)
            func = word(ex + 24) if ex else 0
            head = rd(func, 16) if func else None
            if head and head[0] == 2 and zstr(word(func + 8)) == b"spin_method":
                found["eg_current_execute_data"] = off
                break
        ex = word(eg + found.get("eg_current_execute_data", 0))
        exb = rd(ex, 64) or bytes(64)
        words = [struct.unpack("<Q", exb[i:i + 8])[0] for i in range(0, 64, 8)]
        func = words[3]
        found["ex_func"] = [i * 8 for i, w in enumerate(words) if w == func]
        found["ex_prev"] = [i * 8 for i, w in enumerate(words)
                            if w and zstr(word(word(w + 24) + 8)) == b"outer_fn"]
        prev = words[found["ex_prev"][0] // 8] if found["ex_prev"] else 0
        script = word(prev + found["ex_prev"][0]) if found["ex_prev"] else 0
        sb = rd(script, 64) or bytes(64)
        # A flags word (below 2^24 in both): the script's frame is top-level
        # code (ZEND_CALL_CODE, 1 << 16) entered from C (ZEND_CALL_TOP), the
        # method's neither.
        u32 = lambda b, i: struct.unpack("<I", b[i:i + 4])[0]
        found["ex_call_info"] = [i for i in range(0, 64, 4)
                                 if u32(sb, i) < 1 << 24 and u32(exb, i) < 1 << 24
                                 and u32(sb, i) & (3 << 16) == 3 << 16
                                 and not u32(exb, i) & (3 << 16)]
        fb = rd(func, 256)
        fw = [struct.unpack("<Q", fb[i:i + 8])[0] for i in range(0, 256, 8)]
        found["fn_name"] = [i * 8 for i, w in enumerate(fw) if w and zstr(w) == b"spin_method"]
        found["fn_scope"] = [i * 8 for i, w in enumerate(fw) if w and zstr(word(w + 8)) == b"Box"]
        found["op_filename"] = [i * 8 for i, w in enumerate(fw) if w and zstr(w) == f.name.encode()]
        ints = [struct.unpack("<I", fb[i:i + 4])[0] for i in range(0, 256, 4)]
        found["op_line_start"] = [i * 4 for i in range(len(ints) - 1) if ints[i] == 3 and ints[i + 1] == 7]
        opline = words[0]
        found["opline_lineno"] = [i for i in range(0, 32, 4)
                                  if struct.unpack("<I", (rd(opline, 32) or bytes(32))[i:i + 4])[0] == 5]
        print(" ".join(f"{k}={v[0] if isinstance(v, list) and len(v) == 1 else v}" for k, v in found.items()))
    finally:
        child.kill()
        child.wait()
        os.unlink(f.name)


main()
