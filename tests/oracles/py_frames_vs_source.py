#!/usr/bin/env python3
"""Check a sysprof profile's Python frames against the programs' own source.

In: a profile (.json or .json.gz) and optionally a pid. Out: on stdout, one
JSON object: how many samples carry Python frames, how many of those hold a
frame the source contradicts, and the first contradictions found.

A Python frame (category "Python") names a function and a file and line.
The oracle is the file itself, parsed with `ast`: the line must lie inside
a function or lambda whose qualified name is the frame's (`Class.method`,
`outer.<locals>.inner`), or, for `<module>`, at the top level of the file;
comprehensions (`<listcomp>`, `<genexpr>`, ...) must lie inside their
enclosing function's qualified name. A frame whose file cannot be read
(`<frozen ...>`, `<string>`) is uncheckable and is counted apart, except a
`<frozen X>` file: the stdlib's source of module X, for the checker runs
under the program's own interpreter.

Before 3.11 a code object has no qualified name (`co_name` only: `method`,
`inner`): under such an interpreter a frame's name must be the last part
of the qualified name of a function holding the line.
"""
import ast
import gzip
import os
import sysconfig
import json
import sys

_trees = {}
NAMES_ARE_BARE = sys.version_info < (3, 11)
_line_counts = {}


def source_path(filename):
    if filename.startswith("<frozen ") and filename.endswith(">"):
        # A frozen stdlib module: its source is in this interpreter's stdlib
        # (the checker runs under the profiled program's interpreter).
        mod = filename[len("<frozen "):-1]
        base = os.path.join(sysconfig.get_paths()["stdlib"], *mod.split("."))
        for candidate in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.exists(candidate):
                return candidate
        return None
    if filename.startswith("<"):
        return None
    return filename


def scopes(filename):
    """[(qualname, first_line, last_line, is_class, def_line)] of every
    function and class: from its first decorator to its end, and the line of
    its `def` (which, with its decorators' lines, the enclosing code runs)."""
    if filename in _trees:
        return _trees[filename]
    path = source_path(filename)
    out = None
    if path:
        try:
            with open(path, "rb") as f:
                text = f.read()
            _line_counts[filename] = text.count(b"\n") + 1
            tree = ast.parse(text)
        except Exception:
            tree = None
        if tree is not None:
            out = []

            def walk(node, prefix, in_function):
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                        name = "<lambda>" if isinstance(child, ast.Lambda) else child.name
                        q = prefix + name
                        first = min([child.lineno] + [d.lineno for d in getattr(child, "decorator_list", [])])
                        out.append((q, first, child.end_lineno, isinstance(child, ast.ClassDef), child.lineno))
                        is_fn = not isinstance(child, ast.ClassDef)
                        walk(child, q + (".<locals>." if is_fn else "."), is_fn)
                    else:
                        walk(child, prefix, in_function)

            walk(tree, "", False)
    _trees[filename] = out
    return out


COMPREHENSIONS = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>")


def contradicts(name, filename, line):
    """None: consistent; True: contradicted; 'unchecked': no source."""
    sc = scopes(filename)
    if sc is None:
        return "unchecked"
    if line is None:
        return True
    if name == "<module>":
        # Top level: in the file, and no function body holds the line (a
        # class body is module code too).
        if line > _line_counts.get(filename, 0):
            return True
        return any(def_line < line <= last and not is_class for (_, _, last, is_class, def_line) in sc)
    base = name
    for c in COMPREHENSIONS:
        if name.endswith("." + c):
            base = name[: -len(c) - 1]
            break
        if name == c:
            base = None
            break
    if base is None:
        return False  # a module-level comprehension: anywhere
    # A <locals>-free comprehension qualname ends in ".<locals>" after strip.
    if base.endswith(".<locals>"):
        base = base[: -len(".<locals>")]
    for (q, first, last, _, _) in sc:
        if (q == base or (NAMES_ARE_BARE and q.rsplit(".", 1)[-1] == base)) and first <= line <= last:
            return False
    return True


def main():
    path = sys.argv[1]
    want_pid = sys.argv[2] if len(sys.argv) > 2 else None
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        p = json.load(f)
    cats = [c["name"] for c in p["meta"]["categories"]]
    py_cat = cats.index("Python") if "Python" in cats else -1
    samples_with_py = bad_samples = 0
    frames_checked = frames_bad = frames_unchecked = 0
    examples = []
    for t in p["threads"]:
        if want_pid and str(t.get("pid")) != want_pid:
            continue
        ft, fn, st, strings = t["frameTable"], t["funcTable"], t["stackTable"], t["stringArray"]
        verdict = {}

        def frame_verdict(fi):
            if fi in verdict:
                return verdict[fi]
            v = None
            if ft["category"][fi] == py_cat:
                func = ft["func"][fi]
                name = strings[fn["name"][func]]
                file_i = fn["fileName"][func]
                filename = strings[file_i] if file_i is not None else "<none>"
                line = ft["line"][fi]
                v = ("py", contradicts(name, filename, line), name, filename, line)
            verdict[fi] = v
            return v

        stack_bad = {}

        def stack_state(s):
            # (has_python, bad_frame or None), memoized along prefixes
            if s is None:
                return (False, None)
            if s in stack_bad:
                return stack_bad[s]
            todo = []
            cur = s
            while cur is not None and cur not in stack_bad:
                todo.append(cur)
                cur = st["prefix"][cur]
            state = stack_bad[cur] if cur is not None else (False, None)
            for node in reversed(todo):
                v = frame_verdict(st["frame"][node])
                has, bad = state
                if v is not None:
                    has = True
                    if v[1] is True and bad is None:
                        bad = v[2:]
                state = (has, bad)
                stack_bad[node] = state
            return state

        samples = t["samples"]
        for s in samples["stack"]:
            has, bad = stack_state(s)
            if not has:
                continue
            samples_with_py += 1
            if bad is not None:
                bad_samples += 1
                if len(examples) < 12 and bad not in examples:
                    examples.append(bad)
        for fi, v in verdict.items():
            if v is None:
                continue
            if v[1] == "unchecked":
                frames_unchecked += 1
            else:
                frames_checked += 1
                frames_bad += v[1] is True
    print(json.dumps({
        "samples_with_python": samples_with_py,
        "samples_contradicted": bad_samples,
        "frames_checked": frames_checked,
        "frames_contradicted": frames_bad,
        "frames_unchecked": frames_unchecked,
        "examples": examples,
    }))


if __name__ == "__main__":
    main()
