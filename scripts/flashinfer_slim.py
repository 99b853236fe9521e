#!/usr/bin/env python3
"""Slim a flashinfer-python wheel down to what batch decode / paged prefill need.

Usage: flashinfer_slim.py INPUT.whl OUTPUT.whl [--trim-cccl] [--no-spdlog] [-v]

What is kept (everything else is dropped):
  * Python: the transitive closure of flashinfer modules imported by flashinfer.decode and
    flashinfer.prefill -- module-level AND function-level imports (relative, absolute,
    `flashinfer.x.y` attribute chains, importlib.import_module with literal / f-string
    prefixes, and module names in the lazy-export tables of modules that import
    dynamically), plus every parent package.  flashinfer/__init__.py and
    flashinfer/jit/__init__.py are replaced by minimal ones whose other names resolve
    lazily (module __getattr__), so `import flashinfer.decode` does not eagerly import
    MoE, GEMM, comm, gdn, kda, experimental, ...
  * Non-.py files inside the flashinfer package (json tables, ...) only where a kept
    module names the file; py.typed.
  * flashinfer/data: the csrc sources / jinja templates that the batch & single decode
    and prefill JIT generators (fa2 and sm90 'fa3', incl. fp8 sm90 variants) open, and
    the conservative #include closure of those over data/include, data/csrc,
    data/cutlass/include and data/cutlass/tools/util/include (every #include line is
    followed whatever #if it sits under).  data/cccl is kept whole (it is put first on
    nvcc's -I path, ahead of the CUDA toolkit's own CCCL) unless --trim-cccl, which
    keeps only its #include closure.  data/spdlog/include is kept (it is on the
    -isystem path) unless --no-spdlog.
  * dist-info: all but RECORD, which is recomputed.
"""
import argparse
import ast
import base64
import hashlib
import os
import re
import sys
import tempfile
import zipfile

PKG = "flashinfer"
START_MODULES = ["flashinfer.decode", "flashinfer.prefill"]
LAZY_PACKAGES = ["flashinfer", "flashinfer.jit"]
# flashinfer.jit submodules imported eagerly by the minimal jit/__init__.py (as the
# original does); every other name of the original jit/__init__ resolves lazily.
JIT_EAGER_SOURCES = {"flashinfer.jit.cubin_loader", "flashinfer.jit.env",
                     "flashinfer.jit.attention", "flashinfer.jit.core"}
# Dynamic imports whose target the static scan cannot see.
MANUAL_EXTRA = {
    # importlib.import_module(f".jit.{loader_name}") with loader_name = f"cake_fmha_{family}"
    "flashinfer.cake_fmha": ("jit-prefix", "cake_fmha_"),
    # importlib.import_module(f"{__package__}.helpers_paged")
    "flashinfer.attention.prims_ts.kernels.fmha_context.fmha_kernel": ("sibling", "helpers_paged"),
}
# csrc files the JIT generators for batch/single decode and prefill read (fa2 + sm90).
CSRC_PREFIXES = ("batch_decode", "batch_prefill", "single_decode", "single_prefill")
CSRC_EXCLUDE = ("mla",)
# Headers named in generated code (variant_decl strings in jit/attention/modules.py).
EXTRA_HEADERS = ["flashinfer/attention/variants.cuh", "flashinfer/attention/hopper/variants.cuh"]


