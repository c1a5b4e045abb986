#!/usr/bin/env python3
"""Finds CUDA runtime, cuBLAS, cuDNN and NCCL calls whose status is thrown away (docs/style.md habit 5).

    scripts/check-unchecked-calls.py [--root DIR] [PATH...]   PATHs (files or folders) default: the repo
    scripts/check-unchecked-calls.py --self-test              runs the checker on built-in snippets

It reads every .cc/.cu/.cuh/.h/.cpp/.hpp file under the PATHs (skipping build*/ and hidden folders),
blanks out comments and string/character literals, and looks at every call of a function named
cuda*/cublas*/cudnn*/nccl* (followed by a capital: cudaMalloc, cublasSgemm, ncclCommAbort...).
Types (names ending in _t), macros (capitals: CUDNN_...), member calls (x.cudaFoo()) and
declarations (cudaError_t cudaFoo(...)) are not calls of the library and are left alone.

A call's status is *used* when the call is an argument of something (a check macro such as
CHORUS_CUDA_CHECK, CHORUS_CUBLAS_CHECK, CHORUS_CUDNN_CHECK, CHORUS_NCCL_CHECK, BENCH_CUDA_CHECK, a
function, an `if (...)` condition), or is assigned, returned, compared or otherwise part of a
larger expression. It is *discarded* when the call is a whole expression statement, `cudaFoo(...);`,
with or without a `(void)` / `static_cast<void>(...)` in front. A discarded call is reported unless
  - the function returns no status (cudaGetErrorString, ncclGetErrorString, cudnnGetVersion, ...:
    NON_STATUS below), or
  - it is cudaGetLastError, whose only use as a statement is to clear the sticky error state, or
  - a comment `// unchecked: <reason>` is on one of the lines the call spans (for cleanup paths
    where throwing is wrong and there is nothing better to do). The reason is required.
A marker with no reason, and a marker on lines with no discarded call, are reported too, so the
markers stay true.

Output: one line per finding, `file:line: <call>: <why>`, then a summary line.
Exit status: 0 no findings, 1 findings, 2 usage error (or a failed --self-test).
Python 3 standard library only.
"""

import argparse
import os
import re
import sys

EXTENSIONS = (".cc", ".cu", ".cuh", ".h", ".cpp", ".hpp")
API_NAME = re.compile(r"^(?:cuda|cublas|cudnn|nccl)[A-Z]\w*$")

# Library functions that return something other than a status (a string, a version number), or
# nothing: there is no status to check.
NON_STATUS = {
    "cudaGetErrorName", "cudaGetErrorString",
    "cublasGetStatusName", "cublasGetStatusString", "cublasGetCudartVersion", "cublasXerbla",
    "cublasLtGetVersion", "cublasLtGetCudartVersion", "cublasLtGetStatusName", "cublasLtGetStatusString",
    "cudnnGetErrorString", "cudnnGetVersion", "cudnnGetCudartVersion", "cudnnGetMaxDeviceVersion",
    "cudnnGetLastErrorString",
    "ncclGetErrorString", "ncclGetLastError",
}
# Discarded on purpose by nature: cudaGetLastError's result is the error it clears.
DISCARD_OK = {"cudaGetLastError"}
# Structs and other non-function names spelled like functions (never called).
NOT_FUNCTIONS = {"cudaDeviceProp", "cudaPointerAttributes", "cudaExtent", "cudaPitchedPtr", "cudaPos",
                 "cudaMemcpy3DParms", "cudaLaunchConfig", "cudaLaunchAttribute", "cudaFuncAttributes",
                 "cudaChannelFormatDesc", "cudaResourceDesc", "cudaTextureDesc", "cudaIpcMemHandle",
                 "cudaIpcEventHandle", "cudaMemPoolProps", "cudaMemAccessDesc", "ncclConfig"}
# An identifier before the name that still leaves the call at the start of a statement (or makes
# its value used: return). Any other identifier there makes it a declaration.
STATEMENT_KEYWORDS = {"else", "do"}
USING_KEYWORDS = {"return", "co_return", "co_yield", "throw", "case", "sizeof", "decltype", "noexcept",
                  "alignof", "typeid", "co_await", "and", "or", "not", "not_eq"}
CONTROL = {"if", "for", "while", "switch"}
MARKER = re.compile(r"\bunchecked:(.*)")

