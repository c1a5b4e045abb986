# TensorFlow 2.21 side of tests/data/io/{text_line,csv}_test.cc: writes text and CSV files (plain,
# GZIP, ZLIB) into argv[1], reads each with tf.data.TextLineDataset / experimental.CsvDataset, and
# writes what TF returned to argv[1]/tf_text.txt and tf_csv.txt, one token line per element:
#   CASE <name> <file> <compression or -> [CSV options...]
#   L <hex>                   a text line
#   R <tok> <tok> ...         a CSV record: i:<int>, f:<float32 bits>, d:<float64 bits>, f:nan, d:nan, s:<hex>
#   E <error class>           an error from next() (the iterator goes on, as TF's does)
#   END
import gzip, os, random, struct, sys, zlib
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf

out_dir = sys.argv[1]


def write(name, data, comp):
    path = os.path.join(out_dir, name)
    if comp == "GZIP":
        data = gzip.compress(data)
    elif comp == "ZLIB":
        data = zlib.compress(data)
    with open(path, "wb") as f:
        f.write(data)
    return path


def drain(it, emit):
    while True:
        try:
            e = next(it)
        except StopIteration:
            break
        except tf.errors.OpError as ex:
            emit("E " + type(ex).__name__)
            continue
        emit(e)


# ---- text lines ----------------------------------------------------------------------------------
rng = random.Random(44)
text_cases = {
    "nl": b"a\nb\n", "crlf": b"a\r\nb\r\n", "cr": b"a\rb\rc", "nolast": b"a\nb", "empty_lines": b"\n\na\n\n",
    "empty": b"", "nul": b"a\x00b\n\x00\n", "mid_cr": b"x\ry\nz\r\r\n", "only_cr": b"\r", "trail_cr": b"a\n\r",
    "crcr": b"\r\r\n\r\n", "just_nl": b"\n", "utf8": "héllo\nwörld\n".encode(),
    "random": bytes(rng.choice(b"ab \n\r\x00\xff,") for _ in range(200000)),
    "long": b"x" * 300000 + b"\n" + b"y" * 70000,
}
with open(os.path.join(out_dir, "tf_text.txt"), "w") as out:
    for name, data in text_cases.items():
        for comp in ("", "GZIP", "ZLIB"):
            fname = "t_%s.%s" % (name, comp or "txt")
            write(fname, data, comp)
            out.write("CASE %s %s %s\n" % (name, fname, comp or "-"))
            drain(iter(tf.data.TextLineDataset(os.path.join(out_dir, fname), compression_type=comp)),
                  lambda e: out.write(e + "\n" if isinstance(e, str) else "L " + e.numpy().hex() + "\n"))
            out.write("END\n")
    # several files, and a GZIP file of two members (cat a.gz b.gz)
    with open(os.path.join(out_dir, "t_two_members.gz"), "wb") as f:
        f.write(gzip.compress(b"one\ntwo") + gzip.compress(b"\nthree\n"))
    out.write("CASE two_members t_two_members.gz GZIP\n")
    drain(iter(tf.data.TextLineDataset(os.path.join(out_dir, "t_two_members.gz"), compression_type="GZIP")),
          lambda e: out.write(e + "\n" if isinstance(e, str) else "L " + e.numpy().hex() + "\n"))
    out.write("END\n")

# ---- CSV -------------------------------------------------------------------------------------------
KINDS = {"i32": tf.int32, "i64": tf.int64, "f32": tf.float32, "f64": tf.float64, "str": tf.string}


def tok(kind, v):
    v = v.numpy()
    if kind in ("i32", "i64"):
        return "i:%d" % int(v)
    if kind == "str":
        return "s:" + v.hex()
    if v != v:
        return kind[0] + ":nan"
    return kind[0] + ":" + (struct.pack("<f", v) if kind == "f32" else struct.pack("<d", v)).hex()


csv_cases = []


def case(name, data, cols, comp="", **kw):
    csv_cases.append((name, data, cols, comp, kw))


def c(kind, default=None):
    return (kind, default)


S, I = c("str"), c("i32")
case("basic", b"a,b\nc,d\n", [S, S])
case("crlf", b"a,b\r\nc,d\r\n", [S, S])
case("cr", b"a,b\rc,d", [S, S])
case("emptyline", b"a,b\n\nc,d\n", [S, S])
case("emptyline_default", b"a\n\nc\n", [c("str", "x")])
case("quoted", b'"a,b","c""d"\n"e\nf",g\n"h\r\ni",""\n', [S, c("str", "dd")])
case("quoted_cr", b'"a"\r\n"b"\r', [S])
case("badquote", b'"a"x"y",b\nc,d\n', [S, S])
case("badquote_eof", b'"a"x,b\nc,d\n', [S, S])
case("unquoted_quote", b'a"b,c\nc,d\n', [S, S])
case("no_closing_quote", b'a,"bc\nd,e\n', [S, S])
case("no_quote_delim", b'"a,b",c\n', [S, S, S], use_quote_delim=False)
case("field_counts", b"a\nb,c\na,b,c\nd,e\n", [S, S])
case("required", b",b\n1,\n", [S, S])
case("na_value", b'NA,b\n"NA",""\n', [c("str", "dflt"), c("str", "e")], na_value="NA")
case("header", b"h1,h2\n1,2\n", [I, I], header=True)
case("header_quoted", b'"h\n1",h2\n1,2\n', [I, I], header=True)
case("header_empty", b"", [I], header=True)
case("header_only", b"h\n", [I], header=True)
case("empty", b"", [I])
case("select", b"1,2,3,4\n5,6\n1,2,3,4,5\n", [I, I], select_cols=[1, 3])
case("select_bad_unselected", b"1,zz,3\n1,a\"b,3\n", [I, I], select_cols=[0, 2])
case("exclude", b"1,2,3\n4,5,6,7\n", [I, I], exclude_cols=[1])
case("delim", b"1;2\n3;\"4;5\"\n", [I, S], field_delim=";")
case("tab_delim", b"1\t 2 \n", [I, I], field_delim="\t")
ints = [b"0", b"-0", b"+5", b" 7 ", b"\t8\t", b"2147483647", b"2147483648", b"-2147483648", b"-2147483649", b"0x10",
        b"1.0", b"1e3", b"007", b"- 1", b"12a", b"\x0b9\x0c", b"+-1", b" "]
