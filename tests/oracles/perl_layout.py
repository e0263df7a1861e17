#!/usr/bin/env python3
"""Measure Perl 5.36's structure offsets sysprof's table holds
(`userspace/src/runtimes/perl/binary.rs`), from a running script's memory.

In: the Perl binary (default /usr/bin/perl). It runs a script that prints
the addresses Perl's own B module gives of its objects (the CVs of
`Box::spin_method`, `main::mid`, `main::by_name` and the lexical sub
`lexical`, spin_method's op tree's start and root and its GV, the stashes
of `Box` and `main`, flags and flag values), then loops forever in
`spin_method`, called by `mid`, called by `by_name` as a sort's comparator
(so the loop runs on a stack info of its own, whose si_prev is the main
one, and by_name was entered from C), sorted in `lexical`, called from the
top level. This stops it, reads its memory through /proc/PID/mem (as
root) and kills it. Out: on stdout one line of `name=value` pairs, each an
offset (bytes) where the memory holds what the field must, or the size of
a context (the distance between two adjacent contexts' CVs); then Iphase
and Iorigfilename from three more scripts caught in their BEGIN, main and
END phases and one in a required module's BEGIN. A field found at no
offset prints [], at several the list.
"""
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time

PERL = sys.argv[1] if len(sys.argv) > 1 else "/usr/bin/perl"
# Lines matter: mid's call of spin_method is line 14, the loops 5 to 7 (two
# loops, always both entered: the innermost context is two above the sub's).
SCRIPT = """use B;
package Box;
sub spin_method {
    my $n = shift;
    while (1) {
        while (1) {
            $n = ($n * 3 + 1) % 1000003;
        }
    }
}
package main;
sub mid {
    my $x = 1;
    Box::spin_method($x);
}
sub by_name { mid() }
my sub lexical {
    my @s = sort by_name 2, 1;
}
my ($c, $m, $bn, $l) = map { B::svref_2object($_) } \\&Box::spin_method, \\&mid, \\&by_name, \\&lexical;
my ($box, $main) = map { B::svref_2object($_) } \\%Box::, \\%main::;
printf "%d %d %d %d %d %d %d %d %d %d %d %d %d %d\\n", $$c, ${$c->START}, ${$c->ROOT}, ${$c->GV},
    $c->CvFLAGS, $$m, $$bn, $$l, $l->CvFLAGS, $$box, $box->FLAGS, $$main, B::CVf_NAMED(), B::SVf_OOK();
STDOUT->flush();
lexical();
"""


