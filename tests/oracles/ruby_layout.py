#!/usr/bin/env python3
"""Measure CRuby 3.1's structure offsets sysprof's table holds
(`userspace/src/runtimes/ruby/binary.rs`), from a running script's memory.

In: the ruby binary (default /usr/bin/ruby). It runs the script below; this reads its memory through
/proc/PID/mem (as root) and kills it. Out: on stdout one line of
`name=value` pairs, each an offset (bytes) where the memory holds what the
field must, found by searching, not assumed. The script: `Box#spin_method`
(line 2) runs a block (line 3) through `run_block` (line 10), which yields
to it; the block loops forever; `outer_fn` calls `spin_method` from the
script's top level.

- the main thread's execution context: from `ruby_current_vm_ptr` (an
  exported global of libruby) to the VM word that points at a structure
  pointing back at the VM (the main thread), to the thread's word that
  points at a structure pointing back at the thread (its context);
- in the context: the VM stack and its size (in VALUEs), and the control
  frame pointer inside that stack (`ec_*`);
- the control frames from it: their size and the word holding the iseq
  whose body's label reads each of NAMES (`cfp_size`, `cfp_iseq`,
  `iseq_body`, `body_label`); the word holding the environment pointer
  whose first word carries each of the five frames' magic (BLOCK 0x2222,
  METHOD 0x1111 thrice, EVAL 0x7777 with FINISH 0x20 for `<main>`)
  (`cfp_ep`); the word holding the pc, inside the code a body word points
  at (`cfp_pc`, `body_iseq_encoded`);
- in the body: the path object (an Array whose first String ends in the
  script's name, or that String), the type (ISEQ_TYPE_BLOCK 2 for the
  block, ISEQ_TYPE_METHOD 1 for the methods) and the first line (the
  Fixnum of FIRST_LINES) (`body_pathobj`, `body_type`,
  `body_first_lineno`).

A field found at no offset prints [].
"""
import os
import struct
import subprocess
import sys
import tempfile
import time

RUBY = sys.argv[1] if len(sys.argv) > 1 else "/usr/bin/ruby"
SCRIPT = """class Box
  def spin_method(n)
    run_block do
      while true
        n = (n * 3 + 1) % 1000003
      end
    end
  end

  def run_block
    yield
  end
end

def outer_fn
  Box.new.spin_method(1)
end

outer_fn
"""
# The leaf-most three frames' labels (a block's label is not its base
# label, so the two are told apart), and the first lines of the first two.
NAMES = [b"block in spin_method", b"run_block", b"spin_method"]
FIRST_LINES = [3, 10]


