"""Run every benchmark in this folder, one after another (``make bench``)."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import bandwidth  # noqa: E402
import compile_cache  # noqa: E402
import control_flow  # noqa: E402
import fusion  # noqa: E402
import generation  # noqa: E402
import gpu  # noqa: E402
import guide_example  # noqa: E402
import run_overhead  # noqa: E402
import threads  # noqa: E402
import threads_under_load  # noqa: E402
import training  # noqa: E402
import tuning  # noqa: E402
import workloads  # noqa: E402


def main():
    guide_example.main()
    run_overhead.main()
    threads.main()
    threads_under_load.main(threads_under_load.MODELS)
    fusion.main()
    workloads.main()
    bandwidth.main()
    generation.main([])
    tuning.main()
    compile_cache.main(warm_runs=5)
    control_flow.main()
    training.main()
    gpu.main()


if __name__ == "__main__":
    main()