TOKEN = re.compile(r"""
    (?P<ident>[A-Za-z_]\w*)
  | (?P<number>\.?\d(?:[\w.']|[eEpP][+-])*)
  | (?P<punct>::|->\*?|\.\*|<<=?|>>=?|<=>|[=!<>+\-*/%&|^]=|&&|\|\||\+\+|--|\#\#|\.\.\.|[^\s\w])
""", re.VERBOSE)


def strip_comments_and_literals(text):
    """Returns (code, comments): code is text with every comment and string/char literal replaced by
    spaces (newlines kept, so offsets and line numbers stay); comments maps a line number (1-based)
    to the text of the comments on it."""
    out = list(text)
    comments = {}
    n = len(text)
    i = 0
    line = 1

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    def note_comment(a, b, first_line):
        ln = first_line
        for part in text[a:b].split("\n"):
            comments[ln] = comments.get(ln, "") + " " + part
            ln += 1

    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            while j < n and j > 0 and text[j - 1] == "\\":  # a backslash continues a // comment
                k = text.find("\n", j + 1)
                j = n if k < 0 else k
            note_comment(i + 2, j, line)
            blank(i, j)
            line += text.count("\n", i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            note_comment(i + 2, max(i + 2, j - 2), line)
            blank(i, j)
            line += text.count("\n", i, j)
            i = j
        elif c == '"' or c == "'":
            # A quote after a word character: a raw-string/encoding prefix (R", u8", L'), or a digit
            # separator (1'000).
            w = i
            while w > 0 and (text[w - 1].isalnum() or text[w - 1] == "_"):
                w -= 1
            word = text[w:i]
            if c == "'" and word and word[0].isdigit():
                i += 1
                continue
            if c == '"' and word.endswith("R") and word in ("R", "u8R", "uR", "UR", "LR"):
                open_paren = text.find("(", i)
                delim = text[i + 1:open_paren]
                close = text.find(")" + delim + '"', open_paren)
                j = n if close < 0 else close + len(delim) + 2
            else:
                j = i + 1
                while j < n and text[j] != c and text[j] != "\n":
                    j += 2 if text[j] == "\\" else 1
                j = min(j + 1, n)
            blank(i + 1, j - 1 if j - 1 > i else j)  # keep the quotes: a literal is still a token
            line += text.count("\n", i, j)
            i = j
        else:
            i += 1
    return "".join(out), comments


def tokenize(code):
    toks = []
    for m in TOKEN.finditer(code):
        if m.group() == "\\":
            continue  # a macro's line continuation: the body reads as one line
        toks.append((m.lastgroup, m.group(), m.start()))
    return toks


def line_of(line_starts, offset):
    lo, hi = 0, len(line_starts) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if line_starts[mid] <= offset:
            lo = mid
        else:
            hi = mid - 1
    return lo + 1


def matching_close(toks, i):
    """toks[i] is '(': the index of its ')' (or the last token)."""
    depth = 0
    for j in range(i, len(toks)):
        t = toks[j][1]
        if t in ("(", "[", "{"):
            depth += 1
        elif t in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                return j
    return len(toks) - 1


def matching_open(toks, j):
    """toks[j] is ')': the index of its '(' (or 0)."""
    depth = 0
    for i in range(j, -1, -1):
        t = toks[i][1]
        if t in (")", "]", "}"):
            depth += 1
        elif t in ("(", "[", "{"):
            depth -= 1
            if depth == 0:
                return i
    return 0


def starts_statement(toks, p):
    """Whether a statement can begin right after toks[p] (p < 0: the start of the file)."""
    if p < 0:
        return True
    kind, t, _ = toks[p]
    if t in (";", "{", "}", ":"):
        return True
    if kind == "ident" and t in STATEMENT_KEYWORDS:
        return True
    if t == ")":  # the header of if/for/while/switch, then the statement
        o = matching_open(toks, p)
        return o > 0 and toks[o - 1][1] in CONTROL
    return False


# Conditional and other directive lines (not #define, whose body may hold calls): blanked before
# tokenizing, so that `#ifdef X` does not read as a type name `X` in front of the next line's call
# (which then passed as a declaration, unchecked).
DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(?:if|ifdef|ifndef|elif|else|endif|include|pragma|undef|error|warning|line)\b[^\n]*",
                       re.MULTILINE)


