# Writes the PNG and JPEG files of tests/data/io/{png,jpeg,image_codec_hostile}_test.cc and what
# TensorFlow decodes from each: `python image_cases.py <outdir> png|jpeg|hostile`.
#
# <outdir>/manifest.txt, one case a line:
#   <op> <input file> <channels> <dtype> <opts> <status> <h> <w> <c> <weighted_hash of TF's output bytes>
# op: decode_png | decode_jpeg | decode_image; dtype: uint8 | uint16 | float32; opts: "-" or
# key=value,... (ratio, fancy, dct, recover, fraction); status: ok | error. The output bytes are the
# tensor's, native order (little-endian), so chorus hashes the same bytes.
# PNG files TF cannot write (palette, tRNS, 1/2/4-bit, Adam7) are written here by a small PNG
# writer; TensorFlow is the oracle of every decode.
import os
import struct
import sys
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import tensorflow as tf
from PIL import Image

OUT, KIND = sys.argv[1], sys.argv[2]
LINES = []


def weighted_hash(a):
    # sum_i b_i * (2i + 1) mod 2^64 over the array's bytes, xor the byte count times a constant:
    # position-weighted, vectorised here and a loop in image_test_util.h.
    b = np.frombuffer(a.tobytes(), np.uint8).astype(np.uint64)
    w = np.arange(1, 2 * len(b), 2, dtype=np.uint64)
    with np.errstate(over="ignore"):
        s = int(np.sum(b * w, dtype=np.uint64))
    return s ^ ((len(b) * 0x9E3779B97F4A7C15) & 0xffffffffffffffff)


def record(op, name, channels, dtype, opts, fn):
    try:
        t = fn().numpy()
        LINES.append(f"{op} {name} {channels} {dtype} {opts} ok {t.shape[0]} {t.shape[1]} {t.shape[2]} {weighted_hash(t):016x}")
    except (tf.errors.InvalidArgumentError, tf.errors.ResourceExhaustedError):
        LINES.append(f"{op} {name} {channels} {dtype} {opts} error 0 0 0 0")


def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def pack_rows(a, bits):
    # a: [h, w, c] of samples; returns each row's bytes (packed for bits < 8, big-endian for 16).
    rows = []
    for r in a:
        flat = r.reshape(-1)
        if bits == 16:
            rows.append(flat.astype(">u2").tobytes())
        elif bits == 8:
            rows.append(flat.astype(np.uint8).tobytes())
        else:
            per = 8 // bits
            out = bytearray((len(flat) * bits + 7) // 8)
            for i, v in enumerate(flat):
                out[i // per] |= int(v) << (8 - bits * (i % per + 1))
            rows.append(bytes(out))
    return rows


def write_png(name, a, bits, color_type, palette=None, trns=None, interlace=False):
    h, w = a.shape[:2]
    raw = b""
    if interlace:
        for x0, y0, dx, dy in ADAM7:
            sub = a[y0::dy, x0::dx]
            if sub.shape[0] and sub.shape[1]:
                raw += b"".join(b"\x00" + r for r in pack_rows(sub, bits))
    else:
        raw = b"".join(b"\x00" + r for r in pack_rows(a, bits))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, bits, color_type, 0, 0, int(interlace)))
    if palette is not None:
        png += chunk(b"PLTE", bytes(np.asarray(palette, np.uint8).reshape(-1)))
    if trns is not None:
        png += chunk(b"tRNS", trns)
    png += chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    open(os.path.join(OUT, name), "wb").write(png)
    return png


rng = np.random.default_rng(44)


