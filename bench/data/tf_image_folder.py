"""The TensorFlow yardstick of bench_data (bench/data/data_bench.cc).

  python tf_image_folder.py jpeg SRC DST QUALITY   # every SRC/<class>/<name>.png as DST/<class>/<name>.jpg
  python tf_image_folder.py time DIR THREADS BATCH SIZE
      # tf.keras.utils.image_dataset_from_directory(DIR, batch_size=BATCH, image_size=(SIZE, SIZE),
      # shuffle=False) on a private thread pool of THREADS threads (its map is AUTOTUNE, so at most
      # THREADS calls at once), intra-op and inter-op parallelism THREADS: one warm-up pass over
      # 4 batches, then one timed pass over every batch. Prints
      # "RESULT images_per_s=<n> seconds=<s> images=<count> cpu_ms_per_image=<ms>" (the process's
      # CPU time, all threads, over the timed pass, per image).
"""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def jpeg(src, dst, quality):
    import tensorflow as tf
    for cls in sorted(os.listdir(src)):
        os.makedirs(os.path.join(dst, cls), exist_ok=True)
        for name in sorted(os.listdir(os.path.join(src, cls))):
            img = tf.io.decode_png(tf.io.read_file(os.path.join(src, cls, name)), channels=3)
            out = os.path.join(dst, cls, name[: -len(".png")] + ".jpg")
            tf.io.write_file(out, tf.io.encode_jpeg(img, quality=quality))


def timed(directory, threads, batch, size):
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    ds = tf.keras.utils.image_dataset_from_directory(
        directory, batch_size=batch, image_size=(size, size), shuffle=False, verbose=False)
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    ds = ds.with_options(options)
    for _ in ds.take(4):
        pass
    count = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    for images, _ in ds:
        count += int(images.shape[0])
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    print(f"RESULT images_per_s={count / seconds:.3f} seconds={seconds:.4f} images={count} "
          f"cpu_ms_per_image={1000 * cpu / count:.4f}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "jpeg":
        jpeg(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif sys.argv[1] == "time":
        timed(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit(f"unknown mode {sys.argv[1]}")