case("int32", b"\n".join(ints) + b"\n", [I])
case("int64", b"9223372036854775807\n9223372036854775808\n-9223372036854775808\n-9223372036854775809\n 42 \n",
     [c("i64")])
floats = [b"1.5", b" 1.5 ", b"nan", b"NaN", b"-nan", b"inf", b"-inf", b"+inf", b"INF", b"Infinity", b"1e39", b"-1e39",
          b"1e-50", b"1e-40", b"0x10", b"-0x1A", b"0x1p3", b"0x", b"1.", b".5", b".", b"1e", b"1e+", b"+1", b"+.5",
          b"1_0", b"1e400", b"0.1234567890123456789012345678901", b"3.4028235e38", b"3.4028236e38",
          b"1.17549435e-38", b"0x1FFFFFFFFFFFFFFFFF", b"- 1", b"1 e5", b"\x00", b"1\x00", b"nan(1)", b"0X10", b"1E5",
          b"0x1.8", b"1.00000005960464477550", b"infinit", b"inf1", b"0x-1", b"nan(a-b)", b"-0", b"4.9e-324"]
case("float32", b"\n".join(floats) + b"\n", [c("f32")])
case("float64", b"\n".join(floats) + b"\n", [c("f64", "-1")])


def random_csv(seed, n):
    r = random.Random(seed)
    pools = [
        [b"12", b" -7 ", b"+3", b"2147483648", b"", b"x", b"0"],
        [b"1.5", b"nan", b"-inf", b"1e39", b"0x1p-3", b"", b"abc", b"1e-45", b"  2.5e3", b"NA"],
        [b"plain", b"", b'"q,uo""te"', b'"multi\nline"', b'"cr\r\nlf"', b'bad"quote', b'"unclosed"x', b"NA"],
        [b"9223372036854775807", b"-1", b"", b"1e3"],
        [b"0.1", b"", b"-0", b"1e308", b"1e309"],
    ]
    rows = []
    for _ in range(n):
        k = r.choice([5] * 12 + [4, 6])
        fields = [r.choice(pools[i % 5]) for i in range(k)]
        rows.append(b",".join(fields) + r.choice([b"\n", b"\r\n", b"\r"]))
    return b"".join(rows)


rand_cols = [c("i32"), c("f32", "0.5"), c("str", ""), c("i64", "-5"), c("f64")]
case("random", random_csv(1, 600), rand_cols, na_value="NA")
case("random_gzip", random_csv(2, 600), rand_cols, comp="GZIP", na_value="NA")
case("random_zlib", random_csv(3, 600), rand_cols, comp="ZLIB")
case("random_select", random_csv(4, 600), [c("f32", "0.5"), c("f64")], select_cols=[1, 4])
case("random_header", random_csv(5, 600), rand_cols, comp="GZIP", header=True)

with open(os.path.join(out_dir, "tf_csv.txt"), "w") as out:
    for name, data, cols, comp, kw in csv_cases:
        fname = "c_%s.csv%s" % (name, {"": "", "GZIP": ".gz", "ZLIB": ".z"}[comp])
        write(fname, data, comp)
        value = lambda k, d: int(d) if k[0] == "i" else float(d) if k[0] == "f" else d
        defaults = [KINDS[k] if d is None else tf.constant([value(k, d)], KINDS[k]) for k, d in cols]
        colspec = ",".join(k if d is None else k + "=" + d.encode().hex() for k, d in cols)
        out.write("CASE %s %s %s %d %s %d %s %s %s %s\n" % (
            name, fname, comp or "-", kw.get("header", False), kw.get("field_delim", ",").encode().hex(),
            kw.get("use_quote_delim", True), "n" + kw.get("na_value", "").encode().hex(),
            "l" + ":".join(map(str, kw.get("select_cols", []))), "l" + ":".join(map(str, kw.get("exclude_cols", []))),
            colspec))
        ds = tf.data.experimental.CsvDataset(os.path.join(out_dir, fname), defaults, compression_type=comp, **kw)
        kinds = [k for k, _ in cols]
        drain(iter(ds), lambda e: out.write(e + "\n" if isinstance(e, str) else
                                            "R " + " ".join(tok(k, v) for k, v in zip(kinds, e)) + "\n"))
        out.write("END\n")
print("ok")
