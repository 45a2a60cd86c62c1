"""The stack sampler names the function a call spends its time in, and tells computing from waiting."""

from __future__ import annotations

import time
from pathlib import Path

from bench.stack_sampler import innermost, parse, report, sampled

HERE = (Path(__file__).parent.name,)  # this directory, as the "package" whose frames are counted


def spin(seconds: float) -> int:
    end, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        n += 1
    return n


def wait(seconds: float) -> None:
    time.sleep(seconds)


def caller(work, seconds: float) -> None:
    work(seconds)


def test_the_busy_function_is_the_most_sampled_frame():
    with sampled(every_s=0.02, packages=HERE) as samples:
        caller(spin, 0.6)
        wait(0.1)
    (frame, count), *_ = samples.top()
    assert frame.endswith("test_stack_sampler.py:spin"), samples.top()
    assert samples.taken >= 10 and count > samples.taken / 2, report("spin", samples)
    assert samples.cpu_s > 0.3, report("spin", samples)


def test_waiting_shows_as_wall_time_without_cpu_time():
    with sampled(every_s=0.02, packages=HERE) as samples:
        caller(wait, 0.6)
    assert samples.top(1)[0][0].endswith("test_stack_sampler.py:wait"), samples.top()
    assert samples.wall_s >= 0.6 and samples.cpu_s < samples.wall_s / 2, report("wait", samples)


def test_parse_reads_one_threads_stacks_outermost_first():
    dump = """Thread 0x00007f0000000001 (most recent call first):
  File "/x/vllm/worker.py", line 9 in load
  File "/x/app.py", line 3 in main

Thread 0x00007f0000000002 (most recent call first):
  File "/x/other.py", line 1 in idle
"""
    (stack,) = parse(dump, thread="Thread 0x00007f0000000001")
    assert stack == [("/x/app.py", "main"), ("/x/vllm/worker.py", "load")]
    assert innermost(stack) == "vllm/worker.py:load"
    assert innermost([("/x/app.py", "main")]) is None