def check_text(path, text):
    """Returns (findings, calls): findings are (line, call text, why); calls counts the library
    calls seen."""
    code, comments = strip_comments_and_literals(text)
    code = DIRECTIVE.sub(lambda m: " " * len(m.group()), code)
    toks = tokenize(code)
    line_starts = [0] + [m.end() for m in re.finditer("\n", code)]
    markers = {}  # line -> reason
    findings = []
    for ln, body in comments.items():
        m = MARKER.search(body)
        if m:
            markers[ln] = m.group(1).strip()
    used_markers = set()
    calls = 0
    for i, (kind, name, off) in enumerate(toks):
        if kind != "ident" or not API_NAME.match(name) or name.endswith("_t") or name in NOT_FUNCTIONS:
            continue
        if i + 1 >= len(toks) or toks[i + 1][1] != "(":
            continue  # a function named, not called (a template argument, &cudaFree)
        # Skip a qualifier in front: ::cudaFoo, ns::cudaFoo.
        p = i - 1
        while p >= 0 and toks[p][1] == "::":
            p -= 1
            if p >= 0 and toks[p][0] == "ident":
                p -= 1
        if p >= 0 and toks[p][1] in (".", "->"):
            continue  # a member function, not the library's
        if p >= 0 and toks[p][0] == "ident" and toks[p][1] not in STATEMENT_KEYWORDS | USING_KEYWORDS:
            continue  # a declaration: cudaError_t cudaMalloc(...), or a macro's name in #define
        if p >= 0 and toks[p][1] == "#":
            continue
        close = matching_close(toks, i + 1)
        calls += 1
        if name in NON_STATUS:
            continue
        # Strip a cast to void around the call.
        end = close
        cast = False
        if p >= 2 and toks[p][1] == ")" and toks[p - 1][1] == "void" and toks[p - 2][1] == "(":
            p -= 3
            cast = True
        elif (p >= 4 and toks[p][1] == "(" and toks[p - 1][1] == ">" and toks[p - 2][1] == "void"
              and toks[p - 3][1] == "<" and toks[p - 4][1] == "static_cast" and end + 1 < len(toks)
              and toks[end + 1][1] == ")"):
            p -= 5
            end += 1
            cast = True
        followed_by_semicolon = end + 1 < len(toks) and toks[end + 1][1] == ";"
        if not (starts_statement(toks, p) and followed_by_semicolon):
            continue  # the status is used
        if name in DISCARD_OK:
            continue
        first = line_of(line_starts, off)
        last = line_of(line_starts, toks[close][2])
        text_of_call = " ".join(text[off:toks[close][2] + 1].split())
        if len(text_of_call) > 110:
            text_of_call = text_of_call[:107] + "..."
        marked = [ln for ln in range(first, last + 1) if ln in markers]
        if marked:
            used_markers.update(marked)
            if not any(markers[ln] for ln in marked):
                findings.append((first, text_of_call, "'// unchecked:' marker without a reason"))
            continue
        why = "status discarded" + (" (cast to void)" if cast else "")
        findings.append((first, text_of_call, why + ": wrap it in the check macro, use the result, or mark the "
                         "line '// unchecked: <reason>'"))
    for ln in sorted(set(markers) - used_markers):
        findings.append((ln, "// unchecked:" + (" " + markers[ln] if markers[ln] else ""),
                         "marker on no discarded library call: remove it"))
    findings.sort()
    return findings, calls


def source_files(paths):
    for path in paths:
        if os.path.isfile(path):
            yield path
            continue
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not d.startswith("build"))
            for f in sorted(filenames):
                if f.endswith(EXTENSIONS):
                    yield os.path.join(dirpath, f)


