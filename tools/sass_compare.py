#!/usr/bin/env python3
"""tools/sass_compare.py LIB_A LIB_B — whether two CUDA builds of ploss hold the same
machine code, kernel by kernel (no GPU needed): for a change that should not alter any
kernel (a build reorganisation, host code, names), before spending device time on it.

Kernels are matched by their demangled names with the parts that only say where a kernel
is defined left out: anonymous namespaces and a grouped file's own namespace
(`<file>_kernels::`, meson.build).  Each kernel's SASS (tools/sass.sh, addresses removed)
is compared instruction for instruction.  Prints the kernels found in one library only,
those whose SASS differs (with the instruction counts), and a summary line; exit status 0
when every kernel of one is in the other with the same SASS, 1 otherwise.
"""
import collections
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def kernels(lib):
    """{normalised name: sorted list of SASS listings} of a library."""
    out = subprocess.run(["bash", os.path.join(HERE, "sass.sh"), "--lib", lib, "."],
                         check=True, capture_output=True, text=True).stdout
    listings, name, body = [], None, []
    for line in out.splitlines():
        if line.startswith("== "):
            if name:
                listings.append((name, body))
            name, body = line[3:].strip(), []
        elif name:
            body.append(line.split(" ", 1)[1] if " " in line else line)
    if name:
        listings.append((name, body))
    demangled = subprocess.run(["c++filt"], input="\n".join(n for n, _ in listings),
                               check=True, capture_output=True, text=True).stdout.splitlines()
    found = collections.defaultdict(list)
    for (_, body), d in zip(listings, demangled):
        key = re.sub(r"\b\w+_kernels::", "", d.replace("(anonymous namespace)::", ""))
        found[key].append("\n".join(body))
    return {k: sorted(v) for k, v in found.items()}


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: tools/sass_compare.py LIB_A LIB_B")
    a, b = kernels(sys.argv[1]), kernels(sys.argv[2])
    only_a = sorted(set(a) - set(b))
    only_b = sorted(set(b) - set(a))
    differ = sorted(k for k in set(a) & set(b) if a[k] != b[k])
    for k in only_a:
        print("only in A:", k)
    for k in only_b:
        print("only in B:", k)
    for k in differ:
        count = lambda v: "+".join(str(x.count("\n") + 1) for x in v)
        print("differs:  ", k, "(instructions: A %s, B %s)" % (count(a[k]), count(b[k])))
    same = len(set(a) & set(b)) - len(differ)
    print("%d kernels the same, %d differ, %d only in A, %d only in B" %
          (same, len(differ), len(only_a), len(only_b)))
    sys.exit(0 if not (only_a or only_b or differ) else 1)


if __name__ == "__main__":
    main()