def smooth(h, w, c, hi=255):
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 7 + y * 3 + 40 * k) % (hi + 1) for k in range(c)], -1)
    noise = rng.integers(0, max(2, hi // 16), (h, w, c))
    return np.clip(base + noise, 0, hi)


def png_cases():
    files = []
    for c in (1, 2, 3, 4):
        for dt, hi in ((np.uint8, 255), (np.uint16, 65535)):
            name = f"tf_c{c}_{np.dtype(dt).itemsize * 8}.png"
            open(os.path.join(OUT, name), "wb").write(tf.io.encode_png(smooth(13, 17, c, hi).astype(dt)).numpy())
            files.append(name)
    pal = rng.integers(0, 256, (16, 3))
    idx = rng.integers(0, 16, (11, 9, 1))
    write_png("palette8.png", idx, 8, 3, pal); files.append("palette8.png")
    write_png("palette4_trns.png", idx, 4, 3, pal, trns=bytes(range(0, 160, 16))); files.append("palette4_trns.png")
    write_png("palette1.png", idx % 2, 1, 3, pal[:2]); files.append("palette1.png")
    for bits in (1, 2, 4):
        write_png(f"gray{bits}.png", rng.integers(0, 1 << bits, (10, 13, 1)), bits, 0); files.append(f"gray{bits}.png")
    write_png("gray8_trns.png", smooth(9, 10, 1), 8, 0, trns=struct.pack(">H", 40)); files.append("gray8_trns.png")
    rgb = smooth(9, 10, 3); rgb[2, 3] = (10, 20, 30)
    write_png("rgb8_trns.png", rgb, 8, 2, trns=struct.pack(">HHH", 10, 20, 30)); files.append("rgb8_trns.png")
    write_png("rgb16_trns.png", smooth(6, 7, 3, 65535), 16, 2, trns=struct.pack(">HHH", 1, 2, 3)); files.append("rgb16_trns.png")
    write_png("adam7_rgb8.png", smooth(13, 11, 3), 8, 2, interlace=True); files.append("adam7_rgb8.png")
    write_png("adam7_gray16.png", smooth(9, 14, 1, 65535), 16, 0, interlace=True); files.append("adam7_gray16.png")
    write_png("adam7_ga8.png", smooth(5, 3, 2), 8, 4, interlace=True); files.append("adam7_ga8.png")
    write_png("adam7_palette2_trns.png", rng.integers(0, 4, (10, 10, 1)), 2, 3, pal[:4], trns=b"\x00\x80", interlace=True)
    files.append("adam7_palette2_trns.png")
    write_png("one_pixel.png", np.array([[[200, 100, 50, 25]]]), 8, 6); files.append("one_pixel.png")
    for name in files:
        data = open(os.path.join(OUT, name), "rb").read()
        for ch in (0, 1, 3, 4):
            for dt in ("uint8", "uint16"):
                record("decode_png", name, ch, dt, "-", lambda: tf.io.decode_png(data, channels=ch, dtype=getattr(tf, dt)))
        for dt in ("uint8", "uint16", "float32"):
            record("decode_image", name, 0, dt, "-", lambda: tf.io.decode_image(data, dtype=getattr(tf, dt)))


def jpeg_cases():
    files = []
    img = smooth(37, 23, 3).astype(np.uint8)
    for name, kw in (("baseline420.jpg", {}), ("baseline444.jpg", dict(chroma_downsampling=False)),
                     ("progressive420.jpg", dict(progressive=True)), ("q50.jpg", dict(quality=50)),
                     ("progressive444.jpg", dict(progressive=True, chroma_downsampling=False))):
        open(os.path.join(OUT, name), "wb").write(tf.io.encode_jpeg(img, quality=kw.pop("quality", 90), **kw).numpy())
        files.append(name)
    open(os.path.join(OUT, "gray.jpg"), "wb").write(tf.io.encode_jpeg(smooth(20, 31, 1).astype(np.uint8)).numpy())
    files.append("gray.jpg")
    big = smooth(64, 80, 3).astype(np.uint8)
    Image.fromarray(big).save(os.path.join(OUT, "pil422.jpg"), quality=85, subsampling=1)
    files.append("pil422.jpg")
    Image.fromarray(big).save(os.path.join(OUT, "pil_restart.jpg"), quality=85, restart_marker_rows=1)
    files.append("pil_restart.jpg")
    Image.fromarray(big).convert("CMYK").save(os.path.join(OUT, "cmyk.jpg"), quality=90)
    files.append("cmyk.jpg")
    Image.fromarray(big).save(os.path.join(OUT, "pil_progressive.jpg"), quality=75, progressive=True, subsampling=2)
    files.append("pil_progressive.jpg")
    opts = [("-", {}), ("dct=INTEGER_ACCURATE", dict(dct_method="INTEGER_ACCURATE")), ("fancy=0", dict(fancy_upscaling=False)),
            ("ratio=2", dict(ratio=2)), ("ratio=4", dict(ratio=4)), ("ratio=8", dict(ratio=8)),
            ("ratio=2,fancy=0,dct=INTEGER_ACCURATE", dict(ratio=2, fancy_upscaling=False, dct_method="INTEGER_ACCURATE"))]
    for name in files:
        data = open(os.path.join(OUT, name), "rb").read()
        for ch in (0, 1, 3):
            for o, kw in opts:
                record("decode_jpeg", name, ch, "uint8", o, lambda: tf.io.decode_jpeg(data, channels=ch, **kw))
        for dt in ("uint8", "uint16", "float32"):
            record("decode_image", name, 0, dt, "-", lambda: tf.io.decode_image(data, dtype=getattr(tf, dt)))


def hostile_cases():
    # Every truncation and every byte flip (xor 0x55) of a small PNG and a small JPEG (baseline and
    # progressive): TF's outcome for each, which chorus must reproduce (pixels, or an error).
    png = write_png("small.png", smooth(5, 6, 3), 8, 2)
    png_i = write_png("small_adam7.png", smooth(5, 6, 4), 8, 6, interlace=True)
    img = smooth(16, 24, 3).astype(np.uint8)
    jpg = tf.io.encode_jpeg(img, quality=80).numpy()
    jpg_p = tf.io.encode_jpeg(img, quality=80, progressive=True).numpy()
    open(os.path.join(OUT, "small.jpg"), "wb").write(jpg)
    open(os.path.join(OUT, "small_progressive.jpg"), "wb").write(jpg_p)
    # try_recover_truncated only for the baseline file's cuts after its SOS header: TF 2.21's source
    # manager feeds its fake EOI again whenever libjpeg reads past it (it compares the read pointer
    # with the start of its 2-byte EOI buffer), so a cut inside the header, or anywhere in a
    # progressive file, can loop forever (b"\xff\xd8\xff" with try_recover_truncated=True never
    # returns). chorus feeds it once and then fails (DataLossError); the C++ test checks those end.
    def last_sos_end(d):
        at = d.rfind(b"\xff\xda")
        return at + 2 + (d[at + 2] << 8 | d[at + 3])

    for base, data, op in (("small.png", png, "png"), ("small_adam7.png", png_i, "png"), ("small.jpg", jpg, "jpeg"),
                           ("small_progressive.jpg", jpg_p, "jpeg")):
        variants = [(f"{base}.cut{n}", data[:n]) for n in range(1, len(data))]
        variants += [(f"{base}.flip{i}", data[:i] + bytes([data[i] ^ 0x55]) + data[i + 1:]) for i in range(len(data))]
        for name, v in variants:
            open(os.path.join(OUT, name), "wb").write(v)
            if op == "png":
                record("decode_png", name, 0, "uint8", "-", lambda: tf.io.decode_png(v))
            else:
                record("decode_jpeg", name, 0, "uint8", "-", lambda: tf.io.decode_jpeg(v))
                if ".cut" in name:
                    record("decode_jpeg", name, 0, "uint8", "fraction=0.5", lambda: tf.io.decode_jpeg(v, acceptable_fraction=0.5))
                    if base == "small.jpg" and len(v) > last_sos_end(data):
                        record("decode_jpeg", name, 0, "uint8", "recover=1",
                               lambda: tf.io.decode_jpeg(v, try_recover_truncated=True))


{"png": png_cases, "jpeg": jpeg_cases, "hostile": hostile_cases}[KIND]()
open(os.path.join(OUT, "manifest.txt"), "w").write("\n".join(LINES) + "\n")
print(f"{KIND}: {len(LINES)} cases")
