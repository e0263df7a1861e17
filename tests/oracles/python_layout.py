#!/usr/bin/env python3
"""Measure, from inside a running CPython 3.8-3.10, the structure offsets
sysprof's table (`userspace/src/runtimes/python/binary.rs`) holds for it.

In: nothing; run it with the interpreter to measure. Out: on stdout, one
line of `name=value` pairs, each the offset (bytes) where this process's
own memory, read through ctypes, holds the value the field must hold:

- runtime_tss: the `Py_tss_t` of `_PyRuntime.gilstate.autoTSSkey` ({1, key}
  where the key's value is this thread's state, after the gilstate's
  `tstate_current` (this thread, which holds the GIL), 3.8's `getframe`,
  and `autoInterpreterState` (the interpreter));
- tstate_frame, tstate_pthread: `PyThreadState.frame` (the frame running
  the read) and `.thread_id` (`threading.get_ident()`);
- frame_back, frame_code, frame_lasti: a suspended caller's `f_back`,
  `f_code` and `f_lasti` (in bytes before 3.10; in code units, half the
  attribute, from 3.10);
- code_*: a code object's fields by their objects' ids.

A field found at no offset, or at several, is printed as a list: the table
must then not be trusted for this version.
"""
import ctypes
import sys
import threading

api = ctypes.pythonapi
libc = ctypes.CDLL(None)
libc.pthread_getspecific.restype = ctypes.c_void_p
libc.pthread_getspecific.argtypes = [ctypes.c_uint]
api.PyThreadState_Get.restype = ctypes.c_void_p


def words(b):
    return [int.from_bytes(b[i:i + 8], "little") for i in range(0, len(b) - 7, 8)]


def ints(b):
    return [int.from_bytes(b[i:i + 4], "little", signed=True) for i in range(0, len(b) - 3, 4)]


def at(values, want, size):
    found = [i * size for i, v in enumerate(values) if v == want]
    return found[0] if len(found) == 1 else found


found = {}
runtime = ctypes.addressof(ctypes.c_char.in_dll(api, "_PyRuntime"))
tstate = api.PyThreadState_Get()
interp = words(ctypes.string_at(tstate + 16, 8))[0]
raw = ctypes.string_at(runtime, 0x2000)
iv = ints(raw)
found["runtime_tss"] = [
    hex(i * 4) for i in range(2, len(iv) - 1)
    if iv[i] == 1 and 0 <= iv[i + 1] < 32 and i % 2 == 0
    and libc.pthread_getspecific(iv[i + 1]) == tstate
    and words(raw[i * 4 - 8:i * 4])[0] == interp
    and tstate in (words(raw[i * 4 - 24:i * 4 - 16])[0], words(raw[i * 4 - 16:i * 4 - 8])[0])
]
found["tstate_pthread"] = at(words(ctypes.string_at(tstate, 512)), threading.get_ident(), 8)


def frame_fields():
    caller = sys._getframe(1)  # suspended in this call: its fields hold still
    b = ctypes.string_at(id(caller), 160)
    lasti = caller.f_lasti if sys.version_info < (3, 10) else caller.f_lasti // 2
    found["frame_back"] = at(words(b), id(caller.f_back), 8)
    found["frame_code"] = at(words(b), id(caller.f_code), 8)
    found["frame_lasti"] = at(ints(b), lasti, 4)


def caller():
    x = 1
    y = x + 2
    frame_fields()
    return y


def state_frame():
    # memmove is C, called with no Python frame between: the state's frame
    # is this function's while it copies.
    copy = ctypes.create_string_buffer(512)
    ctypes.memmove(copy, tstate, 512)
    found["tstate_frame"] = at(words(copy.raw), id(sys._getframe(0)), 8)


caller()
state_frame()


def f(a, b=3):
    return a


code = f.__code__
cw, ci = words(ctypes.string_at(id(code), 200)), ints(ctypes.string_at(id(code), 200))
table = code.co_linetable if sys.version_info >= (3, 10) else code.co_lnotab
found["code_firstlineno"] = at(ci, code.co_firstlineno, 4)
found["code_code"] = at(cw, id(code.co_code), 8)
found["code_filename"] = at(cw, id(code.co_filename), 8)
found["code_name"] = at(cw, id(code.co_name), 8)
found["code_linetable"] = at(cw, id(table), 8)
print(f"3.{sys.version_info[1]}", " ".join(f"{k}={v}" for k, v in found.items()))