# --------------------------------------------------------------------------- python closure
class PyClosure:
    def __init__(self, root):
        self.root = root
        self.exports = {p: self.export_map(p) for p in LAZY_PACKAGES}
        self.seen, self.why, self.missing, self.warnings = {}, {}, set(), []
        self.lazy_names = {p: set() for p in LAZY_PACKAGES}

    def modpath(self, mod):
        if not mod or any(not p.isidentifier() or p == "__init__" for p in mod.split(".")):
            return None
        p = os.path.join(self.root, *mod.split("."))
        if os.path.isfile(p + ".py"):
            return p + ".py"
        if os.path.isfile(os.path.join(p, "__init__.py")):
            return os.path.join(p, "__init__.py")
        return None

    def is_pkg(self, mod):
        f = self.modpath(mod)
        return f is not None and f.endswith("__init__.py")

    @staticmethod
    def resolve(pkg, level, module):
        if not level:
            return module or ""
        base = pkg.split(".")
        if level > 1:
            base = base[: len(base) - (level - 1)]
        return ".".join(base + ([module] if module else []))

    def parse(self, mod):
        with open(self.modpath(mod), encoding="utf-8") as f:
            return ast.parse(f.read())

    def pkg_of(self, mod):
        return mod if self.is_pkg(mod) else mod.rsplit(".", 1)[0]

    def export_map(self, pkgmod):
        """name -> (module, attr or None) for the import statements of a package __init__
        (top level, and inside try / with / if blocks)."""
        m = {}

        def visit(stmts):
            for n in stmts:
                if isinstance(n, ast.ImportFrom):
                    src = self.resolve(pkgmod, n.level, n.module)
                    for a in n.names:
                        nm = a.asname or a.name
                        if self.modpath(src + "." + a.name):
                            m[nm] = (src + "." + a.name, None)
                        else:
                            m[nm] = (src, a.name)
                elif isinstance(n, ast.Try):
                    visit(n.body)
                    for h in n.handlers:
                        visit(h.body)
                    visit(n.orelse)
                    visit(n.finalbody)
                elif isinstance(n, (ast.With, ast.If)):
                    visit(n.body)
                    visit(getattr(n, "orelse", []))

        visit(self.parse(pkgmod).body)
        return m

    def run(self, starts):
        self.todo = [(s, "start") for s in starts]
        while self.todo:
            m, frm = self.todo.pop()
            if m in self.seen:
                continue
            if self.modpath(m) is None:
                if "." in m:
                    p, a = m.rsplit(".", 1)
                    if self.modpath(p):
                        self.todo.append((p, frm))
                        self.need_name(p, a, frm)
                        continue
                self.missing.add(f"{m} (from {frm})")
                continue
            self.seen[m] = self.modpath(m)
            self.why[m] = frm
            parts = m.split(".")
            for i in range(1, len(parts)):
                self.todo.append((".".join(parts[:i]), m))
            if m in LAZY_PACKAGES:
                continue  # replaced by a minimal __init__; only names used are followed
            self.scan(m)
        return self

    def need_name(self, pkg, name, frm):
        if self.modpath(pkg + "." + name):
            self.todo.append((pkg + "." + name, frm))
            return
        if pkg in self.exports:
            if name in self.exports[pkg]:
                self.lazy_names[pkg].add(name)
                tgt, attr = self.exports[pkg][name]
                self.todo.append((tgt, f"{frm} via {pkg}.{name}"))
                if attr:
                    self.need_name(tgt, attr, frm)
            else:
                self.missing.add(f"{pkg}:{name} (from {frm})")

    def scan(self, m):
        tree = self.parse(m)
        pkg = self.pkg_of(m)
        extra = MANUAL_EXTRA.get(m)
        if extra and extra[0] == "jit-prefix":
            d = os.path.join(self.root, PKG, "jit")
            for fn in sorted(os.listdir(d)):
                if fn.startswith(extra[1]) and fn.endswith(".py"):
                    self.todo.append((f"{PKG}.jit.{fn[:-3]}", m + " manual"))
        elif extra and extra[0] == "sibling":
            self.todo.append((pkg + "." + extra[1], m + " manual"))
        dyn = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == PKG:
                        self.todo.append((a.name, m))
            elif isinstance(node, ast.ImportFrom):
                src = self.resolve(pkg, node.level, node.module)
                if src.split(".")[0] != PKG:
                    continue
                self.todo.append((src, m))
                for a in node.names:
                    if a.name == "*":
                        if src in self.exports:
                            for nm in self.exports[src]:
                                self.need_name(src, nm, m)
                        continue
                    if src in self.exports or self.modpath(src + "." + a.name):
                        self.need_name(src, a.name, m)
            elif isinstance(node, ast.Call):
                fn = node.func
                name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
                if name != "import_module" or not node.args:
                    continue
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    s = arg.value
                    if s.startswith("."):
                        lvl = len(s) - len(s.lstrip("."))
                        s = self.resolve(pkg, lvl, s.lstrip(".") or None)
                    if s.startswith(PKG):
                        self.todo.append((s, m + " import_module"))
                    continue
                dyn = True
                if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
                    pre = arg.values[0].value
                    if pre.startswith("."):
                        lvl = len(pre) - len(pre.lstrip("."))
                        pre = self.resolve(pkg, lvl, None) + "." + pre.lstrip(".")
                    if pre.startswith(PKG + ".") and not pre.endswith("."):
                        d, stem = pre.rsplit(".", 1)
                        dd = os.path.join(self.root, *d.split("."))
                        if os.path.isdir(dd):
                            for fn2 in sorted(os.listdir(dd)):
                                if fn2.startswith(stem) and fn2.endswith(".py"):
                                    self.todo.append((d + "." + fn2[:-3], m + " fstring"))
                        continue
                if m not in MANUAL_EXTRA:
                    self.warnings.append(f"dynamic import_module in {m}:{node.lineno}")
        if dyn:
            # module names in lazy-export tables ("X": ".submodule") of dynamic importers
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                    continue
                s = node.value
                if not re.fullmatch(r"\.{0,3}[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", s):
                    continue
                if s.startswith("."):
                    lvl = len(s) - len(s.lstrip("."))
                    s = self.resolve(pkg, lvl, s.lstrip("."))
                if s.startswith(PKG + ".") and self.modpath(s):
                    self.todo.append((s, m + " strconst"))
        # flashinfer.a.b attribute chains
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            parts, n = [], node
            while isinstance(n, ast.Attribute):
                parts.append(n.attr)
                n = n.value
            if not (isinstance(n, ast.Name) and n.id == PKG):
                continue
            parts = [PKG] + parts[::-1]
            for i in range(len(parts), 0, -1):
                pre = ".".join(parts[:i])
                if self.modpath(pre):
                    self.todo.append((pre, m + " attr"))
                    if i < len(parts):
                        self.need_name(pre, parts[i], m + " attr")
                    break