SELF_TEST = [
    # (snippet, number of findings expected)
    ("void f() { CHORUS_CUDA_CHECK(cudaMalloc(&p, 4)); }", 0),
    ("void f() { cudaMalloc(&p, 4); }", 1),
    ("void f() { (void)cudaFree(p); }", 1),
    ("void f() { static_cast<void>(cudaFree(p)); }", 1),
    ("void f() { (void)cudaFree(p);  // unchecked: destructor, nothing to report to\n}", 0),
    ("void f() { (void)cudaFree(p);  // unchecked:\n}", 1),
    ("void f() {\n  cudaMemcpyAsync(a, b,\n      n, k, s);  // unchecked: test of a multi-line call\n}", 0),
    ("void f() { if (cudaSetDevice(0) != cudaSuccess) (void)cudaGetLastError(); }", 0),
    ("void f() { if (x) cudaStreamDestroy(s); }", 1),
    # A call right after a directive line: found (it once read as a declaration of type `A`).
    ("void f() {\n  g();\n#ifdef A\n  cudaProfilerStop();\n#endif\n}", 1),
    ("void f() {\n#if defined(A)\n  cudaFree(p);  // unchecked: teardown\n#endif\n}", 0),
    ("#include <cuda_runtime.h>\nvoid f() { CHORUS_CUDA_CHECK(cudaFree(p)); }", 0),
    ("void f() { for (auto c : cs) ncclCommAbort(c); }", 1),
    ("void f() { while (x) cublasDestroy(h); else cudnnDestroy(h); }", 2),
    ("cudaError_t f() { return cudaDeviceSynchronize(); }", 0),
    ("void f() { cudaError_t e = cudaDeviceSynchronize(); auto r = ::ncclGroupEnd(); }", 0),
    ("void f() { x = cudaStreamQuery(s) == cudaSuccess; g(cudnnCreate(&h)); }", 0),
    ("void f() { auto l = [&] { cublasSgemm(h, a, b); }; }", 1),
    ("void f() { auto l = [&] { return cublasSgemm(h, a, b); }; }", 0),
    ("cudaError_t cudaMalloc(void** p, size_t n);", 0),
    ("void f() { obj.cudaMalloc(&p, 4); ptr->ncclSend(x); }", 0),
    ("void f() { std::function<ncclResult_t(ncclComm_t, cudaStream_t)> g; cudaDeviceProp prop{}; }", 0),
    ("void f() { puts(\"cudaFree(p);\"); /* cudaFree(p); */ }\n// cudaFree(p);", 0),
    ("void f() { puts(R\"x(cudaFree(p);)x\"); int n = 1'000; cudaFree(p); }", 1),
    ("void f() { cudaGetErrorString(e); cudaGetLastError(); cudaPeekAtLastError(); }", 1),
    ("void f() { int y = 0;  // unchecked: stale\n}", 1),
    ("template <typename T, cudnnStatus_t (*Create)(T*)> class D {};", 0),
    ("void f() { switch (k) { case 0: cudaFree(p); break; default: break; } }", 1),
    ("#define FREE_ALL(p) \\\n  do { \\\n    cudaFree(p); \\\n  } while (0)\n", 1),
    ("#include <cuda_runtime.h>\nint n = CUDNN_VERSION; cudaStream_t s = cudaStreamPerThread;", 0),
]


def self_test():
    failed = 0
    for snippet, expected in SELF_TEST:
        findings, _ = check_text("<self-test>", snippet)
        if len(findings) != expected:
            failed += 1
            print("self-test FAILED: expected %d finding(s), got %d: %r" % (expected, len(findings), snippet))
            for f in findings:
                print("   ", f)
    print("self-test: %d of %d cases passed" % (len(SELF_TEST) - failed, len(SELF_TEST)))
    return 2 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        help="repository root; findings are printed relative to it (default: this script's repo)")
    parser.add_argument("--self-test", action="store_true", help="check the checker on built-in snippets")
    parser.add_argument("paths", nargs="*", help="files or folders (default: the whole repository)")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    root = os.path.abspath(args.root)
    paths = [os.path.join(root, p) if not os.path.isabs(p) else p for p in args.paths] or [root]
    for p in paths:
        if not os.path.exists(p):
            print("check-unchecked-calls: no such file or folder: %s" % p, file=sys.stderr)
            return 2
    total_findings = total_calls = files = 0
    for path in source_files(paths):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        files += 1
        findings, calls = check_text(path, text)
        total_calls += calls
        rel = os.path.relpath(path, root)
        for line, call, why in findings:
            print("%s:%d: %s: %s" % (rel, line, call, why))
        total_findings += len(findings)
    print("check-unchecked-calls: %d finding(s); %d CUDA/cuBLAS/cuDNN/NCCL call(s) in %d file(s) looked at"
          % (total_findings, total_calls, files))
    return 1 if total_findings else 0


if __name__ == "__main__":
    sys.exit(main())
