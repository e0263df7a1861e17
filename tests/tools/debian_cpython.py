"""Install a CPython this Debian does not package (3.14) from Debian's own
newer suites, into a directory the tests run it from.

In: argv[1] the minor version ("3.14"), argv[2] the directory. Out: the
directory holding usr/bin/pythonX.Y (run as is), or an exit status and
one line on stderr saying what failed.

Debian 12 has CPython 3.11; pyenv here builds 3.6 to 3.13. Debian's
unstable (sid) and testing suites carry 3.14, built against a newer glibc:
the interpreter's packages and that glibc are unpacked side by side
(`dpkg -x`, nothing installed system-wide) and the interpreter's ELF
loader and library path pointed at them (patchelf, from this Debian's
packages when missing). The interpreter then finds its standard library
next to itself. The suites move, so each package's file is looked up in
the suite's index (Packages.xz) rather than named here, and its SHA256
checked against the index.
"""

import hashlib
import lzma
import os
import shutil
import subprocess
import sys
import urllib.request

MIRROR = "http://deb.debian.org/debian"
SUITES = ["sid", "testing"]


def fail(why):
    sys.stderr.write(f"debian_cpython: {why}\n")
    sys.exit(1)


def index(suite):
    """The suite's main/amd64 index: {package: {field: value}}."""
    url = f"{MIRROR}/dists/{suite}/main/binary-amd64/Packages.xz"
    with urllib.request.urlopen(url, timeout=60) as r:
        text = lzma.decompress(r.read()).decode("utf-8", "replace")
    packages = {}
    for stanza in text.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            key, value = line.split(":", 1)
            fields[key] = value.strip()
        if "Package" in fields:
            packages[fields["Package"]] = fields
    return packages


def fetch(fields, into):
    path = os.path.join(into, os.path.basename(fields["Filename"]))
    with urllib.request.urlopen(f"{MIRROR}/{fields['Filename']}", timeout=120) as r:
        data = r.read()
    if hashlib.sha256(data).hexdigest() != fields.get("SHA256"):
        fail(f"{fields['Filename']}: its SHA256 is not the index's")
    with open(path, "wb") as f:
        f.write(data)
    return path


def main():
    minor, root = sys.argv[1], os.path.abspath(sys.argv[2])
    wanted = [f"python{minor}-minimal", f"libpython{minor}-minimal", f"libpython{minor}-stdlib", "libc6"]
    for suite in SUITES:
        try:
            packages = index(suite)
        except Exception as e:  # a suite unreachable: try the next
            sys.stderr.write(f"debian_cpython: {suite}: {e}\n")
            continue
        if all(p in packages for p in wanted):
            break
    else:
        fail(f"no Debian suite of {SUITES} has {', '.join(wanted)}")
    # patchelf from this Debian's packages; the package lists refreshed
    # first if they do not have it (a fresh machine's may be empty).
    for step in (["install", "-y", "patchelf"], ["update"], ["install", "-y", "patchelf"]):
        if shutil.which("patchelf") is not None:
            break
        subprocess.run(
            ["apt-get", "-o", "DPkg::Lock::Timeout=600", *step],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"),
        )
    if shutil.which("patchelf") is None:
        fail("patchelf is missing and could not be installed: `apt-get install patchelf`")
    shutil.rmtree(root, ignore_errors=True)
    debs = os.path.join(root, "debs")
    os.makedirs(debs)
    for p in wanted:
        deb = fetch(packages[p], debs)
        subprocess.run(["dpkg", "-x", deb, root], check=True)
    libs = os.path.join(root, "usr/lib/x86_64-linux-gnu")
    python = os.path.join(root, f"usr/bin/python{minor}")
    subprocess.run(
        ["patchelf", "--set-interpreter", os.path.join(libs, "ld-linux-x86-64.so.2"), "--set-rpath", libs, python],
        check=True,
    )
    shutil.rmtree(debs)
    print(python)


main()