# --------------------------------------------------------------------------- minimal __init__s
def _lazy_block(exports, pkgname, eager_sources=()):
    """Source of a `_LAZY` table and module __getattr__ resolving names of the original
    __init__ lazily.  Names whose module is missing raise AttributeError (so that
    getattr(mod, name, default) / hasattr still work)."""
    lines = ["import importlib as _importlib", "", "_LAZY = {"]
    for name in sorted(exports):
        mod, attr = exports[name]
        if mod in eager_sources:
            continue
        rel = mod[len(pkgname):]  # ".x.y"
        lines.append(f"    {name!r}: ({rel!r}, {attr!r}),")
    lines += ["}", "", '''
def __getattr__(name):
    entry = _LAZY.get(name)
    if entry is None:
        if not name.startswith("__"):
            try:
                value = _importlib.import_module(f"{__name__}.{name}")
            except ModuleNotFoundError as error:
                if error.name != f"{__name__}.{name}":
                    raise AttributeError(
                        f"module {__name__!r} attribute {name!r}: {error} "
                        "(not in this slimmed flashinfer wheel)"
                    ) from error
            else:
                return value
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    rel, attr = entry
    try:
        module = _importlib.import_module(rel, __name__)
        value = module if attr is None else getattr(module, attr)
    except ImportError as error:
        raise AttributeError(
            f"module {__name__!r} attribute {name!r} is not available in this slimmed "
            f"flashinfer wheel (decode/prefill only): {error}"
        ) from error
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
'''.strip("\n"), ""]
    return "\n".join(lines)


def root_init_source(exports, root_src):
    # The original's own lazy hook: _PRIMS_TS_LAZY_EXPORTS -> fused_moe (its
    # _COMPAT_SUBMODULES are covered by the submodule fallback of __getattr__).
    exports = dict(exports)
    m = re.search(r"_PRIMS_TS_LAZY_EXPORTS = frozenset\(\s*\{(.*?)\}", root_src, re.S)
    for name in re.findall(r'"(\w+)"', m.group(1)) if m else []:
        exports.setdefault(name, (PKG + ".fused_moe", name))
    return f'''"""FlashInfer package root, slimmed (slim.py): only decode / prefill and what they
import are in this wheel.  Every name the full package exports resolves lazily on
first attribute access; a name whose module was dropped raises AttributeError."""

from .version import __version__ as __version__
from .version import __git_commit__ as __git_commit__
from .version import __git_version__ as __git_version__  # backward compat

{_lazy_block(exports, PKG)}
'''