def symbol(path, name):
    out = subprocess.run(["nm", "-D", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == name:
            return int(parts[0], 16)
    raise SystemExit(f"no {name} in {path}")


def interpreter_of(script, curinterp_symbol, real):
    """Run `script` (its text) until it sleeps; its interpreter's bytes and
    a reader of its memory, and the process (to kill)."""
    with tempfile.NamedTemporaryFile("w", suffix=".pl", delete=False) as f:
        f.write(script)
    child = subprocess.Popen([real, f.name])
    time.sleep(0.4)
    base = min(int(l.split("-")[0], 16) for l in open(f"/proc/{child.pid}/maps")
               if l.rstrip().endswith(real))
    mem = open(f"/proc/{child.pid}/mem", "rb", 0)

    def rd(a, n):
        try:
            mem.seek(a)
            return mem.read(n)
        except (OSError, ValueError, OverflowError):
            return None
    interp = struct.unpack("<Q", rd(base + curinterp_symbol, 8))[0]
    return child, f.name, interp, rd


def phase_and_origfilename(real, curinterp_symbol):
    """Iphase: the int that is 1 while a BEGIN block sleeps, 4 while the
    program does, 5 while an END block does. Iorigfilename: the pointer to
    the main program's file name while a module it requires sleeps in its
    BEGIN block (PL_compiling's file is the module's then)."""
    values = []
    for script in ("BEGIN { sleep 9 }", "sleep 9;", "END { sleep 9 }"):
        child, name, interp, rd = interpreter_of(script, curinterp_symbol, real)
        blob = rd(interp, 4096) or b""
        values.append([struct.unpack("<i", blob[i:i + 4])[0] for i in range(0, len(blob) - 3, 4)])
        child.kill()
        child.wait()
        os.unlink(name)
    phase = [i * 4 for i in range(min(map(len, values)))
             if (values[0][i], values[1][i], values[2][i]) == (1, 4, 5)]
    with tempfile.NamedTemporaryFile("w", suffix=".pm", delete=False) as m:
        m.write("package Sleeper; BEGIN { sleep 9 } 1;\n")
    child, name, interp, rd = interpreter_of(f'require "{m.name}";', curinterp_symbol, real)
    origfilename = []
    for o in range(0, 4096, 8):
        w = struct.unpack("<Q", rd(interp + o, 8) or bytes(8))[0]
        text = rd(w, 256) if w > 4096 else None
        if text and text.split(b"\0")[0] == name.encode():
            origfilename.append(o)
    child.kill()
    child.wait()
    os.unlink(name)
    os.unlink(m.name)
    return phase, origfilename


def main():
    real = os.path.realpath(PERL)
    curinterp_symbol = symbol(real, "PL_curinterp")
    with tempfile.NamedTemporaryFile("w", suffix=".pl", delete=False) as f:
        f.write(SCRIPT)
    child = subprocess.Popen([PERL, f.name], stdout=subprocess.PIPE, text=True)
    try:
        said = [int(x) for x in child.stdout.readline().split()]
        (cv_spin, start, root, gv, spin_flags, cv_mid, cv_by_name, cv_lexical, lexical_flags,
         box, box_flags, main_stash, named, ook) = said
        time.sleep(0.3)
        # Stopped while read: the running statement stays where it is.
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(0.05)
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
            b = rd(a, 8) if a else None
            return struct.unpack("<Q", b)[0] if b and len(b) == 8 else 0

        def i32(a):
            b = rd(a, 4) if a else None
            return struct.unpack("<i", b)[0] if b and len(b) == 4 else None

        def cstr(a):
            b = rd(a, 256) if a else None
            return b.split(b"\0")[0] if b else None

        def hek_is(h, name):
            return h and i32(h + 4) == len(name) and rd(h + 8, len(name)) == name

        found = {}
        interp = word(base + curinterp_symbol)
        # The stack info the loop runs on (the sort's): its context array
        # holds mid's and spin_method's CVs, one context apart.
        places = []
        for o in range(0, 4096, 8):
            si = word(interp + o)
            for c in range(0, 64, 8):
                cxs = word(si + c) if si else 0
                area = rd(cxs, 8 * 128) if cxs else None
                if not area or len(area) < 8 * 128:
                    continue
                words = [struct.unpack("<Q", area[i:i + 8])[0] for i in range(0, len(area), 8)]
                # Three contexts in a row: by_name's, mid's, spin_method's.
                if cv_spin in words and cv_mid in words and cv_by_name in words:
                    at = [words.index(cv) * 8 for cv in (cv_by_name, cv_mid, cv_spin)]
                    size = at[1] - at[0]
                    # Each a sub's context (its type byte's low bits 9) from
                    # its start; the stack info's innermost two above.
                    if size <= 0 or at[2] - at[1] != size:
                        continue
                    starts = [cxs + a - a % size for a in at]
                    if all((rd(x, 1) or b"\0")[0] & 0xf == 9 for x in starts) and any(
                            i32(si + x) == at[2] // size + 2 for x in range(0, 64, 4)):
                        places.append((o, c, si, cxs, at[1], at[2]))
        found["interp_curstackinfo"] = sorted({p[0] for p in places})
        found["si_cxstack"] = sorted({p[1] for p in places})
        _, _, si, cxs, at_mid, at_spin = places[0] if places else (0, 0, 0, 0, 0, 0)
        size = at_spin - at_mid
        found["cx_size"] = size if size > 0 else []
        size = max(size, 1)
        found["cx_cv"] = at_spin % size
        index = at_spin // size
        # si_cxix: the innermost context, the inner loop's, two above
        # spin_method's; si_cxsubix: the innermost sub's, spin_method's (the
        # two at offsets where the other's value is not).
        found["si_cxix"] = [x for x in range(0, 64, 4) if i32(si + x) == index + 2]
        found["si_cxsubix"] = [x for x in range(0, 64, 4) if i32(si + x) == index]
        # si_prev: the sort's stack info's word holding the main one, whose
        # contexts hold the lexical sub's CV where a context's CV lies.
        found["si_prev"] = []
        for p in range(0, 64, 8):
            prev = word(si + p)
            pcx = word(prev + found["si_cxstack"][0]) if prev and found["si_cxstack"] else 0
            if pcx and any(word(pcx + i * size + found["cx_cv"]) == cv_lexical for i in range(8)):
                found["si_prev"].append(p)
        cx_by, cx_mid, cx_spin = (cxs + (index - 2) * size, cxs + (index - 1) * size, cxs + index * size)
        found["cx_by_name"] = "yes" if word(cx_by + found["cx_cv"]) == cv_by_name else "no"
        # blk_sub.old_cxsubix: the sub context below, by index; none (-1)
        # below the sort's first.
        found["cx_old_cxsubix"] = [k for k in range(0, size, 4) if i32(cx_spin + k) == index - 1
                                   and i32(cx_mid + k) == index - 2 and i32(cx_by + k) == -1]
        # blk_sub.retop: none for by_name (the sort called it from C), an
        # op for mid and spin_method (called from Perl code).
        found["cx_retop"] = [k for k in range(0, size, 8)
                             if word(cx_by + k) == 0 and word(cx_mid + k) > 4096 and word(cx_spin + k) > 4096
                             and word(cx_mid + k) != word(cx_spin + k)]
        # blk_oldcop: the statement that called spin_method (line 14); the
        # COP's line the i32 there, its file the string there.
        found["cx_oldcop"], found["cop_line"], found["cop_file"] = [], [], []
        for k in range(0, size, 8):
            cop = word(cx_spin + k)
            lines = [x for x in range(0, 64, 4) if cop > 4096 and i32(cop + x) == 14]
            files = [x for x in range(0, 128, 8) if cop > 4096 and cstr(word(cop + x)) == f.name.encode()]
            if lines and files:
                found["cx_oldcop"].append(k)
                found["cop_line"], found["cop_file"] = lines, files
        line_at = found["cop_line"][0] if len(found["cop_line"]) == 1 else None
        file_at = found["cop_file"][0] if len(found["cop_file"]) == 1 else None
        # Icurcop: the running statement, in the loops (lines 5 to 7), in the
        # script; where it is and where nothing else is (PL_op is a statement
        # too, now and then): caught at several stops.
        curcop = None
        for _ in range(8):
            at = {o for o in range(0, 4096, 8)
                  if line_at is not None and file_at is not None
                  and word(interp + o) > 4096
                  and i32(word(interp + o) + line_at) in (5, 6, 7)
                  and cstr(word(word(interp + o) + file_at)) == f.name.encode()}
            curcop = at if curcop is None else curcop & at
            if len(curcop) <= 1:
                break
            os.kill(child.pid, signal.SIGCONT)
            time.sleep(0.02)
            os.kill(child.pid, signal.SIGSTOP)
            time.sleep(0.02)
        found["interp_curcop"] = sorted(curcop or [])
        body = word(cv_spin)
        bw = [word(body + i) for i in range(0, 128, 8)]
        found["cv_start"] = [i * 8 for i, w in enumerate(bw) if w == start]
        found["cv_root"] = [i * 8 for i, w in enumerate(bw) if w == root]
        found["cv_gv"] = [i * 8 for i, w in enumerate(bw) if w == gv]
        found["cv_stash"] = [i * 8 for i, w in enumerate(bw) if w == box]
        found["cv_file"] = [i * 8 for i, w in enumerate(bw) if w > 4096 and cstr(w) == f.name.encode()]
        found["cv_flags"] = [x for x in range(0, 128, 4) if i32(body + x) == spin_flags
                             and i32(word(cv_lexical) + x) == lexical_flags]
        # A sub named by its own HEK (the lexical one): the flag says so,
        # the GV's word holds the HEK, the stash word its package.
        lex = word(cv_lexical)
        found["cvf_named"] = named if lexical_flags & named and not spin_flags & named else []
        found["cv_gv_named"] = [i for i in range(0, 128, 8) if hek_is(word(lex + i), b"lexical")]
        found["cv_stash_named"] = [i for i in range(0, 128, 8) if word(lex + i) == main_stash]
        # The GV: its name's HEK (len, then the key) and its stash.
        gv_body = word(gv)
        found["gv_name"] = [i for i in range(0, 64, 8) if hek_is(word(gv_body + i), b"spin_method")]
        found["hek_len"] = 4 if found["gv_name"] else []
        found["hek_key"] = 8 if found["gv_name"] else []
        found["gv_stash"] = [i for i in range(0, 64, 8) if word(gv_body + i) == box]
        flags = struct.unpack("<i", struct.pack("<I", box_flags))[0]
        found["sv_flags"] = [x for x in range(0, 24, 4) if i32(box + x) == flags]
        found["svf_ook"] = ook if box_flags & ook else []
        stash_body = word(box)
        found["hv_aux"] = [i for i in range(0, 64, 8) if hek_is(word(stash_body + i), b"Box")]
        found["interp_phase"], found["interp_origfilename"] = phase_and_origfilename(real, curinterp_symbol)
        print(" ".join(f"{k}={v[0] if isinstance(v, list) and len(v) == 1 else v}"
                       for k, v in found.items()))
    finally:
        child.kill()
        child.wait()
        os.unlink(f.name)
main()