def symbol(path, name):
    out = subprocess.run(["nm", "-D", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == name:
            return int(parts[0], 16)
    raise SystemExit(f"no {name} in {path}")


class Memory:
    def __init__(self, pid):
        self.f = open(f"/proc/{pid}/mem", "rb", 0)

    def read(self, addr, n):
        try:
            self.f.seek(addr)
            return self.f.read(n)
        except (OSError, ValueError, OverflowError):
            return None

    def word(self, addr):
        b = self.read(addr, 8)
        return struct.unpack("<Q", b)[0] if b and len(b) == 8 else None

    def string(self, addr):
        """A Ruby String's bytes (3.1: heap when FL_USER1, else embedded
        with its length in flags bits 14-18), or None."""
        flags = self.word(addr)
        if flags is None or flags & 0x1F != 0x05:
            return None
        if flags & (1 << 13):
            n, p = self.word(addr + 16), self.word(addr + 24)
            if n is None or p is None or n > 4096:
                return None
            return self.read(p, n)
        return self.read(addr + 16, (flags >> 14) & 0x1F)


def back_pointer(m, base, target, span=256):
    """Offsets of words at `base` pointing at something that points back
    at `target` within its first `span` bytes."""
    found = []
    for i in range(0, span, 8):
        p = m.word(base + i)
        if not p or p < 0x10000:
            continue
        if any(m.word(p + j) == target for j in range(0, span, 8)):
            found.append((i, p))
    return found


def main():
    lib = None
    with tempfile.NamedTemporaryFile("w", suffix=".rb", delete=False) as f:
        f.write(SCRIPT)
    child = subprocess.Popen([RUBY, f.name])
    out = {}
    try:
        time.sleep(0.5)
        for line in open(f"/proc/{child.pid}/maps"):
            parts = line.split()
            if len(parts) > 5 and "libruby" in parts[5] and parts[2] == "00000000":
                lib, base = parts[5], int(parts[0].split("-")[0], 16)
                break
        if lib is None:
            raise SystemExit("no libruby mapped")
        m = Memory(child.pid)
        vm = m.word(base + symbol(os.path.realpath(lib), "ruby_current_vm_ptr"))
        ec = None
        for _, thread in back_pointer(m, vm, vm):
            for _, candidate in back_pointer(m, thread, thread):
                # The context: a VM stack, its size, a frame inside it.
                for a in range(0, 64, 8):
                    stack, size = m.word(candidate + a), m.word(candidate + a + 8)
                    if not stack or not size or not (1024 <= size <= 1 << 24):
                        continue
                    for c in range(0, 64, 8):
                        cfp = m.word(candidate + c)
                        if cfp and stack < cfp < stack + size * 8:
                            ec, out["ec_vm_stack"], out["ec_vm_stack_size"], out["ec_cfp"] = (
                                candidate, a, a + 8, c)
                            break
                    if ec:
                        break
                if ec:
                    break
            if ec:
                break
        if ec is None:
            raise SystemExit("no execution context found")
        cfp = m.word(ec + out["ec_cfp"])

        def label_of(iseq, body_off, label_off):
            body = m.word(iseq + body_off) if iseq else None
            lab = m.word(body + label_off) if body else None
            return m.string(lab) if lab else None

        # The frames' size and their iseq's word, body's and label's.
        for size in range(32, 129, 8):
            for iseq_off in range(0, size, 8):
                for body_off in range(0, 48, 8):
                    for label_off in range(0, 160, 8):
                        labels = [label_of(m.word(cfp + k * size + iseq_off), body_off, label_off)
                                  for k in range(3)]
                        if labels == NAMES:
                            out.update(cfp_size=size, cfp_iseq=iseq_off, iseq_body=body_off,
                                       body_label=label_off)
                            break
                    if "cfp_size" in out:
                        break
                if "cfp_size" in out:
                    break
            if "cfp_size" in out:
                break
        if "cfp_size" not in out:
            raise SystemExit("no frames labelled " + ", ".join(n.decode() for n in NAMES))
        size = out["cfp_size"]
        frames = [cfp + k * size for k in range(3)]
        bodies = [m.word(m.word(f + out["cfp_iseq"]) + out["iseq_body"]) for f in frames]
        # The environment pointer: its first word the frame's magic.
        five = [cfp + k * size for k in range(5)]
        magic = [0x22220001, 0x11110001, 0x11110001, 0x11110001, 0x77770001]
        eps = [o for o in range(0, size, 8)
               if all((m.word(m.word(f + o) or 0) or 0) & 0x7FFF0001 == mg
                      for f, mg in zip(five, magic))
               and (m.word(m.word(five[4] + o)) or 0) & 0x20]
        out["cfp_ep"] = eps
        # The pc: inside the code a body word points at, for all three.
        pcs = []
        for e in range(0, 128, 8):
            codes = [m.word(b + e) for b in bodies]
            for o in range(0, size, 8):
                if all(c and 0 < (m.word(f + o) or 0) - c < 4096 for f, c in zip(frames, codes)):
                    pcs.append((o, e))
        out["cfp_pc"] = sorted({o for o, _ in pcs})
        out["body_iseq_encoded"] = sorted({e for _, e in pcs})
        # The path object, and the first line (a Fixnum: 2n+1).
        script = os.path.basename(f.name).encode()
        paths = []
        for o in range(0, 160, 8):
            v = m.word(bodies[0] + o)
            if not v:
                continue
            flags = m.word(v) or 0
            first = m.word(v + 16) if flags & 0x1F == 0x07 and flags & (1 << 13) else v
            s = m.string(first) if first else None
            if s and s.endswith(script):
                paths.append(o)
        out["body_pathobj"] = paths
        # The iseq's type (a 4-byte enum): BLOCK 2, then METHOD 1 twice.
        out["body_type"] = [o for o in range(0, 16, 4)
                            if [struct.unpack("<I", m.read(b + o, 4))[0] for b in bodies] == [2, 1, 1]]
        out["body_first_lineno"] = [o for o in range(0, 160, 8)
                                    if m.word(bodies[0] + o) == 2 * FIRST_LINES[0] + 1
                                    and m.word(bodies[1] + o) == 2 * FIRST_LINES[1] + 1]
    finally:
        child.kill()
        child.wait()
        os.unlink(f.name)

    def show(v):
        if isinstance(v, list):
            return str(v[0]) if len(v) == 1 else "[" + ",".join(map(str, v)) + "]"
        return str(v)

    print(" ".join(f"{k}={show(v)}" for k, v in out.items()))


if __name__ == "__main__":
    main()