def jit_init_source(exports, jit_src):
    """Minimal flashinfer/jit/__init__.py: the lazy table first (so that modules imported
    below can `from flashinfer.jit import X` during this init), then the eager imports of
    JIT_EAGER_SOURCES exactly as the original writes them, then the original tail."""
    tree = ast.parse(jit_src)
    lines = jit_src.splitlines()
    eager, tail_start = [], None
    header_end = tree.body[0].end_lineno if isinstance(tree.body[0], ast.Expr) else 0
    for n in tree.body:
        if isinstance(n, ast.ImportFrom) and n.level:
            src = PyClosure.resolve("flashinfer.jit", n.level, n.module)
            mods = {src} | {src + "." + a.name for a in n.names}
            if mods & JIT_EAGER_SOURCES:
                eager.append("\n".join(lines[n.lineno - 1: n.end_lineno]))
        elif isinstance(n, (ast.Import, ast.ImportFrom, ast.Expr)):
            continue
        else:
            if tail_start is None:
                tail_start = n.lineno
    tail = "\n".join(lines[tail_start - 1:]) if tail_start else ""
    return "\n".join([
        "\n".join(lines[:header_end]),
        '"""Slimmed by slim.py: names of the original flashinfer.jit other than those of',
        'its core / env / attention / cubin_loader submodules resolve lazily."""',
        "",
        "import ctypes",
        "import functools",
        "import os",
        "",
        _lazy_block(exports, "flashinfer.jit", eager_sources=()),
        "# Re-export (eager, as in the original)",
        *eager,
        "",
        tail,
        "",
    ])


# --------------------------------------------------------------------------- header closure
INC_RE = re.compile(r'^\s*#\s*include\s*(?:([<"])([^>"]+)[>"]|(\w+)\s*\(\s*([\w./]+)\s*\))', re.M)


def header_closure(data_dir, roots, extra_names):
    J = lambda *p: os.path.join(data_dir, *p)
    # nvcc search order of cpp_ext.build_common_cflags: -I cccl..., then -isystem
    # include, csrc, cutlass/include, cutlass/tools/util/include, spdlog/include
    search = [J("cccl", "cub"), J("cccl", "libcudacxx", "include"), J("cccl", "thrust"),
              J("include"), J("csrc"), J("cutlass", "include"),
              J("cutlass", "tools", "util", "include"), J("spdlog", "include")]
    seen, todo, unresolved = set(), [], set()

    def add(name, curdir, quoted):
        cands = ([os.path.join(curdir, name)] if quoted and curdir else []) + \
                [os.path.join(d, name) for d in search]
        hits = [c for c in cands if os.path.isfile(c)]
        if not hits:
            unresolved.add(name)  # CUDA toolkit / system / tvm-ffi headers
        todo.extend(os.path.normpath(c) for c in hits)  # every candidate: conservative

    for r in roots:
        todo.append(os.path.normpath(J(r)))
    for n in extra_names:
        add(n, None, False)
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        with open(f, errors="replace") as fh:
            txt = fh.read()
        for m in INC_RE.finditer(txt):
            if m.group(2):
                add(m.group(2), os.path.dirname(f), m.group(1) == '"')
            else:  # e.g. #include CUDA_STD_HEADER(cstdint) -> <cuda/std/cstdint> or <cstdint>
                add(m.group(4), os.path.dirname(f), False)
                add("cuda/std/" + m.group(4), None, False)
    return {os.path.relpath(s, data_dir).replace(os.sep, "/") for s in seen}, unresolved


