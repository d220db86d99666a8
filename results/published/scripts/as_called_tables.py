"""The headline tables as Markdown: each family's call as a user makes it beside its executor's device time.

Reads the JSON files the device scripts write (``$OUT/splitk-as-called.json``, ``ozaki2-as-called.json``,
``ozaki1-as-called.json``, ``strassen-as-called.json``, ``first-call.json``) and prints one table per file and
family: as called (ms) and its ratio to the reference, device only (ms) and its ratio, the reference's time, the
host time of one call, and the regime (SM clock, power, throttle reasons), headed by the device and versions.
``--h100`` prints the H100's record from the committed exports first (device time only: its as-called times were
never measured, and the columns say so). A value that is null prints as "not measured"; nothing is filled in.

Run from the repository root::

    PYTHONPATH=$PWD python results/published/scripts/as_called_tables.py [--h100] FILE.json ...

The shape of a file (one JSON object; every time in seconds, per call, a median; null where not measured)::

    {
      "script": "results/published/scripts/<the script>.py",
      "environment": {...},        # experiments.core.environment.environment(backend): device, driver,
                                   #   cuda_runtime, cublas, cupy, numpy, git_commit, power_limit_w, ...
      "regime": "sustained",       # or "cold"
      "records": [
        {
          "family": "splitk",      # splitk | strassen | ozaki2 | ozaki1 | outofcore
          "call": "splitk.matmul(A, B, out=C)",   # the public call exactly as timed
          "size": 4096,            # a square N x N x N product, or instead:
          "m": 16, "n": 16, "k": 1048576,
          "as_called_s": 1.2e-4,   # the call issued `calls` times back to back, then ONE synchronise, by
                                   #   time.perf_counter, over `calls`; median of >= 10 samples
          "host_s": 3.0e-5,        # host time of ONE call: perf_counter around the call alone on an idle
                                   #   device, no synchronise after it; median
          "device_s": 7.5e-5,      # the executor (kept plan or configuration by hand) by CUDA events,
                                   #   the protocol of experiments.core.timing; null where not measured
          "reference_s": 9.6e-5,   # the library GEMM (cupy.matmul(A, B, out=C)) as called, same rounds
          "ratio_as_called": 0.80, # reference_s / as_called_s (above 1: faster than the library GEMM)
          "ratio_device": 1.28,    # the reference's device time / device_s in the same rounds; or null
          "reference_host_s": 2e-5,  # optional: host time of one reference call
          "config": {...},         # what the call resolved to, or the options passed (free-form)
          "telemetry": {"sm_clock_mhz": 1650, "power_w": 690, "throttle_reasons": 4},
          "calls": 40, "samples": 10   # optional
        }
      ]
    }

A first-call record has the same envelope and ``family``, ``call``, ``size`` (or m, n, k), ``cold_s`` (first call in
a new process with an empty kernel cache), ``warm_s`` (first call in a new process, cache filled) and optionally
``repeat_s`` (a repeated call in the warm process; ``cold_repeat_s``: in the cold one); a file's first-call records
print as one table (method, call, size, cold first call, cold repeat, warm first call, warm repeat).
``experiments.core.ascalled`` times calls this way (``as_called``, ``host_seconds``, ``time_called``);
``experiments.papers.headline.record`` builds a record with both ratios.

A file without ``records`` that one of the device scripts wrote (``splitk_as_called.py``, ``ozaki1_as_called.py``,
``ozaki2_as_called.py``, ``strassen_as_called.py``, ``first_call.py``: named by its ``script`` field or its file
name) is converted on reading by the adapter the script itself uses (``experiments.papers.as_called_formats``).
"""
import argparse
import sys

from experiments.papers.headline import h100_documents, load, markdown


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="JSON files of as-called or first-call records")
    parser.add_argument("--h100", action="store_true", help="the H100's record from the committed exports first")
    args = parser.parse_args(argv)
    if not args.files and not args.h100:
        parser.error("give JSON files, --h100, or both")
    try:
        docs = (h100_documents() if args.h100 else []) + [load(path) for path in args.files]
    except (ValueError, FileNotFoundError) as exc:
        print(f"as_called_tables: {exc}", file=sys.stderr)
        return 2
    print(markdown(docs), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
