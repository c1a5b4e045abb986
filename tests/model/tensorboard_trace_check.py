"""TensorBoard's own loaders read what chorus's summary::trace_export wrote.

Run by tests/model/trace_tensorboard_test.cc with the interop Python (tests/core/interop_python.h):
    python tensorboard_trace_check.py LOGDIR EXPECTED_TSV
LOGDIR holds train/ (the event file with the graph) and plugins/profile/<run>/ (the profile).
EXPECTED_TSV: "node<TAB>name<TAB>op<TAB>device<TAB>input or -<TAB>dims" lines, then "host<TAB>name".
Checks:
  1. EventAccumulator(LOGDIR/train).Graph() is a GraphDef with exactly the expected nodes: names,
     ops, inputs, devices, "_output_shapes".
  2. TensorBoard's Graphs plugin (through the data provider TensorBoard serves it with) reports a
     run graph for "train" and serves it.
  3. The profile plugin (xprof, tensorboard-plugin-profile) lists the profile run, offers the
     trace viewer for it, names our host, and converts our XSpace into trace events that hold
     every layer's forward span on each replica's thread.
  4. <host>.trace.json.gz is gzip'ed Chrome trace JSON with the same spans.
Exits 0 when all hold; prints what differs otherwise.
"""

import gzip
import json
import logging
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def main():
    logdir, expected_path = sys.argv[1], sys.argv[2]
    nodes, host = [], None
    with open(expected_path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if parts[0] == "node":
                nodes.append(parts[1:])
            elif parts[0] == "host":
                host = parts[1]

    # 1. EventAccumulator.
    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(os.path.join(logdir, "train"))
    acc.Reload()
    check(acc.Tags()["graph"], "EventAccumulator sees no graph: %s" % acc.Tags())
    graph = acc.Graph()
    got = {n.name: n for n in graph.node}
    check([n.name for n in graph.node] == [e[0] for e in nodes],
          "node names %s, expected %s" % ([n.name for n in graph.node], [e[0] for e in nodes]))
    for name, op, device, inp, dims in nodes:
        n = got.get(name)
        if n is None:
            continue
        check(n.op == op, "%s: op %r, expected %r" % (name, n.op, op))
        check(n.device == device, "%s: device %r, expected %r" % (name, n.device, device))
        check(list(n.input) == ([] if inp == "-" else [inp]), "%s: input %s, expected %s" % (name, list(n.input), inp))
        shapes = [[d.size for d in s.dim] for s in n.attr["_output_shapes"].list.shape]
        check(shapes == [[int(d) for d in dims.split(",")]], "%s: _output_shapes %s, expected [%s]" % (name, shapes, dims))
    print("EventAccumulator.Graph(): %d nodes, e.g. %s %s on %s" %
          (len(graph.node), graph.node[-1].name, graph.node[-1].op, graph.node[-1].device))

    # 2. The Graphs plugin, as TensorBoard runs it.
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.graph import graphs_plugin

    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(logdir)
    mux.Reload()
    tb_context = base_plugin.TBContext(logdir=logdir, multiplexer=mux,
                                       data_provider=data_provider.MultiplexerDataProvider(mux, logdir))
    plugin = graphs_plugin.GraphsPlugin(tb_context)
    info = plugin.info_impl(context.RequestContext(), experiment="")
    check(info.get("train", {}).get("run_graph"), "Graphs plugin: no run graph for 'train': %s" % info)
    body, mime = plugin.graph_impl(context.RequestContext(), "train", None, False, experiment="")
    check(all(('name: "%s"' % e[0]) in body for e in nodes), "Graphs plugin's graph lacks nodes: %s" % body[:400])
    print("Graphs plugin: run 'train' has a run graph (%d bytes of %s)" % (len(body), mime))

    # 3. The profile plugin.
    from xprof import profile_plugin_loader
    from xprof.convert import raw_to_tool_data

    class Flags:
        master_tpu_unsecure_channel = ""

    tb_context.flags = Flags()
    profile = profile_plugin_loader.ProfilePluginLoader().load(tb_context)
    # The plugin logs its first look for its tools cache (<run>/.cached_tools.json, which it then
    # writes) as an ERROR with a traceback; only its warnings and errors of substance are wanted.
    logger = logging.getLogger("tensorboard.plugins.profile")
    logger.setLevel(logging.WARNING)
    logger.addFilter(lambda r: ".cached_tools.json" not in r.getMessage())
    runs = profile.runs_imp()
    check(len(runs) == 1, "profile plugin runs: %s, expected one" % runs)
    if runs:
        tools = profile.run_tools_imp(runs[0])
        check(any(t.startswith("trace_viewer") for t in tools), "profile plugin tools %s: no trace viewer" % tools)
        hosts = profile.host_impl(runs[0], "trace_viewer")
        check({"hostname": host} in hosts, "profile plugin hosts %s: %r missing" % (hosts, host))
        print("profile plugin: run %s, tools %s, hosts %s" % (runs[0], tools, hosts))
    run_dirs = os.listdir(os.path.join(logdir, "plugins", "profile"))
    run_dir = os.path.join(logdir, "plugins", "profile", run_dirs[0])
    data, _ = raw_to_tool_data.xspace_to_tool_data([os.path.join(run_dir, host + ".xplane.pb")], "trace_viewer", {})
    trace = json.loads(data)
    check_spans(trace, "xplane trace viewer")

    # 4. The gzip'ed Chrome trace.
    with gzip.open(os.path.join(run_dir, host + ".trace.json.gz"), "rt") as f:
        check_spans(json.load(f), "trace.json.gz")


def check_spans(trace, what):
    events = trace["traceEvents"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    per_thread = {}
    for e in events:
        # The timeline counts microseconds: a span shorter than 1 us (flatten's, often) has
        # duration 0, which xprof's trace viewer shows as an instant event ("i"), not a span.
        if e.get("ph") in ("X", "i"):
            per_thread.setdefault(threads.get((e["pid"], e["tid"]), "?"), []).append(e["name"])
    for replica in ("replica 0", "replica 1"):
        names = per_thread.get(replica, [])
        for layer in ("net", "conv2d", "max_pooling2d", "flatten", "dense"):
            # 2 steps, each one forward call of the model and of every layer on each replica (and
            # the build's call, on one of them).
            check(names.count(layer) >= 2, "%s: %r on %r %d times, expected 2 or more" %
                  (what, layer, replica, names.count(layer)))
    print("%s: threads %s, %d spans" % (what, sorted(per_thread), sum(len(v) for v in per_thread.values())))


if __name__ == "__main__":
    main()
    sys.exit(1 if failures else 0)