# --------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--trim-cccl", action="store_true", help="keep only the #include closure of data/cccl")
    ap.add_argument("--no-spdlog", action="store_true", help="drop data/spdlog (not #included by these kernels)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()

    src = zipfile.ZipFile(args.input)
    infos = [i for i in src.infolist() if not i.is_dir()]
    names = {i.filename for i in infos}
    record_name = next(n for n in names if n.endswith(".dist-info/RECORD"))
    distinfo = record_name.rsplit("/", 1)[0] + "/"

    with tempfile.TemporaryDirectory() as tmp:
        pyfiles = [i for i in infos if i.filename.startswith(PKG + "/") and i.filename.endswith(".py")]
        for i in pyfiles:
            src.extract(i, tmp)
        datafiles = [i for i in infos if i.filename.startswith(PKG + "/data/")
                     and not i.filename.endswith(".py")]
        for i in datafiles:
            src.extract(i, tmp)

        # 1. Python closure
        pc = PyClosure(tmp).run(START_MODULES)
        keep_py = {os.path.relpath(p, tmp).replace(os.sep, "/") for p in pc.seen.values()}
        kept_src = {}
        for f in keep_py:
            with open(os.path.join(tmp, f), encoding="utf-8") as fh:
                kept_src[f] = fh.read()
        replaced = {
            f"{PKG}/__init__.py": root_init_source(pc.exports[PKG], kept_src[f"{PKG}/__init__.py"]),
            f"{PKG}/jit/__init__.py": jit_init_source(pc.exports["flashinfer.jit"], kept_src[f"{PKG}/jit/__init__.py"]),
        }
        for f, s in replaced.items():
            compile(s, f, "exec")

        # 2. data/: csrc roots + #include closure
        data_dir = os.path.join(tmp, PKG, "data")
        roots = sorted(
            "csrc/" + f for f in os.listdir(os.path.join(data_dir, "csrc"))
            if f.startswith(CSRC_PREFIXES) and not any(x in f for x in CSRC_EXCLUDE)
            and os.path.isfile(os.path.join(data_dir, "csrc", f)))
        hdrs, unresolved = header_closure(data_dir, roots, EXTRA_HEADERS)

        def keep_data(rel):  # rel: path under flashinfer/data/
            if rel.startswith("cccl/"):
                return (rel in hdrs) if args.trim_cccl else True
            if rel.startswith("spdlog/"):
                return not args.no_spdlog and rel.startswith("spdlog/include/")
            return rel in hdrs

        # 3. other package files: py.typed, and data files a kept module names
        all_kept_text = "\n".join(kept_src.values())

        def keep(name):
            if name.startswith(distinfo):
                return True
            if not name.startswith(PKG + "/"):
                return False
            if name.startswith(PKG + "/data/"):
                return name[len(PKG) + 6:] in {"build_utils.py"} or (not name.endswith(".py") and keep_data(name[len(PKG) + 6:]))
            if name.endswith(".py"):
                return name in keep_py
            if name == PKG + "/py.typed":
                return True
            base = name.rsplit("/", 1)[1]
            pkgdir = name.rsplit("/", 1)[0] + "/"
            return any(k.startswith(pkgdir) for k in keep_py) and base in all_kept_text

        # 4. repack, RECORD recomputed
        tmp_out = args.output + ".tmp"
        records, kept, size_in = [], 0, 0
        with zipfile.ZipFile(tmp_out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as out:
            for info in infos:
                size_in += info.file_size
                if info.filename == record_name or not keep(info.filename):
                    continue
                data = replaced[info.filename].encode() if info.filename in replaced else src.read(info)
                zi = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                zi.external_attr = info.external_attr
                out.writestr(zi, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                records.append(f"{info.filename},sha256={digest},{len(data)}")
                kept += 1
            records.append(f"{record_name},,")
            out.writestr(record_name, "\n".join(records) + "\n", compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
        os.replace(tmp_out, args.output)

    n_py = sum(1 for r in records if r.endswith(".py") or ".py," in r)
    print(f"{args.output}: {kept} files kept of {len(infos)} ({n_py} .py, {len(pc.seen)} modules), "
          f"{os.path.getsize(args.output) / 2**20:.2f} MiB (input {os.path.getsize(args.input) / 2**20:.2f} MiB)")
    if pc.missing:
        print("imports not in the input wheel (already absent; guarded or off the decode/prefill path):")
        for m in sorted(pc.missing):
            print("   ", m)
    for w in pc.warnings:
        print("warning:", w)
    if args.verbose:
        print("lazy names used:", {k: sorted(v) for k, v in pc.lazy_names.items()})
        print("headers not in the wheel (toolkit/system/tvm-ffi):", sorted(unresolved))


if __name__ == "__main__":
    main()
